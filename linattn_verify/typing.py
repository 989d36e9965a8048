# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Shared type aliases: the string options of the public API, spelled once."""

from __future__ import annotations

from typing import Literal

Form = Literal["parallel", "chunk", "recurrent"]
"""The three algorithmic forms of causal linear attention."""

FeatureMap = Literal["identity", "elu1", "relu"]
"""Feature maps φ: ``identity``; ``elu1`` = elu(x)+1 = where(x>0, x+1, exp(x)); ``relu``."""

OracleMethod = Literal["auto", "float64", "double-double", "mpmath"]
"""How `linattn_verify.oracle` computes: float64 torch, double-double numpy, or mpmath."""

DotPrecision = Literal["ieee", "tf32", "tf32x3"]
"""``tl.dot`` input precision for fp32 operands."""

Accumulation = Literal["ieee", "mma", "float64"]
"""``ieee``: round-to-nearest fp32 adds (u = 2^-24); ``mma``: tensor-core accumulation (2^-23);
``float64``: everything in float64 (u = 2^-53), for judging the float64 references."""

DecayScan = Literal["chunk_local", "global", "per_step"]
"""How a kernel obtains decay weights: exp of differences of chunk-local cumulative sums, of
whole-sequence cumulative sums, or a product of per-step factors exp(g_s)."""

Division = Literal["full", "rn"]
"""fp32 division flavour: ``full`` (``div.full.f32``, 2 ulp) or correctly rounded ``rn``."""

LowDtype = Literal["float32", "float16", "bfloat16"]
"""Storage dtypes a kernel may take inputs in, or round intermediates to."""

__all__ = [
    "Accumulation",
    "DecayScan",
    "Division",
    "DotPrecision",
    "FeatureMap",
    "Form",
    "LowDtype",
    "OracleMethod",
]
