# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Errors in units people know: ulps of a 16-bit output dtype.

For an exact value x (float64) and a kernel's value x̂ in fp16 or bf16:

* x̂ is *correctly rounded* when it is x rounded to nearest (ties to even) in the dtype;
* x̂ is *faithfully rounded* when it is one of the two dtype values that bracket x (x itself
  when x is representable);
* its error in ulps is |x̂ - x| / ulp(x), with ulp(x) the gap between the two dtype values that
  bracket x (the gap above |x| when x is representable).

The neighbours are found on the 16-bit patterns (both formats are sign-magnitude, so the next
value away from zero is the next integer pattern), which is exact at binade boundaries, in the
subnormal range and at zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SIXTEEN_BIT = (torch.float16, torch.bfloat16)
"""The output dtypes ulp statistics are reported for."""


@dataclass(frozen=True)
class UlpStats:
    """Ulp statistics of one tensor.

    Attributes:
        judged: Elements judged (finite on both sides, exact value within the dtype's range).
        correctly_rounded: Share of judged elements that are correctly rounded.
        faithfully_rounded: Share of judged elements that are faithfully rounded.
        max_ulps: The largest error in ulps.
    """

    judged: int
    correctly_rounded: float
    faithfully_rounded: float
    max_ulps: float


def _next_up(r: torch.Tensor) -> torch.Tensor:
    """The next value of ``r``'s 16-bit dtype above ``r`` (r finite and below the max)."""
    bits = r.view(torch.int16)
    # +0 and -0 step to the smallest positive subnormal; otherwise positive values step away
    # from zero (+1 on the pattern) and negative values toward it (-1 on the pattern).
    smallest = torch.ones_like(bits)
    stepped = torch.where(r > 0, bits + 1, bits - 1)
    return torch.where(r == 0, smallest, stepped).view(r.dtype)


def _bracket(exact: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The dtype values lo <= x <= hi that bracket each exact x (lo == hi when representable)."""
    nearest = exact.to(dtype)
    above = _next_up(nearest)
    below = -_next_up(-nearest)
    wide = nearest.double()
    lo = torch.where(wide <= exact, nearest, below)
    hi = torch.where(wide >= exact, nearest, above)
    return lo, hi


def ulp_stats(actual: torch.Tensor, exact: torch.Tensor) -> UlpStats | None:
    """Return the ulp statistics of a 16-bit ``actual`` against ``exact``, else `None`.

    Args:
        actual: The kernel's tensor, fp16 or bf16 (any other dtype gives `None`).
        exact: The exact values, float64, the same shape.

    Returns:
        The `UlpStats`, or `None` for another dtype or when no element can be judged.
    """
    dtype = actual.dtype
    if dtype not in SIXTEEN_BIT:
        return None
    x = exact.to(device=actual.device, dtype=torch.float64)
    # The largest finite value has no value above it to bracket with; beyond it the rounding
    # overflows. Those elements, and non-finite ones, are left to the bound comparison.
    limit = torch.finfo(dtype).max
    judged = torch.isfinite(actual) & torch.isfinite(x) & (x.abs() < limit)
    if not bool(judged.any()):
        return None
    a, x = actual[judged], x[judged]
    lo, hi = _bracket(x, dtype)
    representable = lo == hi
    magnitude = x.abs().to(dtype)
    gap_above = (_next_up(magnitude).double() - magnitude.double()).abs()
    ulp = torch.where(representable, gap_above, hi.double() - lo.double())
    error = (a.double() - x).abs()
    faithful = (a == lo) | (a == hi)
    correct = a == x.to(dtype)
    n = int(a.numel())
    return UlpStats(
        judged=n,
        correctly_rounded=float(correct.sum()) / n,
        faithfully_rounded=float(faithful.sum()) / n,
        max_ulps=float((error / ulp).max()),
    )


__all__ = ["SIXTEEN_BIT", "UlpStats", "ulp_stats"]
