# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel (masked quadratic) form of the reference, in the precision of its inputs.

Fed float64 tensors it is the tier-0 oracle of docs/error-model.md §6.4; it is differentiable in q,
k, v, g and the initial state, and runs wherever torch does (CPU or CUDA).
"""

from __future__ import annotations

import functools

import torch

from linattn_verify.oracles._sequence import (
    SequenceResult,
    State,
    assemble,
    divide_rows,
    sequence_inputs,
)
from linattn_verify.semantics import Problem


def parallel_reference(problem: Problem) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the parallel form, in the dtype of ``problem.q``.

    Per sequence: P = s (φ(Q)φ(K)^T ⊙ W), W_tj = exp(G_t - G_j) masked to j <= t *before* the exp,
    N = P V + s exp(G_t) φ(q_t)^T S_0, Z = Σ_j P_tj + s exp(G_t) φ(q_t)^T z_0 + eps.

    Args:
        problem: A validated problem (see `linattn_verify.semantics`).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` for normalized problems.
    """
    return assemble(problem, functools.partial(_sequence, problem))


def _sequence(problem: Problem, n: int, b: int, start: int, end: int) -> SequenceResult:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.scale
    seq = sequence_inputs(problem, n, b, start, end, heads_first=True)
    q, k, v, H, L = seq.q, seq.k, seq.v, seq.H, seq.L  # [H, L, K], [H, L, K], [H, L, V]
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    if seq.g is None:
        W = mask.to(q.dtype).expand(H, L, L)
        w_from_start = torch.ones(H, L, dtype=q.dtype, device=q.device)
        w_to_end = torch.ones(H, L, dtype=q.dtype, device=q.device)
    else:
        G = torch.cumsum(seq.g, dim=-1)  # [H, L]
        diff = (G[:, :, None] - G[:, None, :]).masked_fill(~mask, float("-inf"))
        W = torch.exp(diff)
        w_from_start = torch.exp(G)
        G_end = G[:, -1:] if L else G.new_zeros(H, 1)
        w_to_end = torch.exp(G_end - G)
    P = s * (q @ k.transpose(-1, -2)) * W  # [H, L, L]
    N = P @ v
    S0, z0 = seq.S0, seq.z0
    N = N + s * w_from_start[..., None] * (q @ S0)
    total_decay = w_from_start[:, -1] if L else torch.ones(H, dtype=q.dtype, device=q.device)
    S_T = (k * w_to_end[..., None]).transpose(-1, -2) @ v + total_decay[:, None, None] * S0
    z_T = (k * w_to_end[..., None]).sum(dim=1) + total_decay[:, None] * z0
    if problem.normalize:
        Z = P.sum(-1) + s * w_from_start * (q @ z0[..., None])[..., 0] + problem.eps
        if problem.eps == 0:
            # N/Z is invariant to scaling a row by a constant; scaling by a power of two near
            # 1/|Z| is exact and keeps autograd's -N/Z^2 from under- or overflowing.
            row_scale = torch.exp2(-torch.floor(torch.log2(Z.detach().abs()))).nan_to_num(
                nan=1.0, posinf=1.0, neginf=1.0
            )
            row_scale = torch.where(torch.isfinite(row_scale) & (row_scale > 0), row_scale, 1.0)
            N, Z = N * row_scale[..., None], Z * row_scale
        o = divide_rows(N, Z)
    else:
        o = N
    return o.transpose(0, 1), S_T, z_T


__all__ = ["State", "parallel_reference"]
