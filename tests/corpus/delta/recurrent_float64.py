"""Delta rule token recurrence in float64 throughout, rounded once at the end.

What is different: every input (fp32, fp16 or bf16) is promoted to float64, the recurrence runs
in float64 with ``torch.addcmul`` rank-one writes, and only o (to the input dtype) and the final
state (to fp32) are rounded, once each. Packed sequences are *unpacked into a padded batch*:
each sequence becomes one row, right-padded with k = 0, beta = 0, g = 0 (the state is frozen
there), so all sequences advance together in one loop over the longest length. Gates none /
scalar / vector. Autograd backward (in float64).
"""

from __future__ import annotations

import torch

F64 = torch.float64


def _unpack(x, cu, width):
    """[1, T, ...] packed -> [N, width, ...] zero right-padded."""
    N = len(cu) - 1
    out = x.new_zeros(N, width, *x.shape[2:])
    rows = []
    for n in range(N):
        seg = x[0, cu[n] : cu[n + 1]]
        rows.append(torch.cat([seg, out[n, : width - seg.shape[0]]], 0))
    return torch.stack(rows) if rows else out


def kda_recurrent_f64(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else float(scale)
    Q, Kk, Vv, Bt = (x.to(F64) for x in (q, k, v, beta))
    Gt = None if g is None else g.to(F64)
    if use_qk_l2norm_in_kernel:
        Q = Q / (Q.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
        Kk = Kk / (Kk.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    if cu_seqlens is not None:
        cu = [int(c) for c in cu_seqlens]
        lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
        L = max(lens, default=0)
        Q, Kk, Vv, Bt = (_unpack(x, cu, L) for x in (Q, Kk, Vv, Bt))
        if Gt is not None:
            Gt = _unpack(Gt, cu, L)
    else:
        L = T
    N = Q.shape[0]
    S = Q.new_zeros(N, H, K, V) if initial_state is None else initial_state.to(F64)
    outs = []
    for t in range(L):
        if Gt is not None:
            a = Gt[:, t].exp()
            S = S * (a[..., None, None] if a.dim() == 2 else a[..., None])
        kt = Kk[:, t]
        pred = (kt[..., None] * S).sum(-2)
        corr = Bt[:, t, :, None] * (Vv[:, t] - pred)
        S = torch.addcmul(S, kt[..., None], corr[..., None, :])
        outs.append(s * (Q[:, t, :, :, None] * S).sum(-2))
    o = torch.stack(outs, 1) if outs else Q.new_zeros(N, 0, H, V)
    if cu_seqlens is not None:
        o = torch.cat([o[n, : lens[n]] for n in range(N)], 0).unsqueeze(0) if N else o
    return o.to(q.dtype), (S.float() if output_final_state else None)
