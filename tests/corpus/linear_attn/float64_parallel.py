"""Normalized, decayed linear attention as one float64 T x T computation over the packed batch.

What is different: packed sequences are not split. The whole packed row is one T x T problem
whose mask is causal *and* block-diagonal (a token sees only keys of its own sequence, by
sequence ids from ``torch.bucketize``); each token's initial-state term is gathered from its
sequence's row of (S_0, z_0). Decay weights are exp of differences of one cumulative sum over
the whole packed row (not restarted per sequence: a sequence's weights are differences of sums
that include the earlier sequences' gates, equal in value, not in rounding, so the kernel is
causal within rounding, not bit for bit). Everything is computed in float64 and rounded once
at the end: o to the input dtype, the final pair (S_T, z_T) to float32. The quotient is
guarded: where the denominator is exactly 0 the output is 0 (a safe denominator keeps the
unused branch's gradient finite). The eps of the normalizer is an extra keyword option,
default 0. Identity features (the caller applies its feature map); scalar gate.
"""

from __future__ import annotations

import torch


def float64_parallel_attention(
    q,
    k,
    v,
    g=None,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    eps=0.0,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else scale
    f64 = torch.float64
    Q, Kx, Vx = (x.to(f64).transpose(1, 2) for x in (q, k, v))  # [B, H, T, ·]
    gx = (
        torch.zeros(B, H, T, dtype=f64, device=q.device) if g is None else g.to(f64).transpose(1, 2)
    )

    if cu_seqlens is None:
        edges = torch.tensor([0, T], device=q.device)
    else:
        edges = cu_seqlens.to(device=q.device, dtype=torch.long)
    Nl = edges.numel() - 1  # sequences per batch row
    pos = torch.arange(T, device=q.device)
    seq = torch.bucketize(pos, edges[1:], right=True)  # sequence id of every token

    G = torch.cumsum(gx, dim=-1)
    Gx = torch.cat([G.new_zeros(B, H, 1), G], dim=-1)  # Gx[i] = Σ_{s<i} g_s
    base = Gx[..., edges[:-1]]  # [B, H, Nl]: the cumulative sum before each sequence
    end = Gx[..., edges[1:]]  # [B, H, Nl]: the cumulative sum at each sequence's end

    visible = (seq[:, None] == seq[None, :]) & (pos[None, :] <= pos[:, None])
    D = torch.exp(torch.where(visible, G[..., :, None] - G[..., None, :], float("-inf")))
    P = (Q @ Kx.transpose(-1, -2)) * D * s
    N = P @ Vx
    Z = P.sum(-1)

    if initial_state is None:
        S0 = torch.zeros(B * Nl, H, K, V, dtype=f64, device=q.device)
        z0 = torch.zeros(B * Nl, H, K, dtype=f64, device=q.device)
    else:
        S0, z0 = (x.to(f64) for x in initial_state)
    S0 = S0.reshape(B, Nl, H, K, V).transpose(1, 2)  # [B, H, Nl, K, V]
    z0 = z0.reshape(B, Nl, H, K).transpose(1, 2)  # [B, H, Nl, K]
    w0 = torch.exp(G - base[..., seq]) * s  # [B, H, T]
    N = N + w0[..., None] * torch.einsum("bhtk,bhtkv->bhtv", Q, S0[:, :, seq])
    Z = Z + w0 * (Q * z0[:, :, seq]).sum(-1) + eps

    zero = Z == 0
    o = torch.where(zero[..., None], 0.0, N / torch.where(zero, 1.0, Z)[..., None])
    out = o.transpose(1, 2).to(q.dtype)
    if not output_final_state:
        return out, None

    mine = seq[None, :] == torch.arange(Nl, device=q.device)[:, None]  # [Nl, T]
    W = torch.exp(torch.where(mine, end[..., None] - G[..., None, :], float("-inf")))
    carry = torch.exp(end - base)  # [B, H, Nl]
    ST = torch.einsum("bhnt,bhtk,bhtv->bhnkv", W, Kx, Vx) + carry[..., None, None] * S0
    zT = torch.einsum("bhnt,bhtk->bhnk", W, Kx) + carry[..., None] * z0
    ST = ST.transpose(1, 2).reshape(B * Nl, H, K, V).float()
    zT = zT.transpose(1, 2).reshape(B * Nl, H, K).float()
    return out, (ST, zT)
