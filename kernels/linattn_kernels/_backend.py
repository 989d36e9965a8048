# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Pick how Triton runs our kernels: compiled on CUDA, else the interpreter on the CPU.

Imported by every kernel module before it defines a ``@triton.jit`` function: Triton decides
at decoration time whether a function is interpreted, so the variable must be set first.
"""

from __future__ import annotations

import os
import warnings

import torch


class InterpreterFallbackWarning(UserWarning):
    """No CUDA device was found, so the kernels run under the Triton interpreter (slowly)."""


def _select() -> bool:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return True
    if torch.cuda.is_available():
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.warn(
        "linattn_kernels: no CUDA device, so TRITON_INTERPRET=1 was set and the Triton kernels "
        "run under the interpreter on the CPU (slow; keep problems small).",
        InterpreterFallbackWarning,
        stacklevel=3,
    )
    return True


INTERPRETING: bool = _select()
"""True when kernels run under the Triton interpreter (decided once, at first import)."""
