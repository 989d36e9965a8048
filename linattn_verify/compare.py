# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Score a kernel's tensors against the oracle's bounds (ERROR_MODEL.md §7).

Per element, with x̂ the kernel's value, x the float64 oracle, B the rigorous bound and M the
magnitude from `linattn_verify.tolerance`:

    r = |x̂ - x| / B                       must be <= 1 for a correct kernel (0/0 := 0)
    η = |N - x̂ Z| / (B^N + |x̂| B^Z + (u_div + u_out)|x̂||Z|)     normalized outputs only
    ρ = |x̂ - x| / (u_acc M)                "effective roundings", about √c in practice
    s = |x̂ - x| / (8 √c u_acc M + B^single)  strict (probabilistic) score, reported only

A tensor FAILS when max r > S on verifiable elements, max η > S anywhere, or x̂ and x disagree on
being finite; S = 2 absorbs second-order terms (the bound is first-order rigorous).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import Problem
from linattn_verify.tolerance import (
    GRADIENT_NAMES,
    TensorBound,
    backward_bounds,
    forward_bounds,
)

FAIL_THRESHOLD = 2.0
"""S of ERROR_MODEL.md §7: the largest admissible r or η."""

STRICT_LAMBDA = 8.0
"""λ of the strict score (Higham-Mary probabilistic bound, ERROR_MODEL.md §7)."""


@dataclass(frozen=True)
class Comparison:
    """The scores of one tensor against its bound.

    Attributes:
        name: What was compared (``"o"``, ``"final_state"``, ``"dq"``, ...).
        ok: Whether the tensor passes (see the module docstring).
        numel: Number of elements.
        unverifiable: Elements whose forward bound is meaningless (judged by η only).
        exceeding: Verifiable elements with r > 1.
        nonfinite_mismatches: Elements finite in one of kernel and oracle but not the other.
        max_r: Largest r over verifiable elements.
        p999_r: 99.9th percentile of r.
        max_eta: Largest residual ratio η (normalized outputs), else `None`.
        max_rho: Largest ρ.
        median_rho: Median ρ.
        max_rho_over_sqrt_c: Largest ρ/√c.
        max_strict: Largest strict score.
        max_eps_influence: Largest eps/Z (normalized outputs), else `None`.
        worst_index: Index of the element with the largest score.
        worst_actual: The kernel's value there.
        worst_expected: The oracle's value there.
        worst_bound: The bound there.
        reason: Why the comparison could not be made (shape mismatch), else `None`.
    """

    name: str
    ok: bool
    numel: int
    unverifiable: int = 0
    exceeding: int = 0
    nonfinite_mismatches: int = 0
    max_r: float = 0.0
    p999_r: float = 0.0
    max_eta: float | None = None
    max_rho: float = 0.0
    median_rho: float = 0.0
    max_rho_over_sqrt_c: float = 0.0
    max_strict: float = 0.0
    max_eps_influence: float | None = None
    worst_index: tuple[int, ...] | None = None
    worst_actual: float = math.nan
    worst_expected: float = math.nan
    worst_bound: float = math.nan
    reason: str | None = None

    def summary(self) -> str:
        """Return one line of scores."""
        if self.reason is not None:
            return f"{self.name}: {self.reason}"
        eta = "" if self.max_eta is None else f" η={self.max_eta:.3g}"
        return (
            f"{self.name}: {'ok' if self.ok else 'FAIL'} max r={self.max_r:.3g}{eta} "
            f"ρ={self.max_rho:.3g} (median {self.median_rho:.3g}) unverifiable={self.unverifiable}"
        )

    def message(self, subject: str) -> str:
        """Return a torch.testing-style mismatch message for this tensor."""
        if self.reason is not None:
            return f"{subject} {self.name}: {self.reason}"
        pct = 100.0 * self.exceeding / max(self.numel, 1)
        lines = [
            f"{subject} {self.name} is not close to the float64 oracle!",
            f"Mismatched elements (r > 1): {self.exceeding} / {self.numel} ({pct:.1f}%)",
        ]
        if self.nonfinite_mismatches:
            lines.append(
                f"Finite/non-finite mismatches: {self.nonfinite_mismatches} (never allowed)"
            )
        lines.append(
            f"Greatest error score r = |actual - expected| / bound: {self.max_r:.3g} at index "
            f"{self.worst_index} (up to {FAIL_THRESHOLD:g} allowed): "
            f"actual {self.worst_actual:.9g}, "
            f"expected {self.worst_expected:.9g}, bound {self.worst_bound:.3g}"
        )
        if self.max_eta is not None:
            lines.append(
                f"Greatest residual ratio η: {self.max_eta:.3g} (up to {FAIL_THRESHOLD:g})"
            )
        lines.append(
            f"ρ = err/(u·M): max {self.max_rho:.3g}, median {self.median_rho:.3g}, "
            f"max ρ/√c {self.max_rho_over_sqrt_c:.3g}; unverifiable elements {self.unverifiable}"
        )
        if self.max_eps_influence is not None:
            lines.append(f"Largest eps influence eps/Z: {self.max_eps_influence:.3g}")
        return "\n".join(lines)


