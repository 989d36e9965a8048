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

from dataclasses import replace

from linattn_verify.core.value_gate import (
    folded_fields,
    judged_folded,
    per_column,
    unfold_tensor,
)
from linattn_verify.delta.problem import DeltaProblem


def fold(problem: DeltaProblem) -> DeltaProblem:
    """``problem`` with its value gate folded into the gate, one head per value column.

    A problem without a value gate is returned as it is.
    """
    if problem.gv is None:
        return problem
    V = problem.v.shape[-1]
    return replace(problem, **folded_fields(problem), beta=per_column(problem.beta, V))


judged = judged_folded(fold)
"""Wrap a delta oracle ``(problem, ...) -> (o, S_T)`` so it takes value-gated problems."""


__all__ = ["fold", "judged", "unfold_tensor"]
