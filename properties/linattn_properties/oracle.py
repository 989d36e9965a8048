# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Oracle agreement: a kernel's outputs and gradients lie within the error bound of the oracle.

The machinery the properties share (`prepare_case`, `run_kernel`, `property_function`) lives in
`linattn_properties._support`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

import torch

from linattn_properties._support import (
    failed,
    judged,
    not_applicable,
    prepare_case,
    property_function,
    run_kernel,
)
from linattn_verify.compare import judge_against_oracle
from linattn_verify.linear_attn.feature_maps import (
    apply_feature_map,
    feature_map_derivative,
    lift_sensitivity,
)
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles.parallel import State, parallel_reference
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import PropertyResult
from linattn_verify.typing import LIFTED_MAPS

GRADCHECK_EPS = 1e-6
"""Finite-difference step of the gradcheck, in units of each input's scale (see below)."""

GRADCHECK_MAX_KAPPA = 1e3
"""Largest denominator condition number M^Z/|Z| of a normalized row that gradcheck judges.

Central differences of N/Z err by about (eps κ)^2 relatively, and their roundoff by u κ / eps;
beyond κ ~ 1e3 the finite differences, not the reference, would decide the outcome."""


@property_function
def outputs_match_oracle(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check the forward pass against the float64 oracle.

    For every element x of o (and of S_T, z_T when the case asks for the final state), with x̂
    the kernel's value, x the oracle's and B the bound of the kernel's precision recipe:

        r = |x̂ - x| / B <= 2 on verifiable elements,  η <= 2 (normalized o),
        and x̂ finite wherever x is finite and representable;

    where the exact denominator is 0 (o undefined), x̂ must be the value the kernel declared
    (``capabilities.zero_denominator``: 0, the IEEE quotient, or anything).

    Args:
        spec: The case.
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: one oracle comparison per tensor (not applicable when the kernel
        does not support the case).
    """
    case = prepare_case("outputs_match_oracle", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    run = run_kernel(kernel, case.problem, caller_judges=True)
    judgement = judge_against_oracle(
        case.problem,
        run.o,
        run.final_state,
        recipe=case.recipe,
        name=kernel.name,
        zero_denominator=kernel.capabilities.zero_denominator,
        causal_exact=kernel.capabilities.causal_exact,
        final_state_dtype=kernel.capabilities.final_state_dtype,
    )
    return case.judged(judgement.comparisons, findings=judgement.findings, notes=judgement.notes)


@property_function
def gradients_match_oracle(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check the backward pass against autograd of the float64 oracle.

    With the final state requested and normal cotangents (do, dS_T, dz_T) drawn from
    ``spec.seed + 1``, the loss L = <o, do> + <S_T, dS_T> + <z_T, dz_T>; for every element of
    ∂L/∂q, ∂L/∂k, ∂L/∂v, ∂L/∂g, ∂L/∂S_0 and ∂L/∂z_0 that exists:

        r = |x̂ - x| / B <= 2 on verifiable elements (B from `backward_bounds`),

    and the forward tensors as in `outputs_match_oracle`. Gradient elements that depend on a
    row whose exact denominator is 0 are undefined: judged by the bound of the ``zero``
    convention for a kernel that declared it, not judged for ``ieee`` and ``any``.

    Args:
        spec: The case.
        kernel: The kernel under test.

    Returns:
        The `PropertyResult` (not applicable without backward support or for unsupported
        cases).
    """
    case = prepare_case(
        "gradients_match_oracle",
        spec,
        kernel,
        backward=True,
        final_state=kernel.capabilities.final_state,
    )
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    do, d_final = random_cotangents(problem, spec.seed + 1)
    if not problem.output_final_state:
        d_final = None
    run = run_kernel(kernel, problem, cotangents=(do, d_final), caller_judges=True)
    judgement = judge_against_oracle(
        problem,
        run.o,
        run.final_state,
        recipe=case.recipe,
        grads=run.grads,
        do=do,
        d_final_state=d_final,
        name=kernel.name,
        zero_denominator=kernel.capabilities.zero_denominator,
        causal_exact=kernel.capabilities.causal_exact,
        final_state_dtype=kernel.capabilities.final_state_dtype,
    )
    return case.judged(judgement.comparisons, findings=judgement.findings, notes=judgement.notes)


def _power_of_two_scale(x: torch.Tensor) -> float:
    """The power of two nearest max|x| (1 for an all-zero tensor): dividing by it is exact.

    The exponent stays within ±1000 so that the scale and its inverse (which autograd applies)
    are normal float64 numbers; subnormal values are not rescaled further.
    """
    top = float(x.abs().max()) if x.numel() else 0.0
    if top == 0 or not math.isfinite(top):
        return 1.0
    return 2.0 ** min(max(round(math.log2(top)), -1000), 1000)


def _denominator_condition(problem: Problem, scales: Mapping[str, float]) -> torch.Tensor:
    """κ_t = M^Z_t / |Z_t| per row ``[B, T, H]`` (inf where Z_t = 0) of a normalized problem.

    Z - eps is the unnormalized output of the same problem with v = 1 and S_0 = z_0. M^Z is the
    same with every factor x replaced by |φ(x)| + c_x |φ'(x)| (and |z_0| + c_z0, |s|): it bounds
    how much Z moves, relative to itself, when an input moves by its finite-difference step
    (c_x GRADCHECK_EPS), including inputs that are exactly 0.
    """
    ones = torch.ones(*problem.q.shape[:3], 1, dtype=problem.q.dtype)
    z0 = problem.initial_key_sum
    plain = replace(
        problem,
        v=ones,
        normalize=False,
        eps=0.0,
        initial_state=None if z0 is None else z0[..., None],
        initial_key_sum=None,
        output_final_state=False,
    )

    def reach(name: str, x: torch.Tensor) -> torch.Tensor:
        query = name == "q"
        feature_map = problem.map_of(query=query)
        if feature_map in LIFTED_MAPS:
            phi = problem.query_features(x) if query else problem.key_features(x)
            pre = problem.query_prescale if query else 1.0
            xin = x * pre
            moved = lift_sensitivity(xin, feature_map, problem.feature_weights, phi)
            return phi.abs() + scales.get(name, 0.0) * abs(pre) * moved
        phi = apply_feature_map(x, feature_map).abs()
        return phi + scales.get(name, 0.0) * feature_map_derivative(x, feature_map).abs()

    absolute = replace(
        plain,
        q=reach("q", problem.q),
        k=reach("k", problem.k),
        feature_map="identity",
        feature_weights=None,
        scale=abs(problem.outer_scale),
        initial_state=(
            None if z0 is None else (z0.abs() + scales.get("initial_key_sum", 0.0))[..., None]
        ),
    )
    Z = parallel_reference(plain)[0][..., 0] + problem.eps
    M = parallel_reference(absolute)[0][..., 0] + problem.eps
    return torch.where(Z == 0, torch.inf, M / Z.abs())


def float64_path_passes_gradcheck(
    spec: ProblemSpec,
    *,
    reference: Callable[[Problem], tuple[torch.Tensor, State]] = parallel_reference,
) -> PropertyResult:
    """Check the float64 reference's autograd gradients against finite differences.

    `torch.autograd.gradcheck` (fast mode: random directions u, w; w^T J u by autograd and by
    central differences must agree to atol 1e-5 + rtol 1e-3) of x -> (o, S_T, z_T) w.r.t. q, k,
    v, g and the initial state (S_0, z_0), in float64, at the spec's problem.

    Gradcheck's tolerances are absolute, so every input x is reparametrized as x = c_x x' and
    every output y reported as y / c_y, with c the power of two nearest max|x| (exact, and the
    Jacobian only rescales). Points where the function is not differentiable are not judged,
    with the reason in the message: q or k (relu only) when a coordinate lies within the step of
    the kink at 0, and normalized rows whose denominator is 0 or has condition M^Z/|Z| >
    `GRADCHECK_MAX_KAPPA` (those rows are left out of o).

    Args:
        spec: The case (its dtype only selects the rounded inputs; the check runs in float64).
        reference: The float64 path under test. Default: `parallel_reference`.

    Returns:
        The `PropertyResult` for kernel ``"oracle/float64"``.
    """
    name, kernel_name = "float64_path_passes_gradcheck", "oracle/float64"
    problem = replace(spec.build().to(torch.float64), output_final_state=True)
    inputs = problem.inputs()
    notes: list[str] = []
    scales = {n: _power_of_two_scale(x) for n, x in inputs.items()}
    for n in ("q", "k"):
        near_kink = inputs[n].abs() <= 2 * GRADCHECK_EPS * scales[n]
        if problem.map_of(query=n == "q") == "relu" and bool(near_kink.any()):
            del inputs[n]
            notes.append(f"{n} left out: a coordinate within the step of relu's kink at 0")
    if not inputs:
        return not_applicable(name, kernel_name, spec, "; ".join(notes))
    tiny = torch.finfo(torch.float64).tiny
    for n in ("q", "k"):
        x = getattr(problem, n)
        features = (problem.query_features(x) if n == "q" else problem.key_features(x)).abs()
        if bool(((features > 0) & (features < tiny)).any()):
            # float64 is a sufficient oracle only inside its normal range (docs/error-model.md
            # §6.3); elu1 of x < -708 is subnormal there, and its products lose all relative
            # accuracy.
            return not_applicable(
                name, kernel_name, spec, f"φ({n}) has values below float64's normal range"
            )
    rows = torch.ones(problem.q.shape[:3], dtype=torch.bool)
    if problem.normalize:
        perturbed = {n: scales[n] for n in inputs}
        rows = _denominator_condition(problem, perturbed) <= GRADCHECK_MAX_KAPPA
        if not bool(rows.all()):
            notes.append(
                f"{int((~rows).sum())} of {rows.numel()} normalized rows left out: denominator "
                f"zero or ill-conditioned (κ > {GRADCHECK_MAX_KAPPA:g})"
            )
    names = list(inputs)

    def outputs(p: Problem) -> list[torch.Tensor]:
        o, final = reference(p)
        parts = list(final) if isinstance(final, tuple) else [final]
        judged = [o[rows]] if bool(rows.any()) else []
        return [*judged, *(x for x in parts if x is not None)]

    try:
        out_scales = [_power_of_two_scale(y) for y in outputs(problem)]
    except Exception as exc:
        return failed(name, kernel_name, spec, f"reference raised {exc!r}")

    def f(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        moved = {n: x * scales[n] for n, x in zip(names, xs, strict=True)}
        ys = outputs(replace(problem, **moved))  # type: ignore[arg-type]
        return tuple(y / c for y, c in zip(ys, out_scales, strict=True))

    leaves = tuple((inputs[n] / scales[n]).requires_grad_(True) for n in names)
    with torch.random.fork_rng(devices=[]):
        # Fast mode draws its random directions from the global generator: seed it so the
        # property stays a pure function of the spec.
        torch.manual_seed(spec.seed)
        try:
            torch.autograd.gradcheck(
                f, leaves, eps=GRADCHECK_EPS, atol=1e-5, rtol=1e-3, fast_mode=True
            )
        except Exception as exc:  # GradcheckError, or the reference raising
            message = "\n".join(
                [
                    f"gradcheck of the float64 path failed w.r.t. {names} "
                    f"(outputs: o, S_T{', z_T' if problem.normalize else ''}):",
                    f"{type(exc).__name__}: {exc}",
                    *notes,
                    f"problem: {problem.describe()}",
                ]
            )
            return failed(name, kernel_name, spec, message)
    return judged(name, kernel_name, spec, (), notes=[f"gradcheck passed w.r.t. {names}", *notes])


__all__ = [
    "GRADCHECK_EPS",
    "GRADCHECK_MAX_KAPPA",
    "float64_path_passes_gradcheck",
    "gradients_match_oracle",
    "outputs_match_oracle",
]
