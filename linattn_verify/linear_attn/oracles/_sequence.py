# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What the torch reference forms share: slicing one sequence, and assembling the results.

Each form (`parallel`, `chunk`, `recurrent`) evaluates one sequence at a time; this module
extracts that sequence's feature-mapped inputs and initial state, divides normalized rows with
the zero-denominator rule, and stacks the per-sequence results back into ``(o, final_state)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.feature_maps import vanishes
from linattn_verify.linear_attn.semantics import Problem

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None

SequenceResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""


@dataclass(frozen=True)
class Sequence:
    """One sequence's inputs: φ(q), φ(k), v and g in the form's layout, and its initial state.

    g keeps the problem's gate: one log decay per token and head (``[L, H]`` / ``[H, L]``), or
    a vector gate with one per key dimension (``[L, H, K]`` / ``[H, L, K]``).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    S0: torch.Tensor
    z0: torch.Tensor
    H: int
    L: int
    K: int
    V: int


def require_problem(problem: object) -> None:
    """Raise `InvalidArgument` unless ``problem`` is a `Problem`."""
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.linear_attn.semantics.Problem but got "
            f"{type(problem).__name__}; build one with validate_problem(...)."
        )


def sequence_inputs(
    problem: Problem, n: int, b: int, start: int, end: int, *, heads_first: bool
) -> Sequence:
    """Slice sequence ``n`` (row ``b``, tokens ``start:end``) out of ``problem``.

    With ``heads_first`` q, k are ``[H, L, K]``, v ``[H, L, V]`` and g ``[H, L]`` (a vector
    gate ``[H, L, K]``); without it they keep the token-major layout ``[L, H, ...]``. g is cast
    to the dtype of q; S0 and z0 are the initial state and key sum in that dtype (zeros when the
    problem has none).
    """
    q = problem.query_features(problem.q[b, start:end])  # [L, H, F]
    k = problem.key_features(problem.k[b, start:end])  # [L, H, F]
    v = problem.v[b, start:end]  # [L, H, V]
    g = None if problem.g is None else problem.g[b, start:end].to(q.dtype)  # [L, H] or [L, H, K]
    if heads_first:
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        g = None if g is None else g.transpose(0, 1)
        H, L, K = q.shape
    else:
        L, H, K = q.shape
    V = v.shape[-1]
    S0 = _initial(problem.initial_state, n, (H, K, V), q)
    z0 = _initial(problem.initial_key_sum, n, (H, K), q)
    return Sequence(q=q, k=k, v=v, g=g, S0=S0, z0=z0, H=H, L=L, K=K, V=V)


def divide_rows(N: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """N / Z row by row, where a row whose denominator vanishes returns 0 (`semantics`)."""
    zero = vanishes(Z)
    # The safe divisor keeps autograd free of 0/0 on the discarded branch.
    return torch.where(zero[..., None], torch.zeros_like(N), N / torch.where(zero, 1, Z)[..., None])


def assemble(
    problem: Problem, one_sequence: Callable[[int, int, int, int], SequenceResult]
) -> tuple[torch.Tensor, State]:
    """Run ``one_sequence(n, b, start, end)`` on every sequence and assemble ``(o, final)``."""
    outputs, states, key_sums = [], [], []
    for n, b, start, end in problem.sequences():
        o, S, z = one_sequence(n, b, start, end)
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


def _initial(
    state: torch.Tensor | None, n: int, shape: tuple[int, ...], like: torch.Tensor
) -> torch.Tensor:
    if state is None:
        return like.new_zeros(shape)
    return state[n].to(like.dtype)


__all__ = [
    "Sequence",
    "SequenceResult",
    "State",
    "assemble",
    "divide_rows",
    "require_problem",
    "sequence_inputs",
]
