# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bounds patch: masked-in accesses outside every tensor argument raise."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter
from linattn_verify.interpreter import OutOfBoundsAccess

# Kernels below are decorated at import, so the interpreter must be selected first.
interpreter.enable(patches=())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

pytestmark = pytest.mark.interpret


@triton.jit
def copy_kernel(x, out, n_load, n_store, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # The masks are the kernel's claim about what is in bounds; the tests lie in them.
    v = tl.load(x + offs, mask=offs < n_load, other=0.0)
    tl.store(out + offs, v, mask=offs < n_store)


@triton.jit
def pair_kernel(pair, out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b = pair
    tl.store(out + offs, tl.load(a + offs) + tl.load(b + offs))


@pytest.fixture
def bounds_patch() -> Iterator[None]:
    before = interpreter.enabled()
    interpreter.enable(patches=["bounds"])
    yield
    if "bounds" not in before:
        interpreter.disable(patches=["bounds"])


@pytest.fixture
def no_bounds_patch() -> Iterator[None]:
    undone = interpreter.disable(patches=["bounds"])
    yield
    if undone:
        interpreter.enable(patches=undone)


def test_out_of_bounds_load_is_silent_without_patch(no_bounds_patch: None) -> None:
    x, out = torch.randn(10), torch.empty(16)
    # Six elements past x's end are read from whatever memory follows it.
    copy_kernel[(1,)](x, out, 16, 16, BLOCK=16)
    assert torch.equal(out[:10], x)


def test_masked_out_of_bounds_load_raises_naming_the_argument(bounds_patch: None) -> None:
    x, out = torch.randn(10), torch.empty(16)
    with pytest.raises(OutOfBoundsAccess, match=r"load through pointer argument 'x'") as info:
        copy_kernel[(1,)](x, out, 16, 16, BLOCK=16)
    message = str(info.value)
    assert "6 of 16 active elements" in message
    assert "first at block index (10,)" in message
    assert "4 bytes past the end of argument 'x'" in message
    assert isinstance(info.value, IndexError)


def test_out_of_bounds_store_raises(bounds_patch: None) -> None:
    x, out = torch.randn(32), torch.empty(20)
    with pytest.raises(OutOfBoundsAccess, match=r"store through pointer argument 'out'") as info:
        copy_kernel[(2,)](x, out, 32, 32, BLOCK=16)
    assert "12 of 16 active elements" in str(info.value)
    assert "in program (1, 0, 0)" in str(info.value)


def test_in_bounds_and_masked_off_accesses_pass(bounds_patch: None) -> None:
    x, out = torch.randn(10), torch.zeros(16)
    # Masked-off lanes point past the end but are never dereferenced.
    copy_kernel[(1,)](x, out, 10, 10, BLOCK=16)
    assert torch.equal(out[:10], x)
    # A view may reach the rest of its storage: the check is against storage ranges.
    base = torch.randn(32)
    out = torch.zeros(16)
    copy_kernel[(1,)](base[:8], out, 16, 16, BLOCK=16)
    assert torch.equal(out, base[:16])


def test_tuple_arguments_are_named_by_position(bounds_patch: None) -> None:
    a, b, out = torch.randn(8), torch.randn(4), torch.empty(8)
    with pytest.raises(OutOfBoundsAccess, match=r"argument 'pair\[1\]'"):
        pair_kernel[(1,)]((a, b), out, BLOCK=8)
