"""Parallel (quadratic) decayed linear attention with a hand-written backward pass.

What is different: a ``torch.autograd.Function`` whose backward is derived by hand, not traced.
Forward, per (batch, head), with G the float32 cumulative sum of the scalar gate over the whole
sequence and D_tj = exp(G_t - G_j) for j <= t (0 above the diagonal):

    P   = s (Q K^T) ⊙ D                   O   = P V + s diag(e^G) Q S_0
    S_T = (K ⊙ e^{G_T - G})^T V + e^{G_T} S_0

Backward, from dO and dS_T (derived from the forward above):

    dA  = s (dO V^T) ⊙ D                  (masked, j <= t)
    dQ  = dA K + s diag(e^G) dO S_0^T
    dK  = dA^T Q + diag(e^{G_T - G}) V dS_T^T
    dV  = P^T dO + (K ⊙ e^{G_T - G}) dS_T
    dS0 = s (Q ⊙ e^G)^T dO + e^{G_T} dS_T
    dG_t = q_t·dq_t - k_t·dk_t  (+ <dS_T, S_T> at t = T),   dg_t = Σ_{u>=t} dG_u

The last line holds because G_t enters every weight once with a plus sign (as the later end:
row t of D, and e^{G_t} on S_0) and once with a minus sign (as the earlier end: column t), and
q_t·dq_t, k_t·dk_t are exactly those two sums. All in float32 (inputs upcast); gradients are
returned in the inputs' dtypes. No packed sequences.
"""

from __future__ import annotations

import torch


def _weights(g, T, B, H, device):
    # g [B, T, H] -> G [B, H, T] (global fp32 cumsum), D [B, H, T, T] masked, causal mask
    if g is None:
        G = torch.zeros(B, H, T, device=device)
    else:
        G = torch.cumsum(g.float().transpose(1, 2), dim=-1)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    D = torch.exp(torch.where(causal, G[..., :, None] - G[..., None, :], float("-inf")))
    return G, D, causal


class _ParallelDecayed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, S0, scale):
        B, T, H, K = q.shape
        V = v.shape[-1]
        Q, Kt, Vt = (x.float().transpose(1, 2) for x in (q, k, v))  # [B, H, T, ·]
        S0f = torch.zeros(B, H, K, V, device=q.device) if S0 is None else S0.float()
        G, D, causal = _weights(g, T, B, H, q.device)
        eG = torch.exp(G)
        P = torch.where(causal, (Q @ Kt.transpose(-1, -2)) * D * scale, 0.0)
        out = P @ Vt + (eG[..., None] * scale) * (Q @ S0f)
        if T > 0:
            GT = G[..., -1:]  # [B, H, 1]
            wT = torch.exp(GT - G)  # [B, H, T]
            ST = (Kt * wT[..., None]).transpose(-1, -2) @ Vt + torch.exp(GT)[..., None] * S0f
        else:
            GT = G.new_zeros(B, H, 1)
            wT = G.new_zeros(B, H, 0)
            ST = S0f.clone()
        ctx.save_for_backward(Q, Kt, Vt, S0f, G, D, P, wT, GT, ST, causal)
        ctx.scale = scale
        ctx.meta = (q.dtype, k.dtype, v.dtype, None if g is None else g.dtype, S0 is not None)
        return out.transpose(1, 2).to(q.dtype), ST

    @staticmethod
    def backward(ctx, dO, dST):
        Q, Kt, Vt, S0f, G, D, P, wT, GT, ST, causal = ctx.saved_tensors
        s = ctx.scale
        qd, kd, vd, gd, has_S0 = ctx.meta
        T = Q.shape[2]
        V = Vt.shape[-1]
        dO = Q.new_zeros(*Q.shape[:-1], V) if dO is None else dO.float().transpose(1, 2)
        dST = torch.zeros_like(ST) if dST is None else dST.float()
        eG = torch.exp(G)

        dA = torch.where(causal, (dO @ Vt.transpose(-1, -2)) * D * s, 0.0)
        dQ = dA @ Kt + (eG[..., None] * s) * (dO @ S0f.transpose(-1, -2))
        dK = dA.transpose(-1, -2) @ Q + wT[..., None] * (Vt @ dST.transpose(-1, -2))
        dV = P.transpose(-1, -2) @ dO + (Kt * wT[..., None]) @ dST
        dS0 = (Q * (eG[..., None] * s)).transpose(-1, -2) @ dO + torch.exp(GT)[..., None] * dST

        dg = None
        if gd is not None and T > 0:
            dG = (Q * dQ).sum(-1) - (Kt * dK).sum(-1)  # [B, H, T]
            dG[..., -1] += (dST * ST).sum((-1, -2))
            dg = torch.flip(torch.cumsum(torch.flip(dG, [-1]), -1), [-1]).transpose(1, 2).to(gd)
        elif gd is not None:
            dg = G.new_zeros(G.shape).transpose(1, 2).to(gd)
        return (
            dQ.transpose(1, 2).to(qd),
            dK.transpose(1, 2).to(kd),
            dV.transpose(1, 2).to(vd),
            dg,
            dS0 if has_S0 else None,
            None,
        )


def parallel_custom_backward(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False
):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, final = _ParallelDecayed.apply(q, k, v, g, initial_state, scale)
    return o, (final if output_final_state else None)
