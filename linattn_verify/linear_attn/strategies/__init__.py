# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Hypothesis strategies that generate linear-attention problems.

Shapes, dtypes, options, layouts and value *families* are drawn by Hypothesis (so failures
shrink to small shapes and simple families); the tensor values themselves come from a seeded
torch generator, whose seed is drawn too, so every example is reproducible from its printed case
(`ProblemSpec.repro`).

By default a strategy generates anything the function allows; exclusions are documented on the
strategy that makes them. Strategies are plural nouns with keyword-only ``min_value``/
``max_value`` (``min_size``/``max_size``) bounds, and validate every argument.
"""

from __future__ import annotations

from linattn_verify.core.sizes import (
    batch_sizes,
    declared_scales,
    head_counts,
    head_dims,
    scales,
    seq_lens,
    seq_packings,
)
from linattn_verify.linear_attn.strategies._cases import ProblemSpec, problem_specs
from linattn_verify.linear_attn.strategies._kernel_cases import kernel_specs
from linattn_verify.linear_attn.strategies._tensors import (
    DECAY_FAMILIES,
    DTYPES,
    EXTREME_FAMILIES,
    LAYOUTS,
    REALISTIC_FAMILIES,
    VALUE_FAMILIES,
    VECTOR_DECAY_FAMILIES,
    decay_families,
    float_dtypes,
    layouts,
    near_max_magnitude,
    random_cotangents,
    value_families,
    vector_decay_families,
)

__all__ = [
    "DECAY_FAMILIES",
    "DTYPES",
    "EXTREME_FAMILIES",
    "LAYOUTS",
    "REALISTIC_FAMILIES",
    "VALUE_FAMILIES",
    "VECTOR_DECAY_FAMILIES",
    "ProblemSpec",
    "batch_sizes",
    "decay_families",
    "declared_scales",
    "float_dtypes",
    "head_counts",
    "head_dims",
    "kernel_specs",
    "layouts",
    "near_max_magnitude",
    "problem_specs",
    "random_cotangents",
    "scales",
    "seq_lens",
    "seq_packings",
    "value_families",
    "vector_decay_families",
]
