# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Algebraic identities of the function (docs/design.md §8.8): linearity, affinity, convexity.

Inputs formed from other inputs (α v1 + β v2, v + c) are rounded to the input dtype; the
exact effect of that rounding δ is linear too, so it is computed by the float64 oracle
(o(δ), exact to 2^-53 relative) and added to the expected value: the identities are then exact
statements about the kernel's actual inputs, judged within the sum of the runs' error bounds.
"""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from linattn_properties._support import (
    prepare_case,
    property_function,
    run_bounds,
    run_kernel,
)
from linattn_verify.compare import FAIL_THRESHOLD, Comparison, compare, compare_within
from linattn_verify.core.bound import TensorBound
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.linear_attn.tolerance import as_kernel_sees
from linattn_verify.results import PropertyResult

_POWERS = (0.25, 0.5, 2.0, 4.0, -0.5, -1.0, -2.0)
_U64 = 2.0**-53


def _exact(problem: Problem) -> dict[str, torch.Tensor]:
    """Return the float64 oracle's o and final state by name."""
    p = replace(problem.to(torch.float64), output_final_state=True)
    o, final = parallel_reference(p)
    out = {"o": o}
    if isinstance(final, tuple):
        out["final_state"], out["final_key_sum"] = final
    elif isinstance(final, torch.Tensor):
        out["final_state"] = final
    return out


def _combination(alpha: float, beta: float, x1: str, x2: str) -> str:
    """``"0.5·v1 - 2·v2"``: the combination α x1 + β x2, as a tensor qualifier."""
    sign = "-" if beta < 0 else "+"
    return f"{alpha:g}·{x1} {sign} {abs(beta):g}·{x2}"


