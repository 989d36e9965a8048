# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What the tests of our two delta-rule kernels share: the catalogue, its verdicts, the patches.

`tests/kernels/test_delta_recurrent.py` and `test_delta_chunk.py` run the same catalogue the
same way on different kernels and cases; this module holds the part that is the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from linattn_properties.delta import delta_catalogue

from linattn_verify import interpreter
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.strategies import DeltaCase
from linattn_verify.running import check_property

CATALOGUE = delta_catalogue()
CORRECT = ("held", "not_applicable", "ill_conditioned")
"""What a property may say of a correct kernel (neither kernel assumes unit-norm keys: never
out of contract)."""


def with_interpreter_patches(kernel: DeltaKernel) -> Iterator[DeltaKernel]:
    """Yield ``kernel`` with the interpreter's patches (bf16) on; switch back off what was off."""
    before = interpreter.enabled()
    interpreter.enable()
    yield kernel
    interpreter.disable(patches=[p for p in interpreter.PATCHES if p not in before])


def assert_property_holds(name: str, case: DeltaCase, kernel: DeltaKernel, directory: Path) -> None:
    """Run catalogue property ``name``; it must say what it may of a correct kernel."""
    result = check_property(CATALOGUE[name], case, kernel, directory=directory)
    assert result.status in CORRECT, result.report()


def relative_error(actual: torch.Tensor, exact: torch.Tensor) -> float:
    """max |actual - exact| / max |exact| (1 when exact is 0), inf when ``actual`` is not finite."""
    if not bool(torch.isfinite(actual).all()):
        return float("inf")
    scale = float(exact.double().abs().max()) or 1.0
    return float((actual.double() - exact.double()).abs().max()) / scale
