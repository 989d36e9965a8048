# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""GLA's value gate judged as single-column problems: gv folded into the gate, V into the heads.

With a value gate gv ``[B, T, H, V]`` (FLA's ``gv`` of ``fused_recurrent_gla``) the state
decays S_t = diag(exp(g_t)) S_{t-1} diag(exp(gv_t)) + φ(k_t) v_t^T, so column c is
S_t[:, c] = exp(g_t + gv_tc) ⊙ S_{t-1}[:, c] + φ(k_t) v_tc and o_tc = s φ(q_t)^T S_t[:, c]:
exactly linear attention of one value column with the gate g_t + gv_tc (scalar when g is absent
or scalar, a vector gate when g is). `fold` makes that problem, with H·V heads of V = 1 (the
shared helpers of `linattn_verify.core.value_gate`); the oracles and bounds judge it unchanged.

What the fold does not see is how the kernel forms each decay: exp(g) and exp(gv), two
exponentials and a product, where the folded gate has one exponential. ``gate_factors = 2``
on the folded problem says so, and each decay weight's rounding is charged for it
(`linattn_verify.linear_attn._bounds.terms.SequenceTerms.weight_error`, error model §2.9).
A normalized problem has no value gate: its key sum z has no value columns to gate.
"""

from __future__ import annotations

from dataclasses import replace

from linattn_verify.core.value_gate import folded_fields, judged_folded, unfold_tensor
from linattn_verify.linear_attn.semantics import Problem


def fold(problem: Problem) -> Problem:
    """``problem`` with its value gate folded into the gate, one head per value column.

    A problem without a value gate is returned as it is.
    """
    if problem.gv is None:
        return problem
    return replace(problem, **folded_fields(problem))


judged = judged_folded(fold)
"""Wrap a linear-attention oracle ``(problem, ...) -> (o, S_T)`` so it takes value gates."""


__all__ = ["fold", "judged", "unfold_tensor"]