@property_function
def linear_in_values_and_state(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that the unnormalized output is linear in (v, S_0) (and so is the final state).

    For powers of two α, β (exact scalings), values v1, v2 and initial states S1, S2 (when the
    case has one), with x3 = fl(α x1 + β x2) the rounded combination and δ = x3 - (α x1 + β x2)
    (exact in float64):

        |o(v3; S3) - (α o(v1; S1) + β o(v2; S2) + o*(δv; δS))| <= B3 + |α| B1 + |β| B2

    where o* is the float64 oracle and B_i the error model's bound of run i; likewise for S_T.
    The rule is `linattn_verify.compare`'s (r <= 2, 4·2^-53 of float64 slack added to the bound).

    Args:
        spec: The case (v2, S2, α, β come from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: one comparison per output of run 3, tensor ``"o(α·v1 + β·v2)"``
        (``"o(α·(v1, S1) + β·(v2, S2))"`` with a state); α, β and whether δ = 0 in its notes.
    """
    case = prepare_case("linear_in_values_and_state", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    if problem.normalize:
        return case.not_applicable("normalized output is not linear in v")
    rng = random.Random(spec.seed)
    alpha, beta = rng.choice(_POWERS), rng.choice(_POWERS)
    gen = torch.Generator().manual_seed(spec.seed ^ 0xA1)
    v1 = problem.v
    v2 = torch.randn(v1.shape, generator=gen).to(v1.device, v1.dtype)
    v3 = (alpha * v1.double() + beta * v2.double()).to(v1.dtype)
    dv = v3.double() - (alpha * v1.double() + beta * v2.double())
    S1 = problem.initial_state
    S2 = S3 = dS = None
    if S1 is not None:
        S2 = torch.randn(S1.shape, generator=gen).to(S1.device, S1.dtype)
        S3 = (alpha * S1.double() + beta * S2.double()).to(S1.dtype)
        dS = S3.double() - (alpha * S1.double() + beta * S2.double())
    p1 = problem
    p2 = problem.with_tensors(v=v2, initial_state=S2)
    p3 = problem.with_tensors(v=v3, initial_state=S3)
    r1, r2, r3 = (run_kernel(kernel, p) for p in (p1, p2, p3))
    exact_inputs = not bool(dv.any()) and (dS is None or not bool(dS.any()))
    correction: dict[str, torch.Tensor] = {}
    if not exact_inputs:
        correction = _exact(problem.to(torch.float64).with_tensors(v=dv, initial_state=dS))
    bounds = [run_bounds(kernel, p) for p in (p1, p2, p3)]
    combination = _combination(alpha, beta, "v1", "v2")
    if S1 is not None:
        combination = _combination(alpha, beta, "(v1, S1)", "(v2, S2)")
    comparisons = []
    for name, actual in r3.outputs.items():
        expected = alpha * r1.outputs[name].double() + beta * r2.outputs[name].double()
        if name in correction:
            expected = expected + correction[name]
        b1, b2, b3 = (b[name] for b in bounds)
        bound = b3.bound + abs(alpha) * b1.bound + abs(beta) * b2.bound
        # The float64 sum above and the oracle's correction round too: 4 units of 2^-53.
        bound = bound + 4 * _U64 * (expected.abs() + abs(alpha) * b1.magnitude)
        comparisons.append(
            compare_within(
                f"{name}({combination})",
                actual,
                expected,
                bound,
                magnitude=b3.magnitude,
                unit=b3.unit,
                subject=kernel.name,
            )
        )
    notes = [
        f"α={alpha:g}, β={beta:g}; expected: {_combination(alpha, beta, 'x(run 1)', 'x(run 2)')}"
        " + o*(δ) within B3 + |α| B1 + |β| B2 (the sum of the runs' bounds)",
        "inputs exact: δ = 0"
        if exact_inputs
        else "inputs rounded: the oracle's o*(δ) of the rounding δ is added to the expected value",
    ]
    return case.judged(comparisons, notes=notes)


@property_function
def normalized_affine_and_convex(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a normalized output (φ >= 0, no initial state) is affine in v and in the hull.

    With D_t = s φ(q_t)^T z_t, Z_t = D_t + eps and ρ_t = D_t / Z_t (0 when Z_t = 0), for a power
    of two c, ṽ = fl(v + c) and δ = ṽ - (v + c):

        |o(ṽ) - (o(v) + c ρ_t + o*(δ))| <= B(ṽ) + B(v)                        (r <= 2)
        ρ_t min_{j<=t} v_ji - B_ti <= o(v)_ti <= ρ_t max_{j<=t} v_ji + B_ti    (no factor 2)

    (j ranges over the row's own sequence). With eps = 0, ρ_t = 1 and the second line is the
    convex hull of the visible values; eps > 0 shrinks the weights toward 0 by ρ_t. The initial
    state of the case, if any, is dropped. Unverifiable elements are not judged, nor are rows
    whose exact denominator is 0 (o is undefined there; the value the kernel declared there is
    the oracle comparison's to judge).

    Args:
        spec: The case (c comes from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: comparisons ``"o(v ± |c|)"`` (the affine identity) and
        ``"o(v) in ρ_t·hull(v)"`` (the interval); c in its notes.
    """
    case = prepare_case("normalized_affine_and_convex", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    if not problem.normalize:
        return case.not_applicable("unnormalized output (the property is about o = N/Z)")
    if problem.feature_map not in ("elu1", "relu"):
        return case.not_applicable(f"feature_map={problem.feature_map} can be negative")
    problem = problem.with_tensors(initial_state=None, initial_key_sum=None)
    c = random.Random(spec.seed).choice(_POWERS)
    v = problem.v
    shifted = (v.double() + c).to(v.dtype)
    dv = shifted.double() - (v.double() + c)
    p2 = problem.with_tensors(v=shifted)
    r1, r2 = run_kernel(kernel, problem), run_kernel(kernel, p2)
    b1, b2 = (run_bounds(kernel, p)["o"] for p in (problem, p2))
    res = b1.residual
    assert res is not None
    # The part of Z no key contributes: eps, or with eps inside the dot s φ(q)·(eps, ..., eps).
    judged = as_kernel_sees(problem, case.recipe)
    eps: float | torch.Tensor = judged.eps
    in_dot = judged.key_sum_offset
    if in_dot:
        q_features = problem.query_features(problem.q.double()).sum(-1, keepdim=True)
        eps = eps + problem.outer_scale * in_dot * q_features
    Z = res.denominator
    rho = torch.where(Z == 0, 0.0, (Z - eps) / torch.where(Z == 0, 1.0, Z))
    o1 = r1.o.double()
    expected = o1 + c * rho
    if bool(dv.any()):
        expected = expected + _exact(problem.to(torch.float64).with_tensors(v=dv))["o"]
    slack = 4 * _U64 * (expected.abs() + abs(c))
    undefined = b1.undefined
    affine = compare_within(
        f"o(v {'-' if c < 0 else '+'} {abs(c):g})",
        r2.o,
        expected,
        b1.bound + b2.bound + slack,
        magnitude=b2.magnitude,
        unit=b2.unit,
        subject=kernel.name,
        undefined=undefined,
    )
    hull = _hull_comparison(problem, kernel, r1.o, rho, b1)
    notes = [
        f"c={c:g}; o(v + c) expected: o(v) + c·ρ_t (+ o*(δ)) within B(v + c) + B(v)",
        "o(v) in ρ_t·hull(v): against the nearest point of ρ_t·[min_j v_j, max_j v_j], "
        f"excess <= B(v) (the allowed shown is B over {FAIL_THRESHOLD:g}: score <= "
        f"{FAIL_THRESHOLD:g})",
    ]
    return case.judged([affine, hull], notes=notes)


def _hull_comparison(
    problem: Problem, kernel: Kernel, o: torch.Tensor, rho: torch.Tensor, b1: TensorBound
) -> Comparison:
    """Judge ρ_t min_j v_j - B <= o <= ρ_t max_j v_j + B as a comparison with the interval.

    The expected value is the point of the interval nearest o, so |o - expected| is the excess
    outside it. The rule allows the bound itself, not `FAIL_THRESHOLD` times it: the bound the
    comparison carries is B / S, so that score <= S means excess <= B. Rows whose exact
    denominator is 0 (``b1.undefined``) are not judged.
    """
    o1 = o.double()
    v_lo, v_hi = _running_hull(problem)
    lo, hi = torch.minimum(rho * v_lo, rho * v_hi), torch.maximum(rho * v_lo, rho * v_hi)
    nearest = torch.minimum(torch.maximum(o1, lo), hi)
    # ρ = (Z - eps) / Z comes from Z = fl64(D + eps), which keeps D only to ulp(eps)/2: where
    # D << eps, ρ is off by up to 2^-53 eps / Z <= 2^-53 absolutely (even 0 for D > 0), so the
    # interval ends are off by up to 2^-53 max|v| (plus the float64 products' own rounding).
    rho_error = 2 * _U64 * torch.maximum(v_lo.abs(), v_hi.abs())
    bound = b1.bound + 4 * _U64 * o1.abs() + rho_error
    judged = torch.isfinite(bound) & torch.isfinite(o1)
    if b1.undefined is not None:
        judged = judged & ~b1.undefined
    interval = TensorBound(
        name="o(v) in ρ_t·hull(v)",
        reference=torch.where(judged, nearest, o1),
        bound=torch.where(judged, bound / FAIL_THRESHOLD, torch.inf),
        magnitude=b1.magnitude,
        count=torch.ones_like(o1),
        unit=b1.unit,
        verifiable=judged,
        undefined=b1.undefined,
        zero_denominator="any",
    )
    # The reference is the interval's nearest point, not the exact value: no ulps against it.
    return compare(o, interval, subject=kernel.name, exact_reference=False)


def _running_hull(problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """Return running min and max of v over each sequence's visible tokens, ``[B, T, H, V]``."""
    v = problem.v.double()
    lo, hi = v.clone(), v.clone()
    for _, b, start, end in problem.sequences():
        if end > start:
            lo[b, start:end] = torch.cummin(v[b, start:end], dim=0).values
            hi[b, start:end] = torch.cummax(v[b, start:end], dim=0).values
    return lo, hi


__all__ = ["linear_in_values_and_state", "normalized_affine_and_convex"]
