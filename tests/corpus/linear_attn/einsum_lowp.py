"""Quadratic (parallel) linear attention in einsum notation, computed in the input dtype.

What is different: no upcast anywhere. q is scaled in its own dtype, the T x T score matrix
q k^T is an ``einsum`` stored in the input dtype (fp16/bf16 scores), masked with ``tril``,
and multiplied by v in the input dtype; the initial state is cast down to the input dtype and
its contribution (also stored in the input dtype) added to the output in that dtype. The final
state is k^T v (an einsum over T) plus S_0, formed in the input dtype as well and only widened
to float32 on return. A term of the output meets, besides the output's own rounding, three
roundings to the input dtype: the scaled query (or the cast S_0), the score (or the q·S_0
product), and the partial output before the initial-state part is added.
"""

from __future__ import annotations

import torch


def einsum_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    T, dk = q.shape[1], q.shape[-1]
    if scale is None:
        scale = dk**-0.5
    qs = q * scale
    scores = torch.einsum("bthk,bshk->bhts", qs, k)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, 0)
    out = torch.einsum("bhts,bshv->bthv", scores, v)
    if initial_state is not None:
        out = out + torch.einsum("bthk,bhkv->bthv", qs, initial_state.to(q.dtype))

    final = None
    if output_final_state:
        kv = torch.einsum("bthk,bthv->bhkv", k, v)
        if initial_state is not None:
            kv = kv + initial_state.to(q.dtype)
        final = kv.float()
    return out, final
