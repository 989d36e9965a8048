"""Linear attention as a literal prefix sum of outer products (no decay, unnormalized).

What is different: the state is never updated step by step and never formed chunk by chunk.
Every token's outer product k_t v_t^T is materialised as a [B, T, H, K, V] tensor and
``torch.cumsum`` over T turns it into every S_t at once (the textbook definition
S_t = S_0 + Σ_{j<=t} k_j v_j^T, read literally); the output is an ``einsum`` of q_t with S_t.
O(T·K·V) memory, by design. Inputs are upcast to float32 once, the output rounded back once.
It takes no decay (no ``g`` parameter) and no ``cu_seqlens``.
"""

from __future__ import annotations

import torch


def cumsum_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    batch, _, heads, dk = q.shape
    dv = v.shape[-1]
    if scale is None:
        scale = dk**-0.5
    qf, kf, vf = q.float(), k.float(), v.float()

    # outer[b, t, h] = k_t v_t^T ; prefix[b, t, h] = Σ_{j<=t} k_j v_j^T
    outer = kf.unsqueeze(-1) * vf.unsqueeze(-2)
    prefix = torch.cumsum(outer, dim=1)
    if initial_state is not None:
        prefix = prefix + initial_state.float().unsqueeze(1)

    out = torch.einsum("bthk,bthkv->bthv", qf, prefix) * scale

    final = None
    if output_final_state:
        if q.shape[1] > 0:
            final = prefix[:, -1].clone()
        elif initial_state is not None:
            final = initial_state.float().clone()
        else:
            final = q.new_zeros(batch, heads, dk, dv, dtype=torch.float32)
    return out.to(q.dtype), final
