# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Triton kernels for causal linear attention: parallel, chunked and recurrent forms.

Importing this package on a machine without CUDA sets ``TRITON_INTERPRET=1`` (once, with a
warning) so the same kernels run under the Triton interpreter. Triton reads that variable when
``@triton.jit`` decorates a function, and a package's ``__init__`` always runs before its
submodules, so importing `_backend` here first covers every kernel module.
"""

from linattn_kernels import _backend
from linattn_kernels._backend import INTERPRETING, InterpreterFallbackWarning

__all__ = ["INTERPRETING", "InterpreterFallbackWarning", "_backend"]
