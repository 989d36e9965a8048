"""Gated linear attention (vector gate, GLA), token by token, packed sequences run in lockstep.

What is different: packed sequences are not run one after another. They are gathered into a
zero-padded [N, L_max, H, ·] batch (a padded step has g = 0, k = 0, v = 0, so it leaves the
state exactly as it was), all N recurrences advance together, and the outputs are scattered
back to their packed positions. Each step is elementwise broadcasting, no matmul:
S ← exp(g_t)[:, :, None] · S + k_t[:, :, None] · v_t[:, None, :], and
o_t = s Σ_k q_t[k] S[k, :] by a ``sum`` over the key axis. fp32 state; inputs upcast.
"""

from __future__ import annotations

import torch


def gla_recurrent(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    qf, kf, vf = q.float(), k.float(), v.float()
    gf = torch.zeros(B, T, H, K, device=q.device) if g is None else g.float()
    if gf.dim() == 3:  # a scalar gate, broadcast over the key dimension
        gf = gf[..., None].expand(B, T, H, K)

    if cu_seqlens is None:
        N, Lmax = B, T
        index = None
        qp, kp, vp, gp = qf, kf, vf, gf
    else:
        cu = cu_seqlens.to(torch.long)
        lengths = cu[1:] - cu[:-1]
        N = lengths.numel()
        Lmax = int(lengths.max()) if N else 0
        pos = torch.arange(Lmax, device=q.device)
        valid = pos[None, :] < lengths[:, None]  # [N, Lmax]
        index = (cu[:-1, None] + pos[None, :]).clamp(max=max(T - 1, 0))  # [N, Lmax]

        def gather(x):
            picked = x[0][index]  # [N, Lmax, H, ·]
            return torch.where(valid[:, :, None, None], picked, 0.0)

        qp, kp, vp, gp = gather(qf), gather(kf), gather(vf), gather(gf)

    S = (
        q.new_zeros(N, H, K, V, dtype=torch.float32)
        if initial_state is None
        else initial_state.float()
    )
    outs = []
    for t in range(Lmax):
        S = torch.exp(gp[:, t])[..., None] * S + kp[:, t, :, :, None] * vp[:, t, :, None, :]
        outs.append((qp[:, t, :, :, None] * S).sum(dim=-2) * scale)
    o = torch.stack(outs, dim=1) if outs else vf.new_zeros(N, 0, H, V)

    if index is not None:
        packed = vf.new_zeros(T, H, V)
        packed = packed.index_put((index[valid],), o[valid])
        o = packed[None]
    return o.to(q.dtype), (S if output_final_state else None)
