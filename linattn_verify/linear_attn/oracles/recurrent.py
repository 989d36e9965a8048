# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The recurrent (token-by-token) form of the reference, in the precision of its inputs.

The definition itself, S_t = a_t S_{t-1} + φ(k_t) v_t^T, evaluated step by step with every head
of a sequence updated at once. Fed float64 tensors it is an oracle (docs/error-model.md §6.4); fed
float32 tensors it is a faithful fp32 recurrent computation. It is differentiable in q, k, v, g
and the initial state and runs wherever torch does.
"""

from __future__ import annotations

import functools

import torch

from linattn_verify.linear_attn.oracles._sequence import (
    SequenceResult,
    State,
    assemble,
    divide_rows,
    require_problem,
    sequence_inputs,
)
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged


@judged
def recurrent_reference(problem: Problem) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the recurrent form, in the dtype of ``problem.q``.

    Per sequence and token t, with a_t = exp(g_t) taken step by step (a_t = 1 without decay):

        S_t = a_t S_{t-1} + φ(k_t) v_t^T        z_t = a_t z_{t-1} + φ(k_t)
        N_t = s φ(q_t)^T S_t                    Z_t = s φ(q_t)^T z_t + eps

    With a vector gate (g ``[B, T, H, K]``) a_t is a vector over the key dimensions and scales
    the rows of S: S_t = diag(a_t) S_{t-1} + φ(k_t) v_t^T, z_t = a_t ⊙ z_{t-1} + φ(k_t).

    o_t = N_t unnormalized, N_t / Z_t normalized; a row whose Z_t is exactly zero returns 0
    (`linattn_verify.linear_attn.semantics`).

    Args:
        problem: A validated problem (see `linattn_verify.linear_attn.semantics.validate_problem`).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` with z_T ``[N, H, K]`` for normalized problems.

    Raises:
        InvalidArgument: if ``problem`` is not a `Problem`.
    """
    require_problem(problem)
    return assemble(problem, functools.partial(_sequence, problem))


def _sequence(problem: Problem, n: int, b: int, start: int, end: int) -> SequenceResult:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.outer_scale
    seq = sequence_inputs(problem, n, b, start, end, heads_first=False)
    q, k, v = seq.q, seq.k, seq.v  # [L, H, K], [L, H, K], [L, H, V]
    L, H, V = seq.L, seq.H, seq.V
    # Per-step factors a_t = exp(g_t), all at once: the recurrence multiplies by them one by one.
    a = None if seq.g is None else torch.exp(seq.g)  # [L, H], or [L, H, K] for a vector gate
    S, z = seq.S0, seq.z0
    sq = s * q  # [L, H, K]
    numerators, denominators = [], []
    for t in range(L):
        # The outer product is formed per step so memory stays O(H K V) when no gradient is kept.
        kv = k[t, :, :, None] * v[t, :, None, :]  # [H, K, V]
        if a is None:
            S = S + kv
            z = z + k[t]
        elif a.ndim == 3:
            # A vector gate decays each key dimension: the rows of S, the entries of z.
            S = a[t, :, :, None] * S + kv
            z = a[t] * z + k[t]
        else:
            S = a[t, :, None, None] * S + kv
            z = a[t, :, None] * z + k[t]
        numerators.append((sq[t, :, None, :] @ S)[:, 0])  # [H, V]
        if problem.normalize:
            denominators.append((sq[t] * z).sum(-1))  # [H]
    if not numerators:
        return q.new_zeros(0, H, V), S, z
    N = torch.stack(numerators, dim=0)  # [L, H, V]
    if not problem.normalize:
        return N, S, z
    Z = problem.denominator(torch.stack(denominators, dim=0))  # [L, H]
    return divide_rows(N, Z), S, z


__all__ = ["recurrent_reference"]
