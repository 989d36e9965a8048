# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Algebraic identities of the function (DESIGN.md §8.8): linearity, affinity, convexity.

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
    attempt,
    compare_within,
    finish,
    run_bounds,
    skipped,
)
from linattn_verify.kernel import Kernel
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec
from linattn_verify.verdict import PropertyResult

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


def linear_in_values_and_state(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that the unnormalized output is linear in (v, S_0) (and so is the final state).

    For powers of two α, β (exact scalings), values v1, v2 and initial states S1, S2 (when the
    case has one), with x3 = fl(α x1 + β x2) the rounded combination and δ = x3 - (α x1 + β x2)
    (exact in float64):

        |o(v3; S3) - (α o(v1; S1) + β o(v2; S2) + o*(δv; δS))| <= B3 + |α| B1 + |β| B2

    where o* is the float64 oracle and B_i the error model's bound of run i; likewise for S_T.

    Args:
        spec: The case (v2, S2, α, β come from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`; scores ``max_r`` and ``inputs_exact`` (1.0 when δ = 0).
    """
    prop = "linear_in_values_and_state"
    problem = spec.build()
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    if problem.normalize:
        return skipped(prop, kernel, spec, "normalized output is not linear in v")
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
    p2 = replace(problem, v=v2, initial_state=S2)
    p3 = replace(problem, v=v3, initial_state=S3)
    runs = [attempt(kernel, p) for p in (p1, p2, p3)]
    failures = [f"run {i + 1}: {r}" for i, r in enumerate(runs) if isinstance(r, str)]
    if failures:
        return finish(prop, kernel, spec, failures, {})
    r1, r2, r3 = runs
    assert not isinstance(r1, str)
    assert not isinstance(r2, str)
    assert not isinstance(r3, str)
    exact_inputs = not bool(dv.any()) and (dS is None or not bool(dS.any()))
    correction: dict[str, torch.Tensor] = {}
    if not exact_inputs:
        correction = _exact(replace(problem.to(torch.float64), v=dv, initial_state=dS))
    bounds = [run_bounds(kernel, p) for p in (p1, p2, p3)]
    max_r, worst = 0.0, None
    for name, actual in r3.outputs.items():
        expected = alpha * r1.outputs[name].double() + beta * r2.outputs[name].double()
        if name in correction:
            expected = expected + correction[name]
        b1, b2, b3 = (b[name] for b in bounds)
        bound = b3.bound + abs(alpha) * b1.bound + abs(beta) * b2.bound
        # The float64 sum above and the oracle's correction round too: 4 units of 2^-53.
        bound = bound + 4 * _U64 * (expected.abs() + abs(alpha) * b1.magnitude)
        c = compare_within(name, actual, expected, bound, magnitude=b3.magnitude, unit=b3.unit)
        if c.max_r >= max_r:
            max_r, worst = c.max_r, c.worst_index
        if not c.ok:
            failures.append(
                c.message(kernel.name).replace(
                    "is not close to the float64 oracle",
                    f"of fl({alpha:g}·v1 + {beta:g}·v2) is not {alpha:g}·o(v1) + {beta:g}·o(v2)"
                    " (+ the oracle's rounding correction) within the sum of the bounds",
                )
            )
    scores = {"max_r": max_r, "inputs_exact": float(exact_inputs)}
    return finish(prop, kernel, spec, failures, scores, worst, summary=f"α={alpha:g} β={beta:g}")


def normalized_affine_and_convex(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a normalized output (φ >= 0, no initial state) is affine in v and in the hull.

    With D_t = s φ(q_t)^T z_t, Z_t = D_t + eps and ρ_t = D_t / Z_t (0 when Z_t = 0), for a power
    of two c, ṽ = fl(v + c) and δ = ṽ - (v + c):

        |o(ṽ) - (o(v) + c ρ_t + o*(δ))| <= B(ṽ) + B(v)
        ρ_t min_{j<=t} v_ji - B_ti <= o(v)_ti <= ρ_t max_{j<=t} v_ji + B_ti

    (j ranges over the row's own sequence). With eps = 0, ρ_t = 1 and the second line is the
    convex hull of the visible values; eps > 0 shrinks the weights toward 0 by ρ_t. The initial
    state of the case, if any, is dropped. Unverifiable elements are not judged.

    Args:
        spec: The case (c comes from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`; scores ``affine_max_r``, ``hull_max_r`` (excess / B).
    """
    prop = "normalized_affine_and_convex"
    problem = spec.build()
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    if not problem.normalize:
        return skipped(prop, kernel, spec, "unnormalized output (the property is about o = N/Z)")
    if problem.feature_map not in ("elu1", "relu"):
        return skipped(prop, kernel, spec, f"feature_map={problem.feature_map} can be negative")
    problem = replace(problem, initial_state=None, initial_key_sum=None)
    c = random.Random(spec.seed).choice(_POWERS)
    v = problem.v
    shifted = (v.double() + c).to(v.dtype)
    dv = shifted.double() - (v.double() + c)
    p2 = replace(problem, v=shifted)
    r1, r2 = attempt(kernel, problem), attempt(kernel, p2)
    failures = [f"run {i}: {r}" for i, r in ((1, r1), (2, r2)) if isinstance(r, str)]
    if isinstance(r1, str) or isinstance(r2, str):
        return finish(prop, kernel, spec, failures, {})
    b1, b2 = (run_bounds(kernel, p)["o"] for p in (problem, p2))
    res = b1.residual
    assert res is not None
    recipe = kernel.precision_recipe(problem.q.dtype)
    eps = recipe.effective_eps(problem.eps)
    Z = res.denominator
    rho = torch.where(Z == 0, 0.0, (Z - eps) / torch.where(Z == 0, 1.0, Z))
    o1 = r1.outputs["o"].double()
    expected = o1 + c * rho
    if bool(dv.any()):
        expected = expected + _exact(replace(problem.to(torch.float64), v=dv))["o"]
    slack = 4 * _U64 * (expected.abs() + abs(c))
    affine = compare_within(
        "o",
        r2.outputs["o"],
        expected,
        b1.bound + b2.bound + slack,
        magnitude=b2.magnitude,
        unit=b2.unit,
    )
    if not affine.ok:
        failures.append(
            affine.message(kernel.name).replace(
                "is not close to the float64 oracle",
                f"(v + {c:g}) is not o(v) + {c:g}·ρ_t within the sum of the bounds",
            )
        )
    v_lo, v_hi = _running_hull(problem)
    lo, hi = torch.minimum(rho * v_lo, rho * v_hi), torch.maximum(rho * v_lo, rho * v_hi)
    excess = torch.clamp(torch.maximum(lo - o1, o1 - hi), min=0.0)
    # ρ = (Z - eps) / Z comes from Z = fl64(D + eps), which keeps D only to ulp(eps)/2: where
    # D << eps, ρ is off by up to 2^-53 eps / Z <= 2^-53 absolutely (even 0 for D > 0), so the
    # interval ends are off by up to 2^-53 max|v| (plus the float64 products' own rounding).
    rho_error = 2 * _U64 * torch.maximum(v_lo.abs(), v_hi.abs())
    bound = b1.bound + 4 * _U64 * o1.abs() + rho_error
    judged = torch.isfinite(bound) & (o1.abs() < torch.inf)
    ratio = torch.where(judged, excess / torch.where(bound > 0, bound, 1.0), 0.0)
    ratio = torch.where(judged & (bound == 0) & (excess > 0), torch.inf, ratio)
    hull_r = float(ratio.max()) if ratio.numel() else 0.0
    worst = affine.worst_index
    if hull_r > 1.0:
        flat = int(torch.argmax(ratio))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), o1.shape))
        failures.append(
            f"o lies outside ρ_t·[min_j v_j, max_j v_j] (the convex hull) by more than its bound!\n"
            f"Elements outside: {int((ratio > 1).sum())} / {o1.numel()}\n"
            f"Greatest excess / bound: {hull_r:.3g} at index {index} (up to 1 allowed): "
            f"o {float(o1[index]):.9g}, interval [{float(lo[index]):.9g}, "
            f"{float(hi[index]):.9g}], bound {float(bound[index]):.3g}"
        )
        worst = index
    scores = {"affine_max_r": affine.max_r, "hull_max_r": hull_r}
    return finish(prop, kernel, spec, failures, scores, worst, summary=f"c={c:g}")


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
