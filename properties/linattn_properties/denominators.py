# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Denominator stability of normalized outputs (docs/design.md §8.4, docs/error-model.md §3).

The oracle comparison judges certified elements by r and every element by the residual η; this
property adds what that comparison lets through on purpose: a NaN on an unverifiable row (the
residual skips non-finite values), an inf where the denominator is certified nonzero and the
quotient cannot overflow, and, for a kernel that declared ``zero_denominator="zero"``, a nonzero
value on a row whose exact denominator is 0 (the 0/0 row, where it declared 0). What a kernel
returns where the exact denominator is 0 is its declaration (docs/design.md §3): ``zero`` (0),
``ieee`` (the IEEE quotient, judged by the oracle comparison) or ``any``.
"""

from __future__ import annotations

import torch

from linattn_properties._support import prepare_case, property_function, run_bounds, run_kernel
from linattn_verify.compare import compare, compare_bitwise
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.results import PropertyResult

ZERO_ROWS = "to 0 on rows whose exact denominator is 0 (the 0/0 row, declared 0)"
"""The condition of the bitwise comparison of the 0/0 rows with 0 (``zero`` kernels)."""


@property_function
def denominator_stable(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a normalized output is as stable as its quotient's conditioning allows.

    With N, Z = s φ(q_t)^T z_t + eps the exact numerator and denominator, B^N, B^Z their error
    bounds and B^o, η the forward bound and residual ratio of `linattn_verify.compare`:

    * ô is never NaN, except, for a kernel that declared ``zero_denominator`` ``"ieee"`` or
      ``"any"``, where |Z| <= B^Z (Z = 0, or a denominator its rounding may turn into 0: the
      IEEE quotient 0/0);
    * Z = 0 exactly ⇒ ô is the declared value: 0 exactly (``zero``), the IEEE quotient of a
      zero denominator where it is determined (``ieee``, by the oracle comparison), anything
      (``any``);
    * ô = ±inf only where |Z| <= B^Z (the denominator may round to 0), the largest
      admissible quotient (|N| + B^N) / (|Z| - B^Z) overflows the output dtype, or (a
      reciprocal division) 1/Z may overflow the reciprocal's dtype;
    * max r <= 2 on certified elements (B^Z < |Z|/2) and max η <= 2 everywhere.

    Args:
        spec: The case.
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: the oracle comparison of o (its scores: r, η, eps/Z; its counts:
        the unverifiable elements and, as undefined, those of the rows whose exact denominator
        is 0) and, for a ``zero`` kernel, the bitwise comparison ``"o[Z=0]"`` of those rows with
        0; an inf where none is admissible is a finding.
    """
    case = prepare_case("denominator_stable", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    if not problem.normalize:
        return case.not_applicable("unnormalized output has no denominator")
    o = run_kernel(kernel, problem).o
    bound = run_bounds(kernel, problem)["o"]
    res = bound.residual
    assert res is not None
    Z, BZ = res.denominator, res.denominator_bound
    x = o.double()
    zero_rows = (Z == 0).expand_as(x)
    # N/Z is undefined where Z = 0: the oracle comparison counts those elements as undefined
    # and judges them by the kernel's declaration; a "zero" kernel's 0 is also judged bitwise.
    comparisons = [compare(o, bound, subject=kernel.name)]
    if kernel.capabilities.zero_denominator == "zero":
        zero = torch.zeros_like(o)
        comparisons.append(
            compare_bitwise(
                "o[Z=0]",
                torch.where(zero_rows, o, zero),
                zero,
                subject=kernel.name,
                condition=ZERO_ROWS,
            )
        )
    findings = []
    ceiling = (res.numerator.abs() + res.numerator_bound) / (Z.abs() - BZ).clamp(min=0)
    may_overflow = (Z.abs() <= BZ) | (ceiling >= torch.finfo(o.dtype).max)
    limits = case.recipe.division_limits(problem.q.dtype)
    if limits is not None:
        # A reciprocal 1/Z overflows its dtype below 1/max: inf times N.
        may_overflow = may_overflow | ((Z.abs() - BZ) * limits.largest <= 1)
    bad_inf = torch.isinf(x) & ~may_overflow
    if bool(bad_inf.any()):
        index = _first(bad_inf)
        findings.append(
            "o is infinite where the denominator is certified nonzero and the quotient is "
            f"bounded!\nInfinite elements: {int(bad_inf.sum())} / {x.numel()}\n"
            f"First at index {index}: |Z| = {float(Z[index[:-1]][0]):.3g} > B^Z = "
            f"{float(BZ[index[:-1]][0]):.3g}, |o| <= {float(ceiling[index[:-1]][0]):.3g}"
        )
    return case.judged(comparisons, findings=findings)


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


__all__ = ["denominator_stable"]
