# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A value gate judged as single-column problems: fold gv into the gate, V into the heads.

With a value gate gv ``[B, T, H, V]`` (FLA's ``gv``) the delta rule decays S'_t =
diag(exp(g_t)) S_{t-1} diag(exp(gv_t)) before its correction. Every step reads and writes one
value column at a time (the prediction S'^T k and the correction β k (v - S'^T k)^T are
per column), so column c of head h is exactly the delta rule of one value column with the gate
g_t + gv_tc: a scalar gate (g absent or scalar) or a vector one (g per key dimension, gv_tc
added to each). `fold` makes that problem, with H·V heads of V = 1 (head h·V + c is column c of
head h); the oracles and bounds judge it unchanged, and `unfold_tensor` puts their results back
in ``[..., H, V]`` order.

What the fold does not see is how the kernel forms the decay: exp(g) and exp(gv), two
exponentials and two multiplies, where the folded gate has one of each. ``gate_factors`` on the
folded problem says so, and the decay's rounding ε_d is charged per factor
(`linattn_verify.delta.bounds.decay_error`). The sum g + gv is formed in float64, the bounds'
and oracles' precision: exact up to one rounding of 2^-53, far below every charged unit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import torch

from linattn_verify.delta.problem import DeltaProblem


def fold(problem: DeltaProblem) -> DeltaProblem:
    """``problem`` with its value gate folded into the gate, one head per value column.

    A problem without a value gate is returned as it is.
    """
    gv = problem.gv
    if gv is None:
        return problem
    B, T, H, K, V = problem.shape

    def per_column(x: torch.Tensor) -> torch.Tensor:
        # [B, T, H, ...] -> [B, T, H*V, ...]: each head repeated once per value column.
        return x.unsqueeze(3).expand(B, T, H, V, *x.shape[3:]).reshape(B, T, H * V, *x.shape[3:])

    # The sum in float64 (the judged problem's precision): in the inputs' dtype it would round.
    g = None if problem.g is None else problem.g.double()
    gv = gv.double()
    if g is None:
        gate = gv.reshape(B, T, H * V)
    elif g.ndim == 3:
        gate = (g[..., None] + gv).reshape(B, T, H * V)
    else:
        gate = (g[..., None, :] + gv[..., None]).reshape(B, T, H * V, K)
    S0 = problem.initial_state
    if S0 is not None:
        # [N, H, K, V] -> [N, H*V, K, 1]
        S0 = S0.permute(0, 1, 3, 2).reshape(S0.shape[0], H * V, K, 1)
    return replace(
        problem,
        q=per_column(problem.q),
        k=per_column(problem.k),
        v=problem.v.reshape(B, T, H * V, 1),
        beta=per_column(problem.beta),
        g=gate,
        gv=None,
        initial_state=S0,
        gate_factors=1 + (g is not None),
    )


def unfold_tensor(x: torch.Tensor, name: str, H: int, V: int) -> torch.Tensor:
    """A folded problem's ``o`` or ``final_state``, back in the unfolded problem's order.

    ``o`` ``[B, T, H*V, 1]`` -> ``[B, T, H, V]``; ``final_state`` ``[N, H*V, K, 1]`` ->
    ``[N, H, K, V]``.
    """
    if name == "o":
        return x.reshape(*x.shape[:2], H, V)
    N, _, K, _ = x.shape
    return x.reshape(N, H, V, K).permute(0, 1, 3, 2)


Evaluation = TypeVar("Evaluation", bound=Callable[..., tuple[torch.Tensor, Any]])


def judged_folded(evaluate: Evaluation) -> Evaluation:
    """An oracle ``(problem, ...) -> (o, S_T)`` that takes value-gated problems too.

    The problem is folded (`fold`) and the results put back (`unfold_tensor`); a problem
    without a value gate goes straight through.
    """

    @functools.wraps(evaluate)
    def evaluated(problem: DeltaProblem, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        if not isinstance(problem, DeltaProblem) or problem.gv is None:
            return evaluate(problem, *args, **kwargs)
        _, _, H, _, V = problem.shape
        o, S = evaluate(fold(problem), *args, **kwargs)
        return unfold_tensor(o, "o", H, V), None if S is None else unfold_tensor(
            S, "final_state", H, V
        )

    return evaluated  # type: ignore[return-value]


__all__ = ["fold", "judged_folded", "unfold_tensor"]
