# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Feature maps and their derivatives as Triton device functions, selected by a constexpr code."""

from __future__ import annotations

import triton
import triton.language as tl

FEATURE_CODES = {"identity": 0, "elu1": 1, "relu": 2}
"""The constexpr ``FEATURE`` value each feature-map name compiles to."""


@triton.jit
def feature_map(x, FEATURE: tl.constexpr):
    """φ(x) in fp32: identity, elu(x)+1 as where(x>0, x+1, exp(x)), or relu."""
    if FEATURE == 1:
        # exp of min(x, 0): the discarded branch must not overflow to inf.
        return tl.where(x > 0, x + 1.0, tl.exp(tl.minimum(x, 0.0)))
    if FEATURE == 2:
        return tl.maximum(x, 0.0)
    return x


@triton.jit
def feature_map_grad(x, FEATURE: tl.constexpr):
    """φ'(x) in fp32 (1 for identity; 1 or exp(x) for elu1; 1 or 0 for relu)."""
    if FEATURE == 1:
        return tl.where(x > 0, 1.0, tl.exp(tl.minimum(x, 0.0)))
    if FEATURE == 2:
        return tl.where(x > 0, 1.0, 0.0)
    return tl.full(x.shape, 1.0, tl.float32)
