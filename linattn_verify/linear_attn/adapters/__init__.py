# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Adapters: third-party kernels presented in the calling convention, with their declarations.

Each adapter module wraps one library's public functions as `linattn_verify.Kernel` objects
(capabilities, precision recipe, form) and imports the library only when asked for its kernels,
so importing this package never imports the libraries themselves.

- `linattn_verify.linear_attn.adapters.fla`: flash-linear-attention (``fla-core==0.6.0``):
linear_attn,
  simple_gla and retention, through `fla_kernels`.
"""

from __future__ import annotations

from linattn_verify.linear_attn.adapters.fla import fla_kernels

__all__ = ["fla_kernels"]
