# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule family (DeltaNet, Gated DeltaNet, KDA): semantics and oracles."""

from linattn_verify.delta.high_precision import delta_double_double, delta_mpmath
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem, l2norm, validate_delta
from linattn_verify.delta.reference import delta_chunked, delta_recurrent

__all__ = [
    "L2NORM_EPS",
    "DeltaProblem",
    "delta_chunked",
    "delta_double_double",
    "delta_mpmath",
    "delta_recurrent",
    "l2norm",
    "validate_delta",
]
