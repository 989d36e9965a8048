# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Triage a failed comparison: is it at magnitudes models produce, or only at extreme ones?

A bound failure whose worst element lives far outside the values a model's activations, states
and gradients take (below `EXTREME_LOW` in magnitude, or within `EXTREME_HIGH_FACTOR` of the
dtype's largest finite value) is an ``extreme-range`` finding: real, but of another urgency than
a failure at realistic magnitudes, and often a weakness of flush-to-zero or subnormal handling
rather than of the algorithm. So is any bound failure on a case whose inputs were drawn at such
magnitudes (`linattn_verify.linear_attn.strategies.EXTREME_FAMILIES`: ``near_max`` inputs give
gradients near 1e-19 that look ordinary). Both are failures; the severity only sorts them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from linattn_verify.results import Comparison, Severity

EXTREME_LOW = 1e-20
"""Magnitudes below this are outside what models produce."""

EXTREME_HIGH_FACTOR = 16.0
"""Magnitudes within this factor of the dtype's largest finite value are outside it too."""


def severity(comparison: Comparison, dtype: torch.dtype) -> Severity:
    """Classify a comparison by the magnitudes at its worst element.

    ``extreme-range`` when both the actual and the expected value there are below
    `EXTREME_LOW` in magnitude (zero counts as small), or either is within
    `EXTREME_HIGH_FACTOR` of ``dtype``'s largest finite value (or not finite while the other is
    huge); ``realistic`` otherwise, and when there is no worst element.

    Args:
        comparison: The comparison (usually a failed one).
        dtype: The dtype of the judged tensor.
    """
    worst = comparison.worst
    if worst is None:
        return "realistic"
    actual, expected = abs(worst.actual), abs(worst.expected)
    big = torch.finfo(dtype).max / EXTREME_HIGH_FACTOR
    if max(_finite_or(actual, 0.0), expected) >= big:
        return "extreme-range"
    if math.isfinite(actual) and actual < EXTREME_LOW and expected < EXTREME_LOW:
        return "extreme-range"
    return "realistic"


def with_input_severity(comparisons: Sequence[Comparison], values: str) -> tuple[Comparison, ...]:
    """Mark the failed bound comparisons of a case with ``values`` drawn at extreme magnitudes.

    Args:
        comparisons: A property's comparisons.
        values: The case's value family (`ProblemSpec.values`).

    Returns:
        The comparisons, with ``severity="extreme-range"`` on each failed oracle or pairwise
        comparison when ``values`` is one of `EXTREME_FAMILIES` (unchanged otherwise).
    """
    from linattn_verify.linear_attn.strategies import EXTREME_FAMILIES

    if values not in EXTREME_FAMILIES:
        return tuple(comparisons)
    return tuple(
        replace(c, severity="extreme-range") if not c.ok and c.kind != "bitwise" else c
        for c in comparisons
    )


def _finite_or(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


__all__ = ["EXTREME_HIGH_FACTOR", "EXTREME_LOW", "Severity", "severity", "with_input_severity"]
