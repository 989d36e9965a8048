# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Feature maps and their derivatives as Triton device functions, selected by a constexpr code.

Two families: the elementwise maps φ (`FEATURE_CODES`, applied to q and k on load) and the score
maps κ (`SCORE_CODES`), which the parallel form applies to a scaled score x = s q·k instead,
κ(x) = φ(s q)·φ(k) for the lifted maps taylor2 and rebased (linear_attn/README.md, "Score maps").
"""

from __future__ import annotations

import triton
import triton.language as tl

FEATURE_CODES = {"identity": 0, "elu1": 1, "relu": 2}
"""The constexpr ``FEATURE`` value each elementwise feature-map name compiles to."""

SCORE_CODES = {"taylor2": 3, "rebased": 4}
"""The constexpr ``SCORE`` value each score map compiles to (0: no score map).

Disjoint from `FEATURE_CODES`, so an `Inputs.feature` holding one cannot be mistaken for the
other: a kernel given a score code applies the identity φ on load and κ to the score.
"""


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


@triton.jit
def score_map(x, SCORE: tl.constexpr):
    """κ(x) in fp32: 1 + x + x²/2 (taylor2, three roundings) or x² (rebased, one rounding)."""
    if SCORE == 3:
        # (1 + x) + (x·x)·0.5: the halving is exact, so three roundings, each relative to a
        # term of 1 + |x| + x²/2 (the magnitude the error model charges).
        return (1.0 + x) + (x * x) * 0.5
    return x * x


@triton.jit
def score_map_grad(x, SCORE: tl.constexpr):
    """κ'(x) in fp32: 1 + x (taylor2, one rounding) or 2x (rebased, exact)."""
    if SCORE == 3:
        return 1.0 + x
    return 2.0 * x
