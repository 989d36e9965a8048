# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Properties of linear-attention kernels, each a pure function (spec, kernel) -> PropertyResult.

`catalogue()` maps every per-kernel property to its function; linattn-verify finds it through
the ``linattn_verify.properties.linear_attn`` entry point (imports flow from this package to
linattn_verify, never back, so the CLI discovers properties the way it discovers third-party
kernels; the delta rule's, `linattn_properties.delta`, through ``...properties.delta``).
Multi-kernel properties (``equivalence.forms_agree``) and oracle self-checks
(``oracle.float64_path_passes_gradcheck``) are called directly.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

CATALOGUE_SPEC: dict[str, str] = {
    "outputs_match_oracle": "oracle",
    "gradients_match_oracle": "oracle",
    "chunk_size_invariant": "equivalence",
    "state_split_composes": "splitting",
    "varlen_matches_separate_runs": "splitting",
    "causal_outputs_exact": "causality",
    "causal_gradients_exact": "causality",
    "batch_and_head_equivariant": "invariance",
    "scalar_gate_matches_repeated_vector": "gates",
    "linear_in_values_and_state": "algebra",
    "normalized_affine_and_convex": "algebra",
    "denominator_stable": "denominators",
    "contract_holds": "contract",
    "backward_takes_any_cotangent": "contract",
    "dyadic_inputs_exact": "exactness",
    "compiled_matches_eager": "compilation",
}
"""Property name -> the module of `linattn_properties` that defines it."""


def catalogue() -> dict[str, Callable[..., Any]]:
    """Return every per-kernel property function by name (in a stable, cheap-first order)."""
    return {
        name: getattr(import_module(f"linattn_properties.{module}"), name)
        for name, module in CATALOGUE_SPEC.items()
    }


__all__ = ["CATALOGUE_SPEC", "catalogue"]
