# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exactness on dyadic inputs (docs/design.md §8.10, docs/error-model.md §0.6 and §7).

Tolerance tests cannot see a bug smaller than the bound. On inputs that are small integers times
powers of two, with a rational feature map (identity or relu), no decay (or g = 0 exactly) and a
power-of-two scale, every product and partial sum of the function is an integer multiple of one
power of two; if every such sum stays below 2^p in those units (p the significand bits of the
narrowest format on the kernel's path: fp32 accumulation, tl.dot operands, intermediate casts,
and the output dtype for unnormalized outputs), *any* summation order computes it exactly. The
kernel must then return the exact result bitwise; a normalized output may differ only by the
final division and output rounding.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import torch

from linattn_properties._nonfinite import denominator_rows
from linattn_properties._support import PreparedCase, not_applicable, property_function, run_kernel
from linattn_verify.compare import FAIL_THRESHOLD, Comparison, compare_bitwise, compare_within
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.core.sizes import dyadic_scale_exponent
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles.exact import exact_oracle
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe, dtype_name
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.results import PropertyResult
from linattn_verify.typing import torch_dtype

_RANGES = (15, 7, 3, 1)
"""Largest |integer| of the inputs, tried from the seed's pick downward until exact."""


def _bits(unit: float) -> int:
    return round(-math.log2(unit))


def precision_bits(recipe: PrecisionRecipe, dtype: torch.dtype) -> int:
    """Return p: sums below 2^p units are exact everywhere on the kernel's internal path."""
    p = _bits(recipe.u_acc(dtype))
    low = recipe.u_low(dtype)
    if low:
        p = min(p, _bits(low))
    if recipe.dot_precision == "tf32":
        p = min(p, 11)
    elif recipe.dot_precision == "tf32x3":
        p = min(p, 22)
    return p


def _magnitudes(problem: Problem) -> dict[str, float]:
    """Largest absolute partial sums: P = φ(q)·φ(k), numerator, state, denominator."""
    p = problem.to(torch.float64)
    fq = p.q.abs() if p.feature_map == "identity" else p.q.clamp(min=0)
    fk = p.k.abs() if p.feature_map == "identity" else p.k.clamp(min=0)
    absolute = Problem(
        q=fq,
        k=fk,
        v=p.v.abs(),
        g=None,
        scale=abs(p.scale),
        normalize=False,
        eps=0.0,
        feature_map="identity",
        initial_state=None if p.initial_state is None else p.initial_state.abs(),
        initial_key_sum=None,
        output_final_state=True,
        cu_seqlens=p.cu_seqlens,
    )
    o_abs, S_abs = parallel_reference(absolute)
    assert isinstance(S_abs, torch.Tensor)
    P = 0.0
    for _, b, start, end in p.sequences():
        if end > start:
            P = max(P, float((fq[b, start:end] @ fk[b, start:end].mT).max()) * abs(p.scale))
    out = {"P": P, "N": float(o_abs.max()), "S": float(S_abs.abs().max())}
    if p.normalize:
        key_sum = None if p.initial_key_sum is None else p.initial_key_sum.abs()[..., None]
        ones = replace(absolute, v=torch.ones_like(p.v[..., :1]), initial_state=key_sum)
        z_abs, zT = parallel_reference(ones)
        assert isinstance(zT, torch.Tensor)
        out["Z"] = float(z_abs.max()) + p.eps
        out["z"] = float(zT.max())
    return out


