"""Gated DeltaNet in the layout of most PyTorch attention code: heads-first, state value-major.

q, k: [B, H, T, K], v: [B, H, T, V], g and beta: [B, H, T]; the state M = S^T is [B, H, V, K],
taken and returned so (nothing is transposed back for the caller). A token loop in fp32 with
einsum contractions; no cu_seqlens, no in-kernel L2 norm.
"""

from __future__ import annotations

import torch


def gated_delta_heads_first(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False
):
    B, H, T, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    M = torch.zeros(B, H, V, K, device=q.device) if initial_state is None else initial_state.float()
    qf, kf, vf, bf = q.float() * scale, k.float(), v.float(), beta.float()
    decay = None if g is None else torch.exp(g.float())
    outs = []
    for t in range(T):
        if decay is not None:
            M = M * decay[:, :, t, None, None]
        kt = kf[:, :, t]
        err = vf[:, :, t] - torch.einsum("bhvk,bhk->bhv", M, kt)
        M = M + torch.einsum("bhv,bhk->bhvk", bf[:, :, t, None] * err, kt)
        outs.append(torch.einsum("bhvk,bhk->bhv", M, qf[:, :, t]))
    o = torch.stack(outs, dim=2).to(q.dtype)
    return o, (M if output_final_state else None)
