# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear-attention family (plain, gated and GLA-style vector-gated linear attention).

Its rooms: `family` (the `Family` plug-in: CLI flags, kernel source, drift, reach, recipe
ladders), `semantics` (the problem), `oracles` (float64, double-double and mpmath references),
`tolerance` with `_bounds` (the error bounds), `recipe` and `recipe_ladders` (how a kernel
rounds, and what a diagnosis tries), `strategies` (cases), `kernel` and `targets` (its kernel
type and the kernel source of ``check``), `reference_kernels`, `adapters` (FLA's kernels),
`feature_maps` and `reach` (the size reach).
Shared code reaches it through `family.LinearAttnFamily`; what both families use lives in
`linattn_verify.core`.
"""
