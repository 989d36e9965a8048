# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear-attention family's front door: its `Family` plugin, CLI flags and kernel source.

The family's machinery (problem, oracles, bounds, strategies, reference kernels, adapters) still
lives at the top level of `linattn_verify` (`semantics`, `tolerance`, `_bounds`, `oracles`,
`strategies`, `kernel`, `targets`, `reference_kernels`, `adapters`): shared code reaches it only
through `family.LinearAttnFamily`.
"""
