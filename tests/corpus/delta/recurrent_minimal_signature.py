"""DeltaNet with the smallest possible signature: ``fn(q, k, v, beta)``.

What is different: the function takes nothing but the four tensors. It applies the default
scale K^-1/2 itself, never normalises q and k, starts from a zero state, returns no final state
(``(o, None)``) and knows nothing of packed sequences: what a research notebook writes. Batch and
heads are flattened into one bmm batch; the state is [B*H, K, V] fp32; the correction is written
as S - (beta k)(k^T S) + (beta k) v^T, i.e. the projection form, with two bmm's per token.
"""

from __future__ import annotations

import torch


def delta_rule(q, k, v, beta):
    B, T, H, K = q.shape
    V = v.shape[-1]
    flat = lambda x: x.float().transpose(1, 2).reshape(B * H, T, x.shape[-1])  # noqa: E731
    qf, kf, vf = flat(q), flat(k), flat(v)
    bf = beta.float().transpose(1, 2).reshape(B * H, T, 1)
    qf = qf / K**0.5
    S = qf.new_zeros(B * H, K, V)
    o = []
    for t in range(T):
        kt = kf[:, t : t + 1]  # [BH, 1, K]
        bk = (bf[:, t : t + 1] * kt).transpose(1, 2)  # [BH, K, 1]
        S = S - bk @ (kt @ S) + bk @ vf[:, t : t + 1]
        o.append(qf[:, t : t + 1] @ S)
    o = torch.cat(o, 1) if o else vf.new_zeros(B * H, 0, V)
    return o.reshape(B, H, T, V).transpose(1, 2).to(q.dtype), None
