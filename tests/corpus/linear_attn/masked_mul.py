"""Chunked linear attention (C = 32, scalar gate) that pads, reshapes and masks by multiplying.

What is different: the sequence is zero-padded to a multiple of 32 (``F.pad``; a padded token
has k = v = 0 and g = 0, so it changes nothing) and viewed as [B, H, n, 32, ·]; every chunk's
intra-chunk part is computed for all chunks at once, and only the state passing between chunks
is a Python loop. The causal mask and the decay mask are float tensors *multiplied* into the
scores (``scores * decay * tril``), with the decay exponent clamped at 0 first so that the
entries the mask zeroes are exp(0) = 1, never inf. Decays inside a chunk are exp of
differences of chunk-local cumulative sums (reference point: the chunk's start). fp32
throughout, inputs upcast; packed sequences run one at a time.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

C = 32


def _chunked(q, k, v, g, S, scale):
    # q, k [B, H, L, K]; v [B, H, L, V]; g [B, H, L]; S [B, H, K, V]; float32
    B, H, L, K = q.shape
    V = v.shape[-1]
    if L == 0:
        return v.new_zeros(B, H, 0, V), S
    pad = (-L) % C
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g = F.pad(g, (0, pad))
    n = (L + pad) // C
    q, k = q.reshape(B, H, n, C, K), k.reshape(B, H, n, C, K)
    v, g = v.reshape(B, H, n, C, V), g.reshape(B, H, n, C)

    cum = g.cumsum(-1)  # chunk-local, from the chunk's start
    tril = torch.ones(C, C, device=q.device).tril()
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).clamp(max=0)) * tril
    scores = (q @ k.transpose(-1, -2)) * decay * scale
    intra = scores @ v  # [B, H, n, C, V]
    q_in = q * torch.exp(cum)[..., None] * scale  # weight of the state entering the chunk
    k_out = k * torch.exp(cum[..., -1:] - cum)[..., None]  # weight to the chunk's end
    carry = torch.exp(cum[..., -1])  # [B, H, n]

    outs = []
    for c in range(n):
        outs.append(intra[:, :, c] + q_in[:, :, c] @ S)
        S = carry[:, :, c, None, None] * S + k_out[:, :, c].transpose(-1, -2) @ v[:, :, c]
    o = torch.stack(outs, dim=2).reshape(B, H, n * C, V)[:, :, :L]
    return o, S


def masked_mul_attention(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    gh = torch.zeros(B, H, T, device=q.device) if g is None else g.float().transpose(1, 2)
    if cu_seqlens is None:
        spans, N = [(0, T)], B
    else:
        cs = cu_seqlens.tolist()
        spans, N = list(itertools.pairwise(cs)), len(cs) - 1
    h0 = torch.zeros(N, H, K, V, device=q.device) if initial_state is None else initial_state
    outs, states = [], []
    for i, (a, b) in enumerate(spans):
        rows = slice(None) if cu_seqlens is None else slice(i, i + 1)
        o, S = _chunked(
            qh[:, :, a:b], kh[:, :, a:b], vh[:, :, a:b], gh[:, :, a:b], h0[rows].float(), scale
        )
        outs.append(o)
        states.append(S)
    o = torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
    return o, (torch.cat(states) if output_final_state else None)
