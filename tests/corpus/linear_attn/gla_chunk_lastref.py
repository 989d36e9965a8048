"""Chunked GLA (vector gate, C = 64) with every decay measured from the chunk's *last* token.

What is different: within a chunk, with L_t the chunk-local cumulative sum of g_t (per key
dimension) and R_t = L_t - L_last >= 0 its value relative to the chunk's last token (the
reference point FLA-style chunked kernels use for the state update), every weight is the exp
of a difference of these R's:

    intra-chunk  w_tj = exp(R_t - R_j)            (j <= t, masked by torch.where before exp)
    from state   w_t0 = exp(R_t + L_last)          (the decay of the incoming state at t)
    to state     k_j ⊙ exp(-R_j),  S ← exp(L_last) ⊙ S + (k ⊙ e^{-R})^T v

All exponents are <= 0 (no overflow at any gate). The values are those of the function, but
R_t is computed from L_last, which sums gates *after* t: the rounding of a past output
depends on future gates inside its chunk (correct, not bitwise causal). The intra-chunk score
Σ_m q_tm k_jm w_tjm is one three-operand einsum over a [C, C, K] weight tensor. fp32;
packed sequences run one after another; a scalar gate is broadcast over K.
"""

from __future__ import annotations

import torch

C = 64


def _sequence(q, k, v, g, S, scale):
    # heads-first: q, k, g [B, H, L, K]; v [B, H, L, V]; S [B, H, K, V]
    L = q.shape[2]
    outs = []
    for a in range(0, L, C):
        b = min(a + C, L)
        qc, kc, vc, gc = q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], g[:, :, a:b]
        n = b - a
        loc = torch.cumsum(gc, dim=2)
        last = loc[:, :, -1:]  # [B, H, 1, K]
        R = loc - last  # >= 0
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()[..., None]
        expo = torch.where(causal, R[:, :, :, None, :] - R[:, :, None, :, :], float("-inf"))
        A = torch.einsum("bhim,bhjm,bhijm->bhij", qc, kc, torch.exp(expo))
        inter = (qc * torch.exp(R + last)) @ S
        outs.append((A @ vc + inter) * scale)
        S = torch.exp(last[:, :, 0])[..., None] * S + (kc * torch.exp(-R)).transpose(-1, -2) @ vc
    o = torch.cat(outs, dim=2) if outs else v.new_zeros(v.shape)
    return o, S


def gla_chunk_lastref(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    if g is None:
        gh = torch.zeros(B, H, T, K, device=q.device)
    elif g.dim() == 3:
        gh = g.float().transpose(1, 2)[..., None].expand(B, H, T, K)
    else:
        gh = g.float().transpose(1, 2)
    cuts = [0, T] if cu_seqlens is None else cu_seqlens.tolist()
    N = B if cu_seqlens is None else len(cuts) - 1
    S0 = (
        torch.zeros(N, H, K, V, device=q.device) if initial_state is None else initial_state.float()
    )
    outs, finals = [], []
    for n in range(len(cuts) - 1):
        a, b = cuts[n], cuts[n + 1]
        rows = slice(None) if cu_seqlens is None else slice(n, n + 1)
        o, S = _sequence(
            qh[:, :, a:b], kh[:, :, a:b], vh[:, :, a:b], gh[:, :, a:b], S0[rows], scale
        )
        outs.append(o)
        finals.append(S)
    o = torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
    return o, (torch.cat(finals) if output_final_state else None)
