"""GLA with a value gate (FLA's ``gv``), as a masked quadratic form per value column.

What is different: no recurrence at all. Per sequence and head, the key-side weights are
exp(Gk_t - Gk_j) of cumulative sums of gk over the whole sequence (masked to j <= t before the
exp), summed with q_t ⊙ k_j over the key dimension into P_tj; the value side multiplies P_tj by
exp(Gv_tc - Gv_jc) per value column c afterwards, a [L, L, V] tensor, and contracts over j with
v. The initial state enters through exp(Gk_t) ⊙ q_t and exp(Gv_t); the final state is the same
sums taken at t = L. Everything in float32; o is rounded to the input dtype, the final state
stays float32. The state decays S_t = diag(exp(gk_t)) S_{t-1} diag(exp(gv_t)) + k_t v_t^T.
"""

from __future__ import annotations

import torch


def _sequence(q, k, v, gk, gv, S0, scale):
    """One sequence of one batch row: q, k [L, H, K], v, gv [L, H, V], gk [L, H, K]."""
    L = q.shape[0]
    Gk = torch.cumsum(gk, dim=0)  # [L, H, K]
    Gv = torch.cumsum(gv, dim=0)  # [L, H, V]
    later = torch.tril(torch.ones(L, L, dtype=torch.bool))[:, :, None, None]  # [t, j, 1, 1]
    key_side = torch.where(later, Gk[:, None] - Gk[None, :], float("-inf")).exp()  # [t, j, H, K]
    P = (q[:, None] * k[None, :] * key_side).sum(-1)  # [t, j, H]
    value_side = torch.where(later, Gv[:, None] - Gv[None, :], float("-inf")).exp()  # [t,j,H,V]
    o = (P[..., None] * value_side * v[None, :]).sum(1) * scale  # [t, H, V]
    o = o + scale * torch.einsum("thk,hkv->thv", q * Gk.exp(), S0) * Gv.exp()
    end_k = (Gk[-1:] - Gk).exp() if L else Gk  # [j, H, K]
    end_v = (Gv[-1:] - Gv).exp() if L else Gv  # [j, H, V]
    S = torch.einsum("jhk,jhv->hkv", k * end_k, v * end_v)
    total_k = Gk[-1].exp() if L else torch.ones_like(S0[..., 0])
    total_v = Gv[-1].exp() if L else torch.ones_like(S0[..., 0, :])
    return o, S + total_k[..., None] * S0 * total_v[:, None, :]


def gla_value_gate(
    q,
    k,
    v,
    gk=None,
    *,
    gv,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    f32 = torch.float32
    gk = torch.zeros(B, T, H, K) if gk is None else gk.to(f32)
    if gk.dim() == 3:  # a scalar gate: one decay for every key dimension
        gk = gk[..., None].expand(B, T, H, K)
    edges = [0, T] if cu_seqlens is None else [int(e) for e in cu_seqlens]
    outs, finals = [], []
    for b in range(B):
        row = []
        for n in range(len(edges) - 1):
            lo, hi = edges[n], edges[n + 1]
            state = b if cu_seqlens is None else n
            S0 = torch.zeros(H, K, V) if initial_state is None else initial_state[state].to(f32)
            o, S = _sequence(*(x[b, lo:hi].to(f32) for x in (q, k, v, gk, gv)), S0, scale)
            row.append(o)
            finals.append(S)
        outs.append(torch.cat(row))
    o = torch.stack(outs).to(q.dtype)
    return o, (torch.stack(finals) if output_final_state else None)
