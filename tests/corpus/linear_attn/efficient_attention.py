"""Causal "efficient attention": a softmax over each query's features, exp of each key.

The form of linear-attention-transformer and of performer-pytorch's ``no_projection``: φ_q(q) =
softmax(q) over the feature dimension, φ_k(k) = exp(k), o_t = φ_q(q_t)·S_t / (φ_q(q_t)·z_t + eps)
with no scale (the softmax already sums to 1). Written heads-first the way those libraries are,
with cumulative sums over tokens (no recurrence), everything in fp32, one cast at the end.
Declared: --query-feature-map softmax --feature-map exp --normalized --eps 1e-06 --scale one
--layout heads-first.
"""

from __future__ import annotations

import torch


def efficient_causal(q, k, v, eps=1e-6):
    dtype = q.dtype
    q = torch.softmax(q.float(), dim=-1)  # [B, H, T, K]
    k = torch.exp(k.float())
    context = torch.cumsum(torch.einsum("bhtk,bhtv->bhtkv", k, v.float()), dim=2)
    key_sum = torch.cumsum(k, dim=2)
    num = torch.einsum("bhtk,bhtkv->bhtv", q, context)
    den = torch.einsum("bhtk,bhtk->bht", q, key_sum) + eps
    return (num / den[..., None]).to(dtype)
