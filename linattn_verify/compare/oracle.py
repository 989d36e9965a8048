# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Judge a kernel's tensors against the oracle's per-element bounds (docs/error-model.md §7).

Per element, with x̂ the kernel's value, x the float64 oracle, B the rigorous bound and M the
magnitude from `linattn_verify.linear_attn.tolerance`:

    r = |x̂ - x| / B                       must be <= 1 for a correct kernel (0/0 := 0)
    η = |N - x̂ Z| / (B^N + |x̂| B^Z + (u_div + u_out)|x̂||Z|)     normalized outputs only
    ρ = |x̂ - x| / (u_acc M)                "effective roundings", about √c in practice

A tensor FAILS when max r > S on verifiable elements, max η > S anywhere, or x̂ and x disagree on
being finite where x is representable; S = `FAIL_THRESHOLD` = 2 absorbs second-order terms (the
bound is first-order rigorous). The deciding score is max(r, η).

Elements whose exact value is undefined (`TensorBound.undefined`: an exactly zero exact
denominator, docs/design.md §3) are counted as ``undefined`` and judged only against the value the
kernel declared there (`TensorBound.zero_denominator`): ``zero``: the bound of the convention
o = 0 (exactly 0 where every term of the denominator vanishes); ``ieee``: the IEEE quotient of a
zero denominator where it is determined (`DECLARED_VALUE`); ``any``: not at all. A value that
breaks the declaration scores inf.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import NamedTuple

import torch

from linattn_verify.compare._elementwise import argmax_index, safe_ratio, shape_problem, worst_at
from linattn_verify.compare.ulps import ulp_stats
from linattn_verify.core.bound import TensorBound, ZeroDenominator
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.tolerance import (
    GRADIENT_NAMES,
    as_kernel_sees,
    backward_bounds,
    charge_returned_state,
    forward_bounds,
)
from linattn_verify.results import (
    FAIL_THRESHOLD,
    Comparison,
    Counts,
    PropertyResult,
    Scores,
    judged_status,
)
from linattn_verify.triage import severity
from linattn_verify.typing import FinalStateDtype

REFERENCE = "oracle"

DECLARED_VALUE: dict[str, str] = {
    "zero": "0 there",
    "ieee": "the IEEE quotient there: NaN for 0/0, ±inf for x/0",
    "any": "any value there, not judged",
}
"""What each zero-denominator convention returns where the exact denominator is 0, in words."""


