# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run the interpreter-patch tests only where the patches apply."""

from __future__ import annotations

import os

import pytest

from linattn_verify.interpreter import _guard, autotune


@pytest.fixture(autouse=True)
def _patchable_interpreter() -> None:
    """Skip when kernels are compiled (CUDA) or Triton is outside the patches' version range."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip(
            "TRITON_INTERPRET is unset: kernels run compiled on CUDA, no interpreter to patch"
        )
    (lo, hi), found = autotune.VERSIONS, _guard.triton_version()
    if not lo <= found[:2] < hi:
        pytest.skip(f"the interpreter patches were written for triton {lo}..{hi}, not {found}")
