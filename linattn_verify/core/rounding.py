# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Unit roundoffs and rounding-count factors: the vocabulary of every family's error bound."""

from __future__ import annotations

import math

UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}
"""u = 2^-t for each storage format (docs/error-model.md §1)."""


def gamma(n: float, u: float) -> float:
    """γ_n = n u / (1 - n u): the relative error of n roundings of unit roundoff u.

    Infinite where n u >= 1: so many roundings bound nothing (bf16 has u = 2^-8, so 256 terms
    in bf16 arithmetic reach it), and a bound built on it marks its elements unverifiable.
    """
    nu = n * u
    return nu / (1 - nu) if nu < 1 else math.inf
