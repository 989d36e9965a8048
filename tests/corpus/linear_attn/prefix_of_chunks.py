"""Chunked linear attention whose inter-chunk states come from one ``cumsum`` over chunks.

What is different: no recurrence between chunks, sequential or otherwise. Each chunk's own
key-value sum K_c^T V_c is formed for all chunks at once (``torch.einsum`` over the padded,
reshaped sequence), and the state entering chunk c is S_0 plus an *exclusive* ``torch.cumsum``
of those sums over the chunk axis. The intra-chunk part is a ``masked_fill``-masked score
matrix. No decay (no ``g`` parameter). The signature carries extra keyword options with
defaults that do not change the function: ``chunk_size`` (any positive size; 64 by default),
``head_first`` (inputs laid out [B, H, T, ·] instead of [B, T, H, ·]) and ``out_dtype``
(default: the input dtype). fp32 inside; packed sequences one at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _dense(q, k, v, S0, scale, C):
    # heads-first float32: q, k [B, H, L, K], v [B, H, L, V], S0 [B, H, K, V]
    B, H, L, K = q.shape
    V = v.shape[-1]
    if L == 0:
        return v.new_zeros(B, H, 0, V), S0
    pad = (-L) % C
    n = (L + pad) // C
    qc = F.pad(q, (0, 0, 0, pad)).reshape(B, H, n, C, K)
    kc = F.pad(k, (0, 0, 0, pad)).reshape(B, H, n, C, K)
    vc = F.pad(v, (0, 0, 0, pad)).reshape(B, H, n, C, V)
    own = torch.einsum("bhnck,bhncv->bhnkv", kc, vc)
    # exclusive prefix over chunks: the sums of chunks 0..c-1 (shifted, not cumsum - own)
    before = torch.cumsum(torch.cat([torch.zeros_like(own[:, :, :1]), own[:, :, :-1]], 2), 2)
    entering = S0[:, :, None] + before
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    scores = (qc @ kc.transpose(-1, -2)).masked_fill(future, 0.0)
    o = (scores @ vc + qc @ entering) * scale
    final = S0 + own.sum(dim=2)
    return o.reshape(B, H, n * C, V)[:, :, :L], final


def prefix_of_chunks_attention(
    q,
    k,
    v,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    chunk_size=64,
    head_first=False,
    out_dtype=None,
):
    if head_first:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    cuts = [0, T] if cu_seqlens is None else [int(c) for c in cu_seqlens.tolist()]
    N = B if cu_seqlens is None else len(cuts) - 1
    S0 = (
        torch.zeros(N, H, K, V, device=q.device) if initial_state is None else initial_state.float()
    )
    outs, finals = [], []
    for i in range(len(cuts) - 1):
        rows = slice(None) if cu_seqlens is None else slice(i, i + 1)
        a, b = cuts[i], cuts[i + 1]
        o, S = _dense(qh[:, :, a:b], kh[:, :, a:b], vh[:, :, a:b], S0[rows], scale, chunk_size)
        outs.append(o)
        finals.append(S)
    o = torch.cat(outs, dim=2).transpose(1, 2).to(out_dtype or q.dtype)
    if head_first:
        o = o.transpose(1, 2)
    return o, (torch.cat(finals) if output_final_state else None)
