"""Normalized ReLU linear attention, chunked (C = 16), eps = 0, dividing as IEEE does.

What is different: the normalizer is carried as one more value column. v is augmented to
[v, 1] (V + 1 columns), so a single state S' = [S | z] of shape [K, V + 1] and a single product
give the numerator (first V columns) and the denominator (last column) together. The features
are relu(q), relu(k), applied here. Chunks come from ``torch.split`` along T; the causal mask is
a float ``tril`` *multiplied* into the scores. The division N / Z is plain torch division with
eps = 0: a row whose denominator is exactly 0 (a query whose features are all zero, or no key
yet with a feature in common) returns 0/0 = NaN, the IEEE quotient. Its autograd backward then
carries that NaN through the mask multiply (0 · NaN = NaN) into the later keys of the chunk.
fp32 throughout; takes the pair (S_0, z_0) and returns the pair (S_T, z_T); no packed sequences.
"""

from __future__ import annotations

import torch

CHUNK = 16


def relu_normalized_attention(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    fq = torch.relu(q.float()).transpose(1, 2)  # [B, H, T, K]
    fk = torch.relu(k.float()).transpose(1, 2)
    ones = torch.ones(B, H, T, 1, device=q.device)
    va = torch.cat([v.float().transpose(1, 2), ones], dim=-1)  # [B, H, T, V + 1]
    if initial_state is None:
        state = torch.zeros(B, H, K, V + 1, device=q.device)
    else:
        S0, z0 = initial_state
        state = torch.cat([S0.float(), z0.float()[..., None]], dim=-1)

    mask = torch.ones(CHUNK, CHUNK, device=q.device).tril()
    outs = []
    for qc, kc, vc in zip(
        fq.split(CHUNK, dim=2), fk.split(CHUNK, dim=2), va.split(CHUNK, dim=2), strict=True
    ):
        n = qc.shape[2]
        scores = (qc @ kc.transpose(-1, -2)) * mask[:n, :n]
        outs.append((scores @ vc + qc @ state) * scale)
        state = state + kc.transpose(-1, -2) @ vc
    both = torch.cat(outs, dim=2) if outs else va.new_zeros(B, H, 0, V + 1)
    o = both[..., :V] / both[..., V:]
    final = (state[..., :V], state[..., V]) if output_final_state else None
    return o.transpose(1, 2).to(q.dtype), final
