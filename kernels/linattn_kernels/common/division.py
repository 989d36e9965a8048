# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Normalizer division as Triton device functions: when a denominator counts as zero, and 1/D.

(Under the interpreter every device-function call costs a re-patch of ``triton.language``, so
the helpers here and in `loads` call at most one other.)
"""

from __future__ import annotations

import triton
import triton.language as tl

FP32_TINY = 1.1754943508222875e-38
"""fp32's smallest normal number."""


@triton.jit
def vanishes(den):
    """Whether a normalizer counts as zero: |den| below fp32's smallest normal.

    Its reciprocal would overflow (and inf * 0 = NaN downstream), and the error model cannot
    certify such a denominator anyway (its underflow error alone exceeds it), so these rows
    follow the zero-denominator convention: output 0, no gradient.
    """
    return tl.abs(den) < 1.1754943508222875e-38


@triton.jit
def divide_or_zero(num, den):
    """num / den, and 0 where den vanishes (``den`` already broadcast against ``num``).

    The divisor of the discarded lanes is 1, so they stay free of inf and NaN.
    """
    b_zero = vanishes(den)
    return tl.where(b_zero, 0.0, num / tl.where(b_zero, 1.0, den))


@triton.jit
def reciprocal(b_den):
    """1 / D per row, and 0 where D vanishes (those rows output 0, so they pass no gradient)."""
    b_zero = vanishes(b_den)
    return tl.where(b_zero, 0.0, 1.0 / tl.where(b_zero, 1.0, b_den))
