# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A scalar gate is the vector gate repeated over the key dimensions (docs/design.md §3).

A kernel that takes both gate shapes runs two code paths for what is one function when the
vector gate is constant across K; the two must agree within both runs' error bounds, the gate's
gradient included (the scalar dg_t is the sum over m of the vector dg_tm, since every dimension
of the repeated gate is the same input).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from linattn_properties._support import (
    not_applicable,
    prepare_case,
    property_function,
    run_bounds,
    run_kernel,
)
from linattn_verify.compare import Side, compare_pair
from linattn_verify.core.bound import TensorBound
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import PropertyResult
from linattn_verify.typing import LIFTED_MAPS


def _summed_over_keys(label: str, value: torch.Tensor, tb: TensorBound) -> Side:
    """A vector gate's dg ``[B, T, H, K]`` summed over K, with the sum of its bounds.

    The sum is taken in float64: its own rounding (at most K·2^-53 relative to Σ_m |dg_m|) is
    some 2^-29 of the fp32 bounds it is judged with, and is not charged.
    """
    undefined = None if tb.undefined is None else tb.undefined.any(-1)
    return Side(
        label,
        value.double().sum(-1),
        tb.bound.sum(-1),
        tb.verifiable.all(-1),
        undefined,
    )


@property_function
def scalar_gate_matches_repeated_vector(
    spec: ProblemSpec, kernel: Kernel, *, backward: bool = True
) -> PropertyResult:
    """Check that a kernel's scalar-gate path and its vector-gate path compute one function.

    With g ``[B, T, H]`` the case's scalar gate and g' = g repeated over K (``[B, T, H, K]``),
    f the kernel and B each run's error bound:

        |f(g) - f(g')| <= B(g) + B(g')     for o, the final state and dq, dk, dv, dS_0, dz_0
        |dg - Σ_m dg'_m| <= B(dg) + Σ_m B(dg'_m)

    The bounds of the two runs are the same (a repeated gate has the scalar gate's bound,
    docs/error-model.md §2.7), so this is the pairwise rule of `linattn_verify.compare` (ratio
    <= 2). Applies to kernels that declare both gate shapes, on cases with a scalar gate.

    Args:
        spec: The case (cotangents are drawn from ``spec.seed``).
        kernel: The kernel under test.
        backward: Compare the gradients too. Default: `True`.

    Returns:
        The `PropertyResult`: one pairwise comparison per tensor (subject ``"<kernel> with the
        repeated vector gate"``).
    """
    name = "scalar_gate_matches_repeated_vector"
    if spec.gate != "scalar" or spec.decay == "none":
        return not_applicable(name, kernel, spec, "the case has no scalar gate")
    if spec.feature_map in LIFTED_MAPS:
        return not_applicable(
            name, kernel, spec, f"{spec.feature_map} is lifted: a vector gate does not apply to it"
        )
    case = prepare_case(name, spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    if kernel.implied_decay is not None or "vector" not in kernel.capabilities.gates:
        return case.not_applicable(f"{kernel.name} takes no vector gate")
    scalar = replace(case.problem, output_final_state=kernel.capabilities.final_state)
    assert scalar.g is not None
    K = scalar.q.shape[-1]
    vector = scalar.with_tensors(g=scalar.g[..., None].expand(*scalar.g.shape, K).contiguous())
    cotangents = None
    if backward and kernel.capabilities.backward:
        do, d_final = random_cotangents(scalar, spec.seed + 1)
        cotangents = (do, d_final if scalar.output_final_state else None)
    scalar_run = run_kernel(kernel, scalar, cotangents=cotangents)
    vector_run = run_kernel(kernel, vector, cotangents=cotangents)
    scalar_bounds = run_bounds(kernel, scalar, cotangents)
    vector_bounds = run_bounds(kernel, vector, cotangents)
    label = f"{kernel.name} with the repeated vector gate"
    comparisons, findings = [], []
    for tensor, expected in scalar_run.everything().items():
        actual = vector_run.everything().get(tensor)
        mine, theirs = vector_bounds.get(tensor), scalar_bounds.get(tensor)
        if actual is None or mine is None or theirs is None:
            findings.append(f"{tensor}: missing from a run or without an error bound")
            continue
        if tensor == "dg":
            a = _summed_over_keys(label, actual, mine)
        else:
            a = Side.of(label, actual, mine)
        b = Side.of("the scalar gate", expected, theirs)
        comparisons.append(compare_pair(tensor, a, b, theirs.reference))
    return case.judged(comparisons, findings=findings)


__all__ = ["scalar_gate_matches_repeated_vector"]
