"""Normalized linear attention, token by token, dividing by a reciprocal then a multiply.

What is different: the normalizer is never divided by. Each step forms the numerator
N_t = s φ(q_t)^T S_t and the denominator Z_t = s φ(q_t)·z_t + eps, takes ``1 / Z_t`` and
multiplies N_t by it. ``reciprocal_attention`` does that in float32 (one reciprocal, one
multiply, then the output's rounding to the input dtype); ``reciprocal_attention_lowp`` first
rounds N_t and Z_t to the input dtype and takes the reciprocal and the product there (the way
code under autocast often ends up doing it). Both apply elu(x) + 1 themselves, in the
``where(x > 0, x + 1, exp(x))`` form, keep fp32 states S, z updated by a per-step decay
exp(g_t) (scalar gate), take packed sequences, and have an extra keyword option ``eps``
(default 1e-6, added in float32).
"""

from __future__ import annotations

import torch


def _elu1(x: torch.Tensor) -> torch.Tensor:
    # exp of the clamped input: the branch torch.where discards must not be inf (its gradient
    # would be 0 * inf).
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


def _run(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens, eps, lowp):
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else scale
    fq, fk, fv = _elu1(q.float()), _elu1(k.float()), v.float()
    if cu_seqlens is None:
        segments = [(slice(None), 0, T, slice(None))]
    else:
        cuts = cu_seqlens.tolist()
        segments = [
            (slice(0, 1), cuts[i], cuts[i + 1], slice(i, i + 1)) for i in range(len(cuts) - 1)
        ]
    rows = B if cu_seqlens is None else len(segments)
    if initial_state is None:
        S0 = q.new_zeros(rows, H, K, V, dtype=torch.float32)
        z0 = q.new_zeros(rows, H, K, dtype=torch.float32)
    else:
        S0, z0 = initial_state
    out = [None] * T
    finals_S, finals_z = [], []
    for batch, start, stop, row in segments:
        S, z = S0[row].float(), z0[row].float()
        for t in range(start, stop):
            if g is not None:
                a = torch.exp(g[batch, t].float())  # [b, H]
                S = S * a[..., None, None]
                z = z * a[..., None]
            kt, qt = fk[batch, t], fq[batch, t]
            S = S + kt[..., :, None] * fv[batch, t][..., None, :]
            z = z + kt
            num = torch.einsum("bhk,bhkv->bhv", qt, S) * s
            den = (qt * z).sum(-1) * s + eps
            if lowp:
                o_t = num.to(q.dtype) * torch.reciprocal(den.to(q.dtype))[..., None]
            else:
                o_t = (num * torch.reciprocal(den)[..., None]).to(q.dtype)
            out[t] = o_t
        finals_S.append(S)
        finals_z.append(z)
    o = torch.stack(out, dim=1) if T else q.new_zeros(B, 0, H, V)
    final = (torch.cat(finals_S), torch.cat(finals_z)) if output_final_state else None
    return o, final


def reciprocal_attention(
    q,
    k,
    v,
    g=None,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    eps=1e-6,
):
    return _run(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens, eps, False)


def reciprocal_attention_lowp(
    q,
    k,
    v,
    g=None,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    eps=1e-6,
):
    return _run(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens, eps, True)
