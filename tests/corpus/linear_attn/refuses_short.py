"""A recurrent kernel that refuses T < H, as some FLA releases do (they read such a call as a
heads-first one and raise).

What is different: it raises ``ValueError`` on T < H, so it is only correct where it is called,
and declares that (``--seq-len-at-least-heads``). Token loop over a batched state with
``torch.addcmul``; decayed by exp(g) per token; no varlen.
"""

from __future__ import annotations

import torch


def chunk_refusing_short(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False
):
    B, T, H, K = q.shape
    if T < H:
        raise ValueError(f"got T={T} < H={H}: are the inputs heads-first? (refused)")
    scale = K**-0.5 if scale is None else scale
    S = (
        torch.zeros(B, H, K, v.shape[-1])
        if initial_state is None
        else initial_state.float().clone()
    )
    outs = []
    for t in range(T):
        if g is not None:
            S = S * torch.exp(g[:, t].float())[..., None, None]
        S = torch.addcmul(S, k[:, t].float()[..., :, None], v[:, t].float()[..., None, :])
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t].float() * scale, S))
    return torch.stack(outs, 1).to(q.dtype), (S if output_final_state else None)
