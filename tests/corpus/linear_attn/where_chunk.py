"""Chunked linear attention with C = 128, masks by ``torch.where``, batched as (B·H) bmm's.

What is different: batch and heads are flattened into one leading dimension and every product
is a ``torch.bmm``/``torch.baddbmm``. The packed sequence is cut into pieces at every chunk
boundary *and* every sequence boundary in one list, walked in order; a piece that starts a
sequence loads that sequence's initial state, a piece that ends one records its final state.
No padding: the last piece of a sequence is simply shorter. Masking is ``torch.where`` on the
decay exponent (-inf above the diagonal, so exp gives 0) and again on the weighted scores.
Scalar gate; decays are exp of differences of piece-local cumulative sums. fp32 throughout.
"""

from __future__ import annotations

import torch

CHUNK = 128


def where_chunk_attention(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else scale
    # [B*H, T, ·]
    qf = q.float().permute(0, 2, 1, 3).reshape(B * H, T, K)
    kf = k.float().permute(0, 2, 1, 3).reshape(B * H, T, K)
    vf = v.float().permute(0, 2, 1, 3).reshape(B * H, T, V)
    gf = None if g is None else g.float().permute(0, 2, 1).reshape(B * H, T)

    bounds = [0, T] if cu_seqlens is None else [int(c) for c in cu_seqlens]
    N = B if cu_seqlens is None else len(bounds) - 1
    S0 = (
        torch.zeros(N, H, K, V, device=q.device) if initial_state is None else initial_state.float()
    )

    pieces = []  # (sequence index, start, stop, first piece?, last piece?)
    for n in range(len(bounds) - 1):
        a, b = bounds[n], bounds[n + 1]
        starts = list(range(a, b, CHUNK)) or [a]
        for i, c0 in enumerate(starts):
            pieces.append((n, c0, min(c0 + CHUNK, b), i == 0, i == len(starts) - 1))

    o = qf.new_zeros(B * H, T, V)
    finals = [None] * N
    S = None
    for n, c0, c1, first, last in pieces:
        if first:
            S = S0.reshape(N * H, K, V) if cu_seqlens is None else S0[n]
        L = c1 - c0
        qc, kc, vc = qf[:, c0:c1], kf[:, c0:c1], vf[:, c0:c1]
        if L > 0:
            causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
            G = qf.new_zeros(qf.shape[0], L) if gf is None else gf[:, c0:c1].cumsum(1)
            expo = torch.where(causal, G[:, :, None] - G[:, None, :], float("-inf"))
            A = torch.where(causal, torch.bmm(qc, kc.transpose(1, 2)) * torch.exp(expo), 0.0)
            qg = qc * (torch.exp(G) * s)[:, :, None]
            o[:, c0:c1] = torch.baddbmm(torch.bmm(qg, S), A, vc, alpha=s)
            kg = kc * torch.exp(G[:, -1:] - G)[:, :, None]
            S = torch.baddbmm(S * torch.exp(G[:, -1])[:, None, None], kg.transpose(1, 2), vc)
        if last:
            finals[n] = S
    out = o.reshape(B, H, T, V).permute(0, 2, 1, 3).to(q.dtype)
    if not output_final_state:
        return out, None
    if cu_seqlens is None:
        return out, finals[0].reshape(N, H, K, V)
    return out, torch.stack(finals)
