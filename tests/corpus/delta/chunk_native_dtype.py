"""Gated DeltaNet chunk form (C = 64) computed in the input dtype, inverse by recursive halving.

What is different: no upcast. For fp16 / bf16 inputs every tensor of the chunk form is in the
input dtype: the decays (exp of fp32 gate differences, then rounded), the triangular inverse,
W, U, the corrected values, the output and the *carried* state between chunks (the final state
is returned in the input dtype). Matmuls are torch's 16-bit matmuls. Only the optional L2 norm
is formed in fp32 (its result stored in the input dtype). The inverse of the unit
lower-triangular L is built by recursive halving,

    [[L11, 0], [L21, L22]]^-1 = [[T11, 0], [-T22 L21 T11, T22]],

down to 1 x 1 blocks. Gates none / scalar. No varlen. Autograd backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64


def _tril_inverse(L: torch.Tensor) -> torch.Tensor:
    """Inverse of a unit lower-triangular [..., n, n] matrix, by halving."""
    n = L.shape[-1]
    if n == 1:
        return torch.ones_like(L)
    h = n // 2
    T11 = _tril_inverse(L[..., :h, :h])
    T22 = _tril_inverse(L[..., h:, h:])
    T21 = -(T22 @ (L[..., h:, :h] @ T11))
    top = torch.cat([T11, torch.zeros_like(L[..., :h, h:])], -1)
    bottom = torch.cat([T21, T22], -1)
    return torch.cat([top, bottom], -2)


def chunk_gated_delta_rule_native(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
):
    dt = q.dtype
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    if use_qk_l2norm_in_kernel:
        # Formed in fp32 (fp16's Σx² + 1e-6 is subnormal for small x and the rsqrt backward
        # overflows), stored back in the input dtype.
        q = (q.float() * torch.rsqrt(q.float().square().sum(-1, keepdim=True) + 1e-6)).to(dt)
        k = (k.float() * torch.rsqrt(k.float().square().sum(-1, keepdim=True) + 1e-6)).to(dt)
    q = q * scale
    pad = (CHUNK - T % CHUNK) % CHUNK
    n = (T + pad) // CHUNK
    # [B, H, n, C, X]
    qc, kc, vc = (
        F.pad(x.transpose(1, 2), (0, 0, 0, pad)).reshape(B, H, n, CHUNK, x.shape[-1])
        for x in (q, k, v)
    )
    bc = F.pad(beta.transpose(1, 2), (0, pad)).reshape(B, H, n, CHUNK)
    if g is None:
        G = torch.zeros(B, H, n, CHUNK, device=q.device)
    else:
        G = F.pad(g.float().transpose(1, 2), (0, pad)).reshape(B, H, n, CHUNK).cumsum(-1)
    strict = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril(-1)
    incl = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    gap = G[..., :, None] - G[..., None, :]
    decay = gap.masked_fill(~incl, float("-inf")).exp().to(dt)
    A = ((bc[..., None] * kc) @ kc.transpose(-1, -2) * decay).masked_fill(~strict, 0)
    Tm = _tril_inverse(A + torch.eye(CHUNK, dtype=dt, device=q.device))
    U = Tm @ (bc[..., None] * vc)
    W = Tm @ (bc[..., None] * kc * G.exp().to(dt)[..., None])
    att = (qc @ kc.transpose(-1, -2)) * decay
    qg = qc * G.exp().to(dt)[..., None]
    kg = kc * (G[..., -1:] - G).exp().to(dt)[..., None]
    last = G[..., -1].exp().to(dt)
    S = (
        torch.zeros(B, H, K, V, dtype=dt, device=q.device)
        if initial_state is None
        else initial_state.to(dt)
    )
    outs = []
    for i in range(n):
        Vn = U[:, :, i] - W[:, :, i] @ S
        outs.append(qg[:, :, i] @ S + att[:, :, i] @ Vn)
        S = last[:, :, i, None, None] * S + kg[:, :, i].transpose(-1, -2) @ Vn
    o = torch.cat(outs, 2)[:, :, :T] if outs else vc.new_zeros(B, H, 0, V)
    return o.transpose(1, 2).contiguous(), (S if output_final_state else None)
