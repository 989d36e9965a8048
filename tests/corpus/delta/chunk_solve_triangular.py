"""Gated DeltaNet in the UT chunk form, the triangular systems solved by solve_triangular.

What is different: no explicit inverse at all. Per chunk the unit lower-triangular system
L X = [beta V | beta K e^G] is handed to ``torch.linalg.solve_triangular`` (LAPACK trsm), with
both right-hand sides solved in one call. Decays are exp of differences of the chunk-local
cumulative log gate, masked to -inf above the diagonal before the exp. A ragged last chunk is
processed at its own length (no padding). Heads are batched; batch rows and packed sequences
are looped over. Gates: none or scalar. ``chunk_size=`` keyword (default 64). Autograd backward.
"""

from __future__ import annotations

import torch


def _l2(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(torch.sum(x * x, dim=-1, keepdim=True) + 1e-6)


def _sequence(q, k, v, beta, g, S, scale, C):
    """One sequence, heads first: q, k [H, L, K], v [H, L, V], beta/g [H, L], S [H, K, V]."""
    H, L, K = q.shape
    outs = []
    for lo in range(0, L, C):
        hi = min(lo + C, L)
        c = hi - lo
        qc, kc, vc, bc = q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], beta[:, lo:hi]
        if g is None:
            G = qc.new_zeros(H, c)
        else:
            G = torch.cumsum(g[:, lo:hi], dim=-1)
        above = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
        diff = (G[:, :, None] - G[:, None, :]).masked_fill(above, float("-inf"))
        D = torch.exp(diff)  # D[i, j] = exp(G_i - G_j) for j <= i, else 0
        eG = torch.exp(G)[..., None]
        kk = kc @ kc.transpose(1, 2)
        Lmat = (bc[..., None] * kk * D).tril(-1) + torch.eye(c, dtype=q.dtype, device=q.device)
        rhs = torch.cat([bc[..., None] * vc, bc[..., None] * kc * eG], dim=-1)
        X = torch.linalg.solve_triangular(Lmat, rhs, upper=False, unitriangular=True)
        U, W = X[..., : vc.shape[-1]], X[..., vc.shape[-1] :]
        Vn = U - W @ S
        o = scale * ((qc * eG) @ S + ((qc @ kc.transpose(1, 2)) * D) @ Vn)
        outs.append(o)
        tail = torch.exp(G[:, -1:] - G)[..., None]  # exp(G_c - G_j) <= 1
        S = torch.exp(G[:, -1])[:, None, None] * S + (kc * tail).transpose(1, 2) @ Vn
    o = torch.cat(outs, 1) if outs else v.new_zeros(H, 0, v.shape[-1])
    return o, S


def chunk_gated_delta_rule(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
    chunk_size=64,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    f = torch.float32
    qh = q.to(f).permute(0, 2, 1, 3)
    kh = k.to(f).permute(0, 2, 1, 3)
    vh = v.to(f).permute(0, 2, 1, 3)
    bh = beta.to(f).permute(0, 2, 1)
    gh = None if g is None else g.to(f).permute(0, 2, 1)
    if use_qk_l2norm_in_kernel:
        qh, kh = _l2(qh), _l2(kh)
    if cu_seqlens is None:
        runs = [(b, 0, T) for b in range(B)]
    else:
        c = [int(x) for x in cu_seqlens]
        runs = [(0, c[i], c[i + 1]) for i in range(len(c) - 1)]
    per_row = [[] for _ in range(B)]
    finals = []
    for n, (b, lo, hi) in enumerate(runs):
        S = (
            torch.zeros(H, K, V, dtype=f, device=q.device)
            if initial_state is None
            else initial_state[n].to(f)
        )
        o, S = _sequence(
            qh[b, :, lo:hi],
            kh[b, :, lo:hi],
            vh[b, :, lo:hi],
            bh[b, :, lo:hi],
            None if gh is None else gh[b, :, lo:hi],
            S,
            scale,
            chunk_size,
        )
        per_row[b].append(o)
        finals.append(S)
    o = torch.stack([torch.cat(p, 1) for p in per_row]).permute(0, 2, 1, 3)
    return o.to(q.dtype), (torch.stack(finals) if output_final_state else None)