def _safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Num / den with 0/0 := 0 and x/0 := inf (an error where none is allowed)."""
    ratio = num / torch.where(den == 0, 1.0, den)
    return torch.where(den == 0, torch.where(num == 0, 0.0, torch.inf), ratio)


def compare(
    actual: torch.Tensor, expected: TensorBound, *, threshold: float = FAIL_THRESHOLD
) -> Comparison:
    """Score ``actual`` against a `TensorBound` and decide pass or fail.

    Args:
        actual: The kernel's tensor, any dtype, same shape as ``expected.reference``.
        expected: Reference, bound and magnitude from `linattn_verify.tolerance`.
        threshold: The largest admissible r and η. Default: `2.0`.

    Returns:
        The `Comparison`.
    """
    ref = expected.reference
    numel = ref.numel()
    if not isinstance(actual, torch.Tensor):
        return Comparison(
            expected.name, False, numel, reason=f"expected a tensor but got {type(actual).__name__}"
        )
    if tuple(actual.shape) != tuple(ref.shape):
        return Comparison(
            expected.name,
            False,
            numel,
            reason=f"expected shape {tuple(ref.shape)} but got {tuple(actual.shape)}",
        )
    x = actual.detach().to(device=ref.device, dtype=torch.float64)
    finite = torch.isfinite(x)
    # A non-finite value is a failure where the exact result is finite, certified and
    # representable in the output dtype; elsewhere it may be the honest rounding of an
    # ill-conditioned or out-of-range exact value.
    limit = torch.finfo(actual.dtype).max if actual.dtype.is_floating_point else math.inf
    representable = (ref.abs() + torch.nan_to_num(expected.bound, posinf=0.0)) < limit
    judged = expected.verifiable & representable
    nonfinite = int(((finite != torch.isfinite(ref)) & judged).sum())
    err = torch.where(finite, (x - ref).abs(), 0.0)
    r = torch.where(expected.verifiable, _safe_ratio(err, expected.bound), 0.0)
    rho = _safe_ratio(err, expected.unit * expected.magnitude)
    strict = _safe_ratio(
        err,
        STRICT_LAMBDA * expected.count.sqrt() * expected.unit * expected.magnitude
        + expected.single,
    )
    score = r
    max_eta = None
    res = expected.residual
    if res is not None:
        scale = res.numerator_bound + x.abs() * res.denominator_bound
        scale = scale + (res.rounding * x.abs() + res.absolute) * res.denominator.abs()
        # Where the exact denominator is 0 the value is fixed by convention (0), not by N/Z: the
        # residual N - x·Z says nothing there. Nor does it where the kernel returned that
        # convention's 0 for a denominator its rounding may have zeroed (|Z| <= B^Z).
        may_vanish = (x == 0) & (res.denominator.abs() <= res.denominator_bound)
        judged_rows = finite & (res.denominator != 0) & ~may_vanish
        eta = torch.where(
            judged_rows, _safe_ratio((res.numerator - x * res.denominator).abs(), scale), 0.0
        )
        max_eta = float(eta.max()) if numel else 0.0
        score = torch.maximum(r, eta)
    if numel == 0:
        return Comparison(expected.name, nonfinite == 0, 0)
    flat = int(torch.argmax(torch.nan_to_num(score, nan=math.inf)))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape))
    max_r = float(r.max())
    checked = r[expected.verifiable]
    p999 = float(torch.quantile(checked.float().clamp(max=1e30), 0.999)) if checked.numel() else 0.0
    eps_inf = expected.eps_influence
    ok = nonfinite == 0 and max_r <= threshold and (max_eta is None or max_eta <= threshold)
    return Comparison(
        name=expected.name,
        ok=ok,
        numel=numel,
        unverifiable=int((~expected.verifiable).sum()),
        exceeding=int((r > 1).sum()),
        nonfinite_mismatches=nonfinite,
        max_r=max_r,
        p999_r=p999,
        max_eta=max_eta,
        max_rho=float(rho.max()),
        median_rho=float(rho.median()),
        max_rho_over_sqrt_c=float((rho / expected.count.sqrt().clamp(min=1)).max()),
        max_strict=float(strict.max()),
        max_eps_influence=None if eps_inf is None or not eps_inf.numel() else float(eps_inf.max()),
        worst_index=index,
        worst_actual=float(x[index]),
        worst_expected=float(ref[index]),
        worst_bound=float(expected.bound[index]),
    )


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one kernel run against the oracle.

    Attributes:
        name: The kernel's name.
        case: One-line description of the problem.
        recipe: The precision recipe the bounds assumed.
        comparisons: One `Comparison` per tensor.
        contract_errors: Broken contract items (wrong dtype, missing outputs).
    """

    name: str
    case: str
    recipe: PrecisionRecipe
    comparisons: tuple[Comparison, ...]
    contract_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every comparison passed and the contract held."""
        return not self.contract_errors and all(c.ok for c in self.comparisons)

    @property
    def worst(self) -> Comparison | None:
        """The comparison with the largest score."""
        if not self.comparisons:
            return None
        return max(self.comparisons, key=lambda c: (not c.ok, max(c.max_r, c.max_eta or 0.0)))

    def report(self) -> str:
        """Return the failure message (or a summary when everything passed)."""
        lines = [f"{self.name}: {'passed' if self.ok else 'FAILED'} [{self.case}]"]
        lines += [f"contract: {e}" for e in self.contract_errors]
        for c in self.comparisons:
            lines.append(c.summary() if c.ok else c.message(self.name))
        lines.append(f"Bound: {self.recipe} (threshold r, η <= {FAIL_THRESHOLD:g})")
        return "\n".join(lines)


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
) -> Verdict:
    """Compare a kernel's outputs (and gradients) with the oracle; see `assert_linattn_close`."""
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            "Expected problem to be a Problem (from validate_problem) but got "
            f"{type(problem).__name__}."
        )
    problem = replace(problem, eps=recipe.effective_eps(problem.eps))
    contract: list[str] = []
    comparisons: list[Comparison] = []
    fb = forward_bounds(problem, recipe)
    if isinstance(o, torch.Tensor) and o.dtype != problem.q.dtype:
        contract.append(f"output dtype {o.dtype} differs from the input dtype {problem.q.dtype}")
    comparisons.append(compare(o, fb.tensors["o"]))  # type: ignore[arg-type]
    if problem.output_final_state:
        if final_state is None:
            contract.append("output_final_state=True but the kernel returned no final state")
        elif problem.normalize:
            if not (isinstance(final_state, tuple | list) and len(final_state) == 2):
                contract.append("normalized kernels must return the final state as (S_T, z_T)")
            else:
                comparisons.append(compare(final_state[0], fb.tensors["final_state"]))
                comparisons.append(compare(final_state[1], fb.tensors["final_key_sum"]))
        else:
            comparisons.append(compare(final_state, fb.tensors["final_state"]))  # type: ignore[arg-type]
    if grads is not None:
        if do is None:
            raise InvalidArgument("Got grads without do; pass the cotangent that produced them.")
        unknown = sorted(set(grads) - set(GRADIENT_NAMES))
        if unknown:
            raise InvalidArgument(f"Got unknown gradient names {unknown}; known: {GRADIENT_NAMES}.")
        bb = backward_bounds(problem, recipe, do=do, d_final_state=d_final_state)
        for key, value in grads.items():
            if key not in bb:
                if value is not None:
                    contract.append(f"gradient for {key} returned, but the problem has no {key}")
                continue
            if value is None:
                contract.append(f"no gradient returned for {key}")
                continue
            comparisons.append(compare(value, bb[key]))
    return Verdict(
        name=name,
        case=problem.describe(),
        recipe=recipe,
        comparisons=tuple(comparisons),
        contract_errors=tuple(contract),
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
) -> Verdict:
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

    Returns:
        The `Verdict` (all scores) when everything is within bound.

    Raises:
        PropertyViolation: when a tensor fails (message: torch.testing style, with the worst
            element, its bound and score, the recipe and the case).
    """
    __tracebackhide__ = True
    verdict = check_against_oracle(
        problem,
        o,
        final_state,
        recipe=recipe,
        grads=grads,
        do=do,
        d_final_state=d_final_state,
        name=name,
    )
    if not verdict.ok:
        raise PropertyViolation(verdict.report())
    return verdict


__all__ = [
    "FAIL_THRESHOLD",
    "Comparison",
    "Verdict",
    "assert_linattn_close",
    "check_against_oracle",
    "compare",
]
