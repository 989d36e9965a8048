# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule family's catalogue: properties ``(case, kernel) -> PropertyResult``.

The catalogue properties that apply to the family keep their names (what they mean carries
over: oracle agreement, gradients, causality, contract, chunk-size invariance, state split,
varlen, linearity, the scalar/vector gate equivalence); the family adds its own identities
(beta = 0 writes nothing, beta = 1 reads back the value, no gate equals a zero gate) and its
dyadic exactness (basis keys, beta = 1: o rounded once to nearest, S_T exact, bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

DELTA_CATALOGUE_SPEC: dict[str, str] = {
    "outputs_match_oracle": "oracle",
    "gradients_match_oracle": "oracle",
    "chunk_size_invariant": "composition",
    "state_split_composes": "composition",
    "varlen_matches_separate_runs": "family",
    "causal_outputs_exact": "exactness",
    "linear_in_values_and_state": "composition",
    "scalar_gate_matches_repeated_vector": "family",
    "no_gate_matches_zero_gate": "family",
    "zero_beta_keeps_state": "exactness",
    "unit_key_reads_back_value": "family",
    "contract_holds": "contract",
    "backward_takes_any_cotangent": "contract",
    "dyadic_inputs_exact": "dyadic",
}
"""Property name -> the module of `linattn_properties.delta` that defines it."""


def delta_catalogue() -> dict[str, Callable[..., Any]]:
    """Return every delta-rule property function by name (in a stable, cheap-first order)."""
    return {
        name: getattr(import_module(f"linattn_properties.delta.{module}"), name)
        for name, module in DELTA_CATALOGUE_SPEC.items()
    }


__all__ = ["DELTA_CATALOGUE_SPEC", "delta_catalogue"]
