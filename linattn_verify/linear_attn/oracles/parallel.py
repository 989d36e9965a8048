# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel (masked quadratic) form of the reference, in the precision of its inputs.

Fed float64 tensors it is the tier-0 oracle of docs/error-model.md §6.4; it is differentiable in q,
k, v, g and the initial state, and runs wherever torch does (CPU or CUDA).
"""

from __future__ import annotations

import functools

import torch

from linattn_verify.linear_attn.oracles._sequence import (
    SequenceResult,
    State,
    assemble,
    divide_rows,
    sequence_inputs,
)
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged


@judged
def parallel_reference(problem: Problem) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the parallel form, in the dtype of ``problem.q``.

    Per sequence: P = s (φ(Q)φ(K)^T ⊙ W), W_tj = exp(G_t - G_j) masked to j <= t *before* the exp,
    N = P V + s exp(G_t) φ(q_t)^T S_0, Z = Σ_j P_tj + s exp(G_t) φ(q_t)^T z_0 + eps.

    With a vector gate (g ``[B, T, H, K]``, G_t its cumulative sum per key dimension m):
    P_tj = s Σ_m φ(q_t)_m φ(k_j)_m W_tjm with W_tjm = exp(G_tm - G_jm), masked to j <= t before
    the exp; the initial-state terms use exp(G_t) ⊙ φ(q_t), the final state exp(G_end - G_j) ⊙
    φ(k_j) and the total decay exp(G_end) on the rows of S_0 and z_0. W is held whole
    (``[H, L, L, K]``), so memory is O(H L² K) per sequence: an oracle for moderate sizes.

    Args:
        problem: A validated problem (see `linattn_verify.linear_attn.semantics`).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` for normalized problems.
    """
    return assemble(problem, functools.partial(_sequence, problem))


def _sequence(problem: Problem, n: int, b: int, start: int, end: int) -> SequenceResult:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.outer_scale
    seq = sequence_inputs(problem, n, b, start, end, heads_first=True)
    q, k, v, H, L = seq.q, seq.k, seq.v, seq.H, seq.L  # [H, L, K], [H, L, K], [H, L, V]
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    S0, z0 = seq.S0, seq.z0
    if seq.g is not None and seq.g.ndim == 3:
        P, N_state, Z_state, S_T, z_T = _vector_terms(s, q, k, v, seq.g, mask, S0, z0)
        return _finish(problem, P, v, N_state, Z_state, S_T, z_T)
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
    N_state = s * w_from_start[..., None] * (q @ S0)
    Z_state = s * w_from_start * (q @ z0[..., None])[..., 0]
    total_decay = w_from_start[:, -1] if L else torch.ones(H, dtype=q.dtype, device=q.device)
    S_T = (k * w_to_end[..., None]).transpose(-1, -2) @ v + total_decay[:, None, None] * S0
    z_T = (k * w_to_end[..., None]).sum(dim=1) + total_decay[:, None] * z0
    return _finish(problem, P, v, N_state, Z_state, S_T, z_T)


def _vector_terms(
    s: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    mask: torch.Tensor,
    S0: torch.Tensor,
    z0: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return P, the initial-state terms of N and Z, S_T and z_T for a vector gate ``[H, L, K]``."""
    H, L, K = q.shape
    G = torch.cumsum(g, dim=1)  # [H, L, K]
    # Masked before the exp: G_tm - G_jm > 0 for j > t may overflow, and inf * 0 would reach
    # values and gradients.
    diff = (G[:, :, None, :] - G[:, None, :, :]).masked_fill(~mask[..., None], float("-inf"))
    W = torch.exp(diff)  # [H, L, L, K]
    P = s * (q[:, :, None, :] * k[:, None, :, :] * W).sum(-1)  # [H, L, L]
    q_in = q * torch.exp(G)  # [H, L, K]: φ(q_t) decayed from the sequence start
    N_state = s * (q_in @ S0)
    Z_state = s * (q_in @ z0[..., None])[..., 0]
    G_end = G[:, -1:] if L else G.new_zeros(H, 1, K)
    k_out = k * torch.exp(G_end - G)  # [H, L, K]: φ(k_j) decayed to the sequence end
    total_decay = torch.exp(G_end[:, 0])  # [H, K]
    S_T = k_out.transpose(-1, -2) @ v + total_decay[..., None] * S0
    z_T = k_out.sum(dim=1) + total_decay * z0
    return P, N_state, Z_state, S_T, z_T


def _finish(
    problem: Problem,
    P: torch.Tensor,
    v: torch.Tensor,
    N_state: torch.Tensor,
    Z_state: torch.Tensor,
    S_T: torch.Tensor,
    z_T: torch.Tensor,
) -> SequenceResult:
    """Assemble o from P ``[H, L, L]`` and the initial-state terms N_state, Z_state."""
    N = P @ v
    N = N + N_state
    if problem.normalize:
        Z = problem.denominator(P.sum(-1) + Z_state)
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