def _ieee_declared(
    x: torch.Tensor, expected: TensorBound, undefined: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where an ``ieee`` kernel's undefined o breaks its declaration, and the value it declares.

    Where every term of the denominator vanishes (M^Z = 0, so eps = 0) the kernel's computed
    denominator is ±0 whatever its summation order, and its IEEE quotient is determined: NaN
    where every term of the numerator vanishes too (M^N = 0: 0/0), ±inf where the numerator is
    certified nonzero (|N| > B^N: x/0; either sign, as a computed zero's sign is not the exact
    function's), NaN or ±inf otherwise. Where the exact denominator cancels to 0 (M^Z > 0) the
    computed one is rounding noise and the quotient is not determined: any value is accepted.
    """
    res = expected.residual
    if res is None or res.numerator_magnitude is None or res.denominator_magnitude is None:
        return torch.zeros_like(x, dtype=torch.bool), torch.full_like(x, math.nan)
    settled = undefined & (res.denominator_magnitude == 0)
    nan_only = settled & (res.numerator_magnitude == 0)
    inf_only = settled & ~nan_only & (res.numerator.abs() > res.numerator_bound)
    either = settled & ~nan_only & ~inf_only
    nan, inf = torch.isnan(x), torch.isinf(x)
    breach = (nan_only & ~nan) | (inf_only & ~inf) | (either & ~(nan | inf))
    declared = torch.where(
        inf_only, torch.copysign(torch.full_like(x, math.inf), res.numerator), math.nan
    )
    return breach, declared


def _residual_ratio(x: torch.Tensor, finite: torch.Tensor, expected: TensorBound) -> torch.Tensor:
    """η per element of a normalized output (0 where the residual says nothing)."""
    res = expected.residual
    assert res is not None
    scale = res.numerator_bound + x.abs() * res.denominator_bound
    scale = scale + (res.rounding * x.abs() + res.absolute) * res.denominator.abs()
    # Where the exact denominator is 0 the value is fixed by convention (0), not by N/Z: the
    # residual N - x·Z says nothing there. Nor does it where the kernel returned that
    # convention's 0 for a denominator its rounding may have zeroed (|Z| <= B^Z).
    may_vanish = (x == 0) & (res.denominator.abs() <= res.denominator_bound)
    judged_rows = finite & (res.denominator != 0) & ~may_vanish
    return torch.where(
        judged_rows, safe_ratio((res.numerator - x * res.denominator).abs(), scale), 0.0
    )


def signed_bias(
    error: torch.Tensor, bound: torch.Tensor, where: torch.Tensor
) -> tuple[float | None, float | None]:
    """Return the signed bias of ``error`` over the elements ``where``: ``(bias, t)``.

    ``bias = Σ e / Σ B``, the signed mean error in units of the mean bound (|bias| <= max r),
    and ``t = Σ e / sqrt(Σ e²)``, its size against the spread: about a standard normal variable
    for independent errors of either sign, and about sqrt(n) when every error has one sign.
    Rounding to nearest is unbiased, so a correct kernel's |t| stays small unless its errors
    are correlated; a kernel that truncates (or drops a term of one sign) has |t| ~ sqrt(n),
    which is what breaks low-precision training even when every element is within its bound.
    Both are `None` where no element with a finite, positive bound is judged.
    """
    keep = where & torch.isfinite(bound) & (bound > 0)
    if not bool(keep.any()):
        return None, None
    e = error[keep]
    total = float(e.sum())
    spread = math.sqrt(float((e * e).sum()))
    return total / float(bound[keep].sum()), (total / spread if spread > 0 else 0.0)


def compare(
    actual: object,
    expected: TensorBound,
    *,
    subject: str = "kernel",
    threshold: float = FAIL_THRESHOLD,
    exact_reference: bool = True,
) -> Comparison:
    """Judge ``actual`` against a `TensorBound` (see the module docstring for the rule).

    For a 16-bit ``actual`` the scores include its ulp statistics against the reference
    (`linattn_verify.compare.ulps`) on the elements judged against an exact value; a failed
    comparison carries its severity (`linattn_verify.triage.severity`).

    Args:
        actual: The kernel's tensor, any floating dtype, the shape of ``expected.reference``.
        expected: Reference, bound and magnitude from `linattn_verify.linear_attn.tolerance`.
        subject: Who computed ``actual``, for messages. Default: `"kernel"`.
        threshold: The largest admissible r and η. Default: `2.0`.
        exact_reference: ``expected.reference`` is the exact value (the oracle's), so ulps
            against it mean something; `False` for a reference that is only a nearest
            admissible point (an interval's end), which gets no ulp statistics. Default: `True`.

    Returns:
        The `Comparison` (reference ``"oracle"``).
    """
    ref = expected.reference
    numel = ref.numel()
    wrong = shape_problem(actual, ref)
    if wrong is not None:
        unfit = Comparison(expected.name, subject, REFERENCE, "failed", math.inf, reason=wrong)
        dtype = actual.dtype if isinstance(actual, torch.Tensor) else ref.dtype
        return replace(unfit, severity=severity(unfit, dtype))
    assert isinstance(actual, torch.Tensor)
    if numel == 0:
        return Comparison(expected.name, subject, REFERENCE, "held", 0.0)
    x = actual.detach().to(device=ref.device, dtype=torch.float64)
    finite = torch.isfinite(x)
    undefined = (
        torch.zeros_like(ref, dtype=torch.bool)
        if expected.undefined is None
        else expected.undefined.to(ref.device).expand_as(ref)
    )
    # Undefined elements are judged only by the kernel's declaration: under "zero" by the
    # convention's own bound (o = 0), under "ieee" by its IEEE quotient, under "any" not at all.
    free = undefined if expected.zero_denominator != "zero" else torch.zeros_like(undefined)
    breach = torch.zeros_like(undefined)
    shown = ref
    if expected.zero_denominator == "ieee":
        breach, declared = _ieee_declared(x, expected, undefined)
        shown = torch.where(undefined, declared, ref)
    verifiable = expected.verifiable & ~free
    # A non-finite value is a failure where the exact result is finite, certified and
    # representable in the output dtype; elsewhere it may be the honest rounding of an
    # ill-conditioned or out-of-range exact value.
    limit = torch.finfo(actual.dtype).max if actual.dtype.is_floating_point else math.inf
    representable = (ref.abs() + torch.nan_to_num(expected.bound, posinf=0.0)) < limit
    judged = verifiable & representable
    # A finite value where the declaration requires NaN or ±inf is one too.
    nonfinite = ((finite != torch.isfinite(ref)) & judged) | (breach & finite)
    err = torch.where(finite, (x - ref).abs(), 0.0)
    r = torch.where(verifiable, safe_ratio(err, expected.bound), 0.0)
    rho = torch.where(free, 0.0, safe_ratio(err, expected.unit * expected.magnitude))
    eta = None if expected.residual is None else _residual_ratio(x, finite, expected)
    score = r if eta is None else torch.maximum(r, eta)
    score = torch.where(nonfinite | breach, torch.inf, score)
    index = argmax_index(score)
    deciding = float(score[index])
    checked = r[verifiable]
    eps_influence = expected.eps_influence
    # Ulps are measured against the exact value, so only where the oracle holds it: not where
    # the value is undefined (the oracle holds a convention there) nor where it is unverifiable.
    exact = verifiable & ~undefined
    ulps = ulp_stats(actual.detach().to(ref.device)[exact], ref[exact]) if exact_reference else None
    bias, bias_t = signed_bias(x - ref, expected.bound, exact & finite & torch.isfinite(ref))
    # Recipe-independent accuracy: kernels with other recipes have other bounds, so r does not
    # rank them; the error on the tensor's own scale does, on the same case.
    scale = ref[exact & torch.isfinite(ref)].abs()
    top = float(scale.max()) if scale.numel() else 0.0
    wrong_nonfinite = bool((nonfinite & exact).any())
    spread = float(err[exact].max()) if bool(exact.any()) else 0.0
    relative_error = math.inf if wrong_nonfinite else (spread / top if top > 0 else None)
    scores = Scores(
        r=float(r.max()),
        p999_r=float(torch.quantile(checked.float().clamp(max=1e30), 0.999))
        if checked.numel()
        else 0.0,
        eta=None if eta is None else float(eta.max()),
        rho=float(rho.max()),
        median_rho=float(rho.median()),
        rho_over_sqrt_c=float((rho / expected.count.sqrt().clamp(min=1)).max()),
        eps_influence=None
        if eps_influence is None or not eps_influence.numel()
        else float(eps_influence.max()),
        correctly_rounded=None if ulps is None else ulps.correctly_rounded,
        faithfully_rounded=None if ulps is None else ulps.faithfully_rounded,
        max_ulps=None if ulps is None else ulps.max_ulps,
        bias=bias,
        bias_t=bias_t,
        relative_error=relative_error,
    )
    counts = Counts(
        numel=numel,
        mismatched=int((score > 1).sum()),
        nonfinite=int(nonfinite.sum()),
        undefined=int(undefined.sum()),
        unverifiable=int((~expected.verifiable).sum()),
    )
    comparison = Comparison(
        tensor=expected.name,
        subject=subject,
        reference=REFERENCE,
        status="held" if deciding <= threshold else "failed",
        deciding=deciding,
        scores=scores,
        worst=worst_at(index, x, shown, expected.bound),
        counts=counts,
    )
    if comparison.ok:
        return comparison
    return replace(comparison, severity=severity(comparison, actual.dtype))


def compare_within(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    bound: torch.Tensor,
    *,
    magnitude: torch.Tensor,
    unit: float,
    subject: str = "kernel",
    undefined: torch.Tensor | None = None,
) -> Comparison:
    """Judge ``actual`` against ``expected`` (exact, float64) with an absolute bound per element.

    Elements whose bound is infinite are unverifiable (not judged, counted); elements in
    ``undefined`` (whose exact value is undefined) are not judged either, and counted as such.
    The rule and the scores are those of `compare`, with one rounding count per element.
    """
    expected = expected.to(torch.float64)
    tb = TensorBound(
        name=name,
        reference=expected,
        bound=bound,
        magnitude=magnitude,
        count=torch.ones_like(expected),
        unit=unit,
        verifiable=torch.isfinite(bound),
        undefined=undefined,
        zero_denominator="any",
    )
    return compare(actual, tb, subject=subject)


class OracleJudgement(NamedTuple):
    """What judging one kernel run against the oracle found: the parts of a `PropertyResult`."""

    comparisons: tuple[Comparison, ...]
    findings: tuple[str, ...]
    notes: tuple[str, ...]


def judge_against_oracle(
    problem: Problem,
    o: object,
    final_state: object = None,
    *,
    recipe: PrecisionRecipe,
    grads: Mapping[str, torch.Tensor | None] | None = None,
    do: torch.Tensor | None = None,
    d_final_state: object = None,
    name: str = "kernel",
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
    final_state_dtype: FinalStateDtype = "float32",
) -> OracleJudgement:
    """Compare a kernel's outputs (and gradients) with the oracle's bounds, once.

    The comparisons, the findings no comparison carries (a missing state, a wrong dtype) and the
    notes; `check_against_oracle` makes them a `PropertyResult`, and a property its own
    (`linattn_properties.oracle`). Arguments as `assert_linattn_close`.
    """
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            "Expected problem to be a Problem (from validate_problem) but got "
            f"{type(problem).__name__}."
        )
    if not isinstance(recipe, PrecisionRecipe):
        raise InvalidArgument(f"Expected a PrecisionRecipe but got recipe={recipe!r}.")
    problem = as_kernel_sees(problem, recipe)
    findings: list[str] = []
    fb = forward_bounds(
        problem, recipe, zero_denominator=zero_denominator, causal_exact=causal_exact
    )
    forward = charge_returned_state(fb.tensors, final_state_dtype, problem.q.dtype)
    if isinstance(o, torch.Tensor) and o.dtype != problem.q.dtype:
        findings.append(f"output dtype {o.dtype} differs from the input dtype {problem.q.dtype}")
    comparisons = [compare(o, forward["o"], subject=name)]
    if problem.output_final_state:
        if final_state is None:
            findings.append("output_final_state=True but the kernel returned no final state")
        elif problem.normalize and not (
            isinstance(final_state, tuple | list) and len(final_state) == 2
        ):
            findings.append("normalized kernels must return the final state as (S_T, z_T)")
        else:
            parts: tuple[object, ...] = (
                tuple(final_state)
                if problem.normalize and isinstance(final_state, tuple | list)
                else (final_state,)
            )
            names = ("final_state", "final_key_sum")
            comparisons += [
                compare(x, forward[n], subject=name) for n, x in zip(names, parts, strict=False)
            ]
    if grads is not None:
        if do is None:
            raise InvalidArgument("Got grads without do; pass the cotangent that produced them.")
        unknown = sorted(set(grads) - set(GRADIENT_NAMES))
        if unknown:
            raise InvalidArgument(f"Got unknown gradient names {unknown}; known: {GRADIENT_NAMES}.")
        bb = backward_bounds(
            problem,
            recipe,
            do=do,
            d_final_state=d_final_state,
            forward=fb,
            zero_denominator=zero_denominator,
        )
        for key, value in grads.items():
            if key not in bb:
                if value is not None:
                    findings.append(f"gradient for {key} returned, but the problem has no {key}")
            elif value is None:
                findings.append(f"no gradient returned for {key}")
            else:
                comparisons.append(compare(value, bb[key], subject=name))
    notes = [f"Bound: {recipe} (r, η <= {FAIL_THRESHOLD:g} allowed)"]
    undefined = fb.tensors["o"].undefined
    if undefined is not None and bool(undefined.any()):
        rows = int(undefined[..., 0].sum())
        notes.append(
            f"Exact denominator 0 on {rows} row(s) of o: undefined there (and the gradients that "
            f"depend on them); declared zero_denominator={zero_denominator!r}: "
            f"{DECLARED_VALUE[zero_denominator]}"
        )
    return OracleJudgement(tuple(comparisons), tuple(findings), tuple(notes))


def check_against_oracle(
    problem: Problem,
    o: object,
    final_state: object = None,
    *,
    recipe: PrecisionRecipe,
    grads: Mapping[str, torch.Tensor | None] | None = None,
    do: torch.Tensor | None = None,
    d_final_state: object = None,
    name: str = "kernel",
    property: str = "outputs_match_oracle",
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
    final_state_dtype: FinalStateDtype = "float32",
) -> PropertyResult:
    """Judge a kernel's outputs (and gradients) against the oracle; see `assert_linattn_close`."""
    judgement = judge_against_oracle(
        problem,
        o,
        final_state,
        recipe=recipe,
        grads=grads,
        do=do,
        d_final_state=d_final_state,
        name=name,
        zero_denominator=zero_denominator,
        causal_exact=causal_exact,
        final_state_dtype=final_state_dtype,
    )
    return PropertyResult(
        property=property,
        kernel=name,
        case=problem.describe(),
        status=judged_status(judgement.comparisons, judgement.findings),
        comparisons=judgement.comparisons,
        reason="; ".join(judgement.findings) or None,
        notes=judgement.notes,
    )


def assert_linattn_close(
    problem: Problem,
    o: object,
    final_state: object = None,
    *,
    recipe: PrecisionRecipe,
    grads: Mapping[str, torch.Tensor | None] | None = None,
    do: torch.Tensor | None = None,
    d_final_state: object = None,
    name: str = "kernel",
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
    final_state_dtype: FinalStateDtype = "float32",
) -> PropertyResult:
    """Assert a kernel's outputs (and gradients) lie within the error bounds of the oracle.

    Args:
        problem: The problem exactly as the kernel received it (`validate_problem`).
        o: The kernel's output ``[B, T, H, V]``.
        final_state: The kernel's final state (S_T, or (S_T, z_T) when normalized), or `None`.
            Default: `None`.
        recipe: The kernel's precision recipe; eps is rounded to its ``eps_dtype`` for the oracle.
        grads: Gradients keyed by ``"q"``, ``"k"``, ``"v"``, ``"g"``, ``"initial_state"``,
            ``"initial_key_sum"``. Default: `None`.
        do: Cotangent of ``o`` that produced ``grads``. Default: `None`.
        d_final_state: Cotangent of the final state (dS_T, or (dS_T, dz_T)). Default: `None`.
        name: The kernel's name for messages. Default: `"kernel"`.
        zero_denominator: What the kernel returns where the exact denominator is 0 (``"zero"``,
            ``"ieee"`` or ``"any"``; docs/design.md §3). Default: `"zero"`.
        causal_exact: The kernel promises bit-exact causality; `False` charges each output the
            rounding of its whole block (a decay reference point anywhere in it:
            docs/error-model.md §4.1). Default: `True`.
        final_state_dtype: The dtype it returns its state in (``"float32"``, or ``"input"``:
            one more rounding charged). Default: `"float32"`.

    Returns:
        The `PropertyResult` (every comparison and its scores) when everything is within bound.

    Raises:
        PropertyViolation: when a tensor fails (message: torch.testing style, with the worst
            element, its bound and score, the recipe and the case).
    """
    __tracebackhide__ = True
    result = check_against_oracle(
        problem,
        o,
        final_state,
        recipe=recipe,
        grads=grads,
        do=do,
        d_final_state=d_final_state,
        name=name,
        zero_denominator=zero_denominator,
        causal_exact=causal_exact,
        final_state_dtype=final_state_dtype,
    )
    if not result.ok:
        raise PropertyViolation(result.report(), result=result)
    return result


__all__ = [
    "DECLARED_VALUE",
    "OracleJudgement",
    "assert_linattn_close",
    "check_against_oracle",
    "compare",
    "compare_within",
    "judge_against_oracle",
]
