"""Gated linear attention written heads-first, with the state stored value-major.

q, k: [B, H, T, K], v: [B, H, T, V], g: [B, H, T] (log decay); the state is S^T, [B, H, V, K],
as code that updates ``S += v k^T`` keeps it. A token loop in fp32, cast to the input dtype once.
"""

from __future__ import annotations

import torch


def heads_first_gated(q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False):
    B, H, T, K = q.shape
    V = v.shape[-1]
    if scale is None:
        scale = K**-0.5
    if initial_state is None:
        state = torch.zeros(B, H, V, K, dtype=torch.float32, device=q.device)
    else:
        state = initial_state.float()
    qf, kf, vf = q.float() * scale, k.float(), v.float()
    outs = []
    for t in range(T):
        if g is not None:
            state = state * torch.exp(g[:, :, t].float())[..., None, None]
        state = state + vf[:, :, t, :, None] * kf[:, :, t, None, :]
        outs.append((state @ qf[:, :, t, :, None])[..., 0])
    o = torch.stack(outs, dim=2).to(q.dtype)
    return o, (state if output_final_state else None)
