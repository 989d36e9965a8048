# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bounds patch: masked-in accesses outside every tensor argument raise."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter
from linattn_verify.interpreter import OutOfBoundsAccess, _guard

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


@triton.jit
def descriptor_kernel(x, out, n, BLOCK: tl.constexpr):
    # The descriptor's shape n is its claim about x's extent; the tests lie in it.
    desc = tl.make_tensor_descriptor(x, shape=[n], strides=[1], block_shape=[BLOCK])
    tl.store(out + tl.arange(0, BLOCK), desc.load([0]))


@triton.jit
def block_pointer_kernel(x, out, n, BLOCK: tl.constexpr, CHECKED: tl.constexpr):
    block = tl.make_block_ptr(
        x, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,)
    )
    v = tl.load(
        block, boundary_check=(0,) if CHECKED else (), padding_option="zero" if CHECKED else ""
    )
    tl.store(out + tl.arange(0, BLOCK), v)


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


def test_tensor_descriptor_masks_are_honoured(bounds_patch: None) -> None:
    # Before triton 3.9 descriptors hand the masked load a bare numpy mask, from 3.9 on a
    # TensorHandle: lanes past the descriptor's shape are masked off either way.
    x, out = torch.arange(8.0), torch.zeros(16)
    descriptor_kernel[(1,)](x, out, 8, BLOCK=16)
    assert torch.equal(out, torch.cat([x, torch.zeros(8)]))
    with pytest.raises(OutOfBoundsAccess, match="8 of 16 active elements") as info:
        descriptor_kernel[(1,)](x, out, 16, BLOCK=16)
    # No name travels from a descriptor to its pointers: the nearest argument is named.
    assert "4 bytes past the end of nearest argument 'x'" in str(info.value)


@pytest.mark.skipif(
    _guard.triton_version()[:2] >= (3, 9), reason="block pointers were removed in triton 3.9"
)
def test_block_pointer_accesses_are_checked(bounds_patch: None) -> None:
    # 3.7's interpreter materializes block pointers itself (a numpy mask, no argument name);
    # 3.8 builds them from pointer arithmetic, so the name travels.
    x, out = torch.arange(10.0), torch.zeros(16)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "tl.make_block_ptr is deprecated")
        block_pointer_kernel[(1,)](x, out, 10, BLOCK=16, CHECKED=True)
        assert torch.equal(out, torch.cat([x, torch.zeros(6)]))
        with pytest.raises(OutOfBoundsAccess, match="6 of 16 active elements") as info:
            block_pointer_kernel[(1,)](x, out, 10, BLOCK=16, CHECKED=False)
    assert "4 bytes past the end of" in str(info.value)
    assert "argument 'x'" in str(info.value)