def _dyadic_problem(
    spec: ProblemSpec, kernel: Kernel, feature_map: str, limit: int, density: float
) -> tuple[Problem, dict[str, int]] | str:
    """Build the case's shapes with integers in [-limit, limit] (kept with ``density``)."""
    gen = torch.Generator().manual_seed(spec.seed ^ 0xD1AD)
    rng = random.Random(spec.seed)
    e_q, e_k, e_v, e_s = (rng.randint(-3, 2) for _ in range(4))
    fixed = dyadic_scale_exponent(kernel.capabilities.scales, spec.K)
    if isinstance(fixed, str):
        return f"{kernel.name}: {fixed}"
    if fixed is not None:
        # A kernel limited to some scales (or applying its own) is given the one that is dyadic.
        e_s = fixed
    dtype = torch_dtype(spec.dtype)
    B, T, H, K, V = spec.B, spec.T, spec.H, spec.K, spec.V
    N = B if spec.segments is None else len(spec.segments)

    def ints(*shape: int, low: int | None = None) -> torch.Tensor:
        x = torch.randint(-limit if low is None else low, limit + 1, shape, generator=gen)
        keep = torch.rand(shape, generator=gen) < density
        return (x * keep).to(torch.float64)

    q = (ints(B, T, H, K) * 2.0**e_q).to(dtype)
    k = (ints(B, T, H, K) * 2.0**e_k).to(dtype)
    v = (ints(B, T, H, V) * 2.0**e_v).to(dtype)
    cap = kernel.capabilities
    # exp(0) = 1 exactly: the only gate every kernel applies without rounding.
    gate_shape = (B, T, H, K) if spec.gate == "vector" else (B, T, H)
    g = torch.zeros(gate_shape) if spec.decay != "none" and cap.decay else None
    unit_z = 2.0 ** (e_s + e_q + e_k)
    if cap.configurable:
        eps = rng.choice([0.0, unit_z]) if spec.normalize else 0.0
    else:
        eps = cap.eps if spec.normalize else 0.0
        if eps and (eps / unit_z) != round(eps / unit_z):
            return f"the kernel's fixed eps={eps!r} is not a multiple of the input grid"
    h0: Any = None
    if spec.initial_state and cap.initial_state:
        S0 = ints(N, H, K, V) * 2.0 ** (e_k + e_v)
        if spec.normalize:
            z_low = 0 if feature_map == "relu" else None
            h0 = (S0.float(), (ints(N, H, K, low=z_low) * 2.0**e_k).float())
        else:
            h0 = S0.float()
    cu = None
    if spec.segments is not None:
        cu = torch.tensor([0, *torch.tensor(spec.segments).cumsum(0).tolist()])
    problem = validate_problem(
        q,
        k,
        v,
        g,
        scale=2.0**e_s,
        normalize=spec.normalize,
        eps=eps,
        feature_map=feature_map,
        initial_state=h0,
        output_final_state=cap.final_state,
        cu_seqlens=cu,
    )
    units = {"P": e_s + e_q + e_k, "N": e_s + e_q + e_k + e_v, "S": e_k + e_v}
    units.update({"Z": e_s + e_q + e_k, "z": e_k})
    return problem, units


def _exact_case(spec: ProblemSpec, kernel: Kernel, feature_map: str) -> tuple[Problem, int] | str:
    """Return the densest, widest dyadic problem whose every partial sum is exact."""
    dtype = torch_dtype(spec.dtype)
    recipe = kernel.precision_recipe(dtype)
    p = precision_bits(recipe, dtype)
    p_out = min(p, _bits(UNIT_ROUNDOFF[dtype_name(dtype)]))
    first = random.Random(spec.seed ^ 7).randrange(len(_RANGES))
    for limit in _RANGES[first:]:
        for density in (1.0, 0.5, 0.25, 0.125, 0.0625):
            built = _dyadic_problem(spec, kernel, feature_map, limit, density)
            if isinstance(built, str):
                return built
            problem, units = built
            sizes = _magnitudes(problem)
            fits = all(
                sizes[name]
                < 2.0 ** (units[name] + (p if problem.normalize or name != "N" else p_out))
                for name in sizes
            )
            if fits:
                return problem, limit
    return "no dyadic input of this shape keeps every partial sum exact"


