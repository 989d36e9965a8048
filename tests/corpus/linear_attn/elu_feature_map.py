"""Katharopoulos et al. (2020) causal linear attention, as its paper writes it, with φ = elu + 1.

What is different: the signature is the paper's, not FLA's: ``(q, k, v, /, eps=1e-6)`` with
q, k, v positional-only, no scale (the features are compared unscaled), no gate, no states
(returns ``(o, None)``). The feature map is applied the way most PyTorch code applies it,
``F.elu(x) + 1`` (elu's own expm1 branch, then + 1: for x << 0 the feature carries an
absolute error of about 2u rather than a relative one). The key sum z_t comes from
``torch.cumsum`` over T, the numerator from a token loop over a fp32 state, and
o_t = φ(q_t)^T S_t / (φ(q_t)·z_t + eps) by plain division, eps added in fp32. Inputs upcast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_linear_attention(q, k, v, /, eps=1e-6):
    fq = F.elu(q.float()) + 1
    fk = F.elu(k.float()) + 1
    vf = v.float()
    B, T, H, K = q.shape
    z = torch.cumsum(fk, dim=1)  # [B, T, H, K]
    den = torch.einsum("bthk,bthk->bth", fq, z) + eps
    S = torch.zeros(B, H, K, v.shape[-1], device=q.device)
    num = []
    for t in range(T):
        S = S + torch.einsum("bhk,bhv->bhkv", fk[:, t], vf[:, t])
        num.append(torch.einsum("bhk,bhkv->bhv", fq[:, t], S))
    o = torch.stack(num, dim=1) / den[..., None]
    return o.to(q.dtype), None
