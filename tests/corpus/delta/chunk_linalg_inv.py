"""DeltaNet (no gate) in the chunk form with the inverse from ``torch.linalg.inv`` (LU, pivoting).

What is different: the per-chunk matrix (I + A), A = strict_tril(diag(beta) K K^T), is inverted
by a *general* solver (``torch.linalg.inv``: LU with partial pivoting), for every chunk of every
head in one batched call before the scan. That is correct (it is the inverse, to rounding), but
LU mixes rows in floating point: an output can move by an ulp when a *later* token of its chunk
changes. The sequence is zero-padded to a multiple of C = 32 (zero beta and keys write nothing)
and the chunks are a reshape. Fixed chunk size 32; no gate argument; no cu_seqlens. Autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 32


def delta_rule_chunk32(
    q,
    k,
    v,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    if scale is None:
        scale = K**-0.5
    x = [t.float().transpose(1, 2) for t in (q, k, v)]  # [B, H, T, *]
    qf, kf, vf = x
    bf = beta.float().transpose(1, 2)  # [B, H, T]
    if use_qk_l2norm_in_kernel:
        qf = qf * (qf.pow(2).sum(-1, keepdim=True) + 1e-6).rsqrt()
        kf = kf * (kf.pow(2).sum(-1, keepdim=True) + 1e-6).rsqrt()
    pad = -T % CHUNK
    qf, kf, vf = (F.pad(t, (0, 0, 0, pad)) for t in (qf, kf, vf))
    bf = F.pad(bf, (0, pad))
    N = (T + pad) // CHUNK
    qc = qf.reshape(B, H, N, CHUNK, K)
    kc = kf.reshape(B, H, N, CHUNK, K)
    vc = vf.reshape(B, H, N, CHUNK, V)
    bc = bf.reshape(B, H, N, CHUNK, 1)

    eye = torch.eye(CHUNK, device=q.device)
    A = torch.tril(bc * (kc @ kc.transpose(-1, -2)), diagonal=-1)
    Tinv = torch.linalg.inv(eye + A)
    U = Tinv @ (bc * vc)
    W = Tinv @ (bc * kc)
    Pqk = torch.tril(qc @ kc.transpose(-1, -2))

    S = (
        q.new_zeros(B, H, K, V, dtype=torch.float32)
        if initial_state is None
        else initial_state.float()
    )
    out = []
    for n in range(N):
        Vn = U[:, :, n] - W[:, :, n] @ S
        out.append(scale * (qc[:, :, n] @ S + Pqk[:, :, n] @ Vn))
        S = S + kc[:, :, n].transpose(-1, -2) @ Vn
    o = torch.cat(out, 2) if out else vf.new_zeros(B, H, 0, V)
    o = o[:, :, :T].transpose(1, 2).to(q.dtype)
    return o, (S if output_final_state else None)