@property_function
def dyadic_inputs_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a kernel is exact where floating-point arithmetic is.

    With the case's shapes, inputs x = n·2^e (integers |n| <= R, R <= 15, thinned until every
    partial sum of the function is below 2^p units; see `precision_bits`), φ identity or relu,
    g = 0 or no decay, s and eps powers of two (eps may be 0), and o*, S_T*, z_T* the exact
    results (`linattn_verify.linear_attn.oracles.exact.exact_oracle`):

        unnormalized:  ô ≡ o*         Ŝ_T ≡ S_T*
        normalized:    |ô - o*| <= (u_div + u_out + 2^-52)|o*|   (o* = 0 where Z = 0)
                       Ŝ_T ≡ S_T*,  ẑ_T ≡ z_T*

    Where Z = 0, o* = 0 is the ``zero`` convention's value: a kernel that declared ``ieee`` or
    ``any`` is not judged there (its declared value is the oracle comparison's to judge).

    Args:
        spec: The case (shapes, dtype, normalization, varlen, state; values come from
            ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: one comparison per output with the exact result, bitwise except
        a normalized o (within the final roundings); R, the feature map and the dyadic problem
        in its notes.
    """
    prop = "dyadic_inputs_exact"
    if kernel.implied_decay is not None:
        # The kernel applies a decay of its own (FLA's retention: 1 - 2^(-5-h)), whose weights
        # exp(G_t - G_s) are not dyadic: no exact dyadic case exists for it.
        return not_applicable(
            prop, kernel, spec, f"{kernel.name}: applies its own, non-dyadic decay"
        )
    maps = kernel.capabilities.feature_maps
    choices = [m for m in ("identity", "relu") if m in maps]
    if not choices:
        return not_applicable(
            prop,
            kernel,
            spec,
            f"{kernel.name}: feature maps {maps} have no exact dyadic oracle (identity, relu)",
        )
    feature_map = spec.feature_map if spec.feature_map in choices else choices[0]
    try:
        built = _exact_case(spec, kernel, feature_map)
    except InvalidArgument as exc:
        return not_applicable(prop, kernel, spec, f"case not expressible: {exc}")
    if isinstance(built, str):
        return not_applicable(prop, kernel, spec, built)
    problem, limit = built
    reason = kernel.supports(problem)
    if reason is not None:
        return not_applicable(prop, kernel, spec, reason)
    # The property's problem is the dyadic one built above, not the spec's own: `prepare_case`
    # would judge (and build) the wrong problem.
    case = PreparedCase(prop, spec, kernel, problem, kernel.precision_recipe(problem.q.dtype))
    run = run_kernel(kernel, problem)
    o_exact, final = exact_oracle(problem)
    expected: dict[str, torch.Tensor] = {"o": o_exact}
    if isinstance(final, tuple):
        expected["final_state"], expected["final_key_sum"] = final
    elif isinstance(final, torch.Tensor):
        expected["final_state"] = final
    condition = f"to the exact result (dyadic inputs, |n| <= {limit}, every sum exact)"
    comparisons = []
    for name, actual in run.outputs.items():
        exact = expected[name]
        if name == "o" and problem.normalize:
            comparisons.append(_quotient_comparison(case, actual, exact))
        else:
            comparisons.append(
                compare_bitwise(
                    name, actual, exact.to(actual.dtype), subject=kernel.name, condition=condition
                )
            )
    notes = [f"R={limit} (|n| <= R) feature_map={feature_map} {problem.describe()}"]
    if problem.normalize:
        notes.append(
            "normalized o: against the exact quotient o*, |ô - o*| <= (u_div + u_out + 2^-52)|o*| "
            f"(the allowed shown is that over {FAIL_THRESHOLD:g}: score <= {FAIL_THRESHOLD:g})"
        )
    return case.judged(comparisons, notes=notes)


def _quotient_comparison(
    case: PreparedCase, actual: torch.Tensor, exact: torch.Tensor
) -> Comparison:
    """Judge a normalized output against the exact quotient within the final roundings.

    The rule allows (u_div + u_out + 2^-52)|o*| itself, not `FAIL_THRESHOLD` times it: the
    bound the comparison carries is that over S, so that score <= S means within it (and where
    o* = 0 nothing but 0 passes).
    """
    u_out = UNIT_ROUNDOFF[dtype_name(actual.dtype)]
    unit = case.recipe.u_div(actual.dtype) + u_out + 2.0**-52
    allowed = unit * exact.abs()
    undefined = None
    if case.kernel.capabilities.zero_denominator != "zero":
        undefined = denominator_rows(case.kernel, case.problem)[0][..., None].expand_as(exact)
    return compare_within(
        "o",
        actual,
        exact,
        allowed / FAIL_THRESHOLD,
        magnitude=exact.abs(),
        unit=unit,
        subject=case.kernel.name,
        undefined=undefined,
    )


__all__ = ["dyadic_inputs_exact", "precision_bits"]
