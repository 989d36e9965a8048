# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The recurrent (token-by-token) form of the reference, in the precision of its inputs.

The definition itself, S_t = a_t S_{t-1} + φ(k_t) v_t^T, evaluated step by step with every head
of a sequence updated at once. Fed float64 tensors it is an oracle (ERROR_MODEL.md §6.4); fed
float32 tensors it is a faithful fp32 recurrent computation. It is differentiable in q, k, v, g
and the initial state and runs wherever torch does.
"""

from __future__ import annotations

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.feature_maps import apply_feature_map, vanishes
from linattn_verify.oracles.parallel import State
from linattn_verify.semantics import Problem


def recurrent_reference(problem: Problem) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the recurrent form, in the dtype of ``problem.q``.

    Per sequence and token t, with a_t = exp(g_t) taken step by step (a_t = 1 without decay):

        S_t = a_t S_{t-1} + φ(k_t) v_t^T        z_t = a_t z_{t-1} + φ(k_t)
        N_t = s φ(q_t)^T S_t                    Z_t = s φ(q_t)^T z_t + eps

    o_t = N_t unnormalized, N_t / Z_t normalized; a row whose Z_t is exactly zero returns 0
    (`linattn_verify.semantics`).

    Args:
        problem: A validated problem (see `linattn_verify.semantics.validate_problem`).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` with z_T ``[N, H, K]`` for normalized problems.

    Raises:
        InvalidArgument: if ``problem`` is not a `Problem`.
    """
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.semantics.Problem but got "
            f"{type(problem).__name__}; build one with validate_problem(...)."
        )
    outputs, states, key_sums = [], [], []
    for n, b, start, end in problem.sequences():
        o, S, z = _sequence(problem, n, b, start, end)
        outputs.append(o)
        states.append(S)
        key_sums.append(z)
    # Sequences tile the (B, T) axes in order, so concatenating their rows restores [B, T, H, V].
    o = torch.cat(outputs, dim=0).reshape(*problem.q.shape[:3], problem.v.shape[-1])
    if not problem.output_final_state:
        return o, None
    S_T = torch.stack(states, dim=0)
    if problem.normalize:
        return o, (S_T, torch.stack(key_sums, dim=0))
    return o, S_T


def _sequence(
    problem: Problem, n: int, b: int, start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.scale
    q = apply_feature_map(problem.q[b, start:end], problem.feature_map)  # [L, H, K]
    k = apply_feature_map(problem.k[b, start:end], problem.feature_map)  # [L, H, K]
    v = problem.v[b, start:end]  # [L, H, V]
    L, H, K = q.shape
    V = v.shape[-1]
    # Per-step factors a_t = exp(g_t), all at once: the recurrence multiplies by them one by one.
    a = None if problem.g is None else torch.exp(problem.g[b, start:end].to(q.dtype))  # [L, H]
    S = _initial(problem.initial_state, n, (H, K, V), q)
    z = _initial(problem.initial_key_sum, n, (H, K), q)
    sq = s * q  # [L, H, K]
    numerators, denominators = [], []
    for t in range(L):
        # The outer product is formed per step so memory stays O(H K V) when no gradient is kept.
        kv = k[t, :, :, None] * v[t, :, None, :]  # [H, K, V]
        if a is None:
            S = S + kv
            z = z + k[t]
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
    Z = torch.stack(denominators, dim=0) + problem.eps  # [L, H]
    zero = vanishes(Z)
    # Rows whose denominator is exactly zero return 0 (semantics.py); the safe divisor keeps
    # autograd free of 0/0 on the discarded branch.
    o = torch.where(zero[..., None], torch.zeros_like(N), N / torch.where(zero, 1, Z)[..., None])
    return o, S, z


def _initial(
    state: torch.Tensor | None, n: int, shape: tuple[int, ...], like: torch.Tensor
) -> torch.Tensor:
    if state is None:
        return like.new_zeros(shape)
    return state[n].to(like.dtype)


__all__ = ["recurrent_reference"]
