# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The loops patch: range/tl.range loop variables are tensors of the induction type."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter

# Kernels below are decorated at import, so the interpreter must be selected first.
interpreter.enable(patches=())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

pytestmark = pytest.mark.interpret


@triton.jit
def triangle_kernel(out, N):
    acc = tl.zeros([1], dtype=tl.int64)
    for i_t in range(N):
        # FLA writes this (chunk_fwd_kernel_h); it needs i_t to be a tensor.
        acc += i_t.to(tl.int64)
    for i_s in tl.range(0, N, 2, num_stages=2):
        acc += i_s.to(tl.int64) * 1000
    tl.store(out + tl.arange(0, 1), acc)


@triton.jit
def wrap_kernel(out, START):
    for i in range(START, START + 1):
        # int32 induction variable: 2^30 * 4 wraps to 0, as compiled on a GPU.
        tl.store(out, i * 4)


@triton.jit
def wide_kernel(out, START):
    for i in range(START, START + 2):
        # START >= 2^32 is an int64 argument, so the induction variable is int64: no wrap.
        tl.store(out + (i - START), i * 4)


@triton.jit
def static_kernel(out):
    acc = tl.zeros([1], dtype=tl.float32)
    for j in tl.static_range(3):
        # A block shape needs a Python int: static_range variables must stay constexpr ints.
        acc += tl.sum(tl.zeros([1 << j], dtype=tl.float32) + 1.0, axis=0)
    tl.store(out + tl.arange(0, 1), acc)


@pytest.fixture
def loops_patch() -> Iterator[None]:
    before = interpreter.enabled()
    interpreter.enable(patches=["loops"])
    yield
    if "loops" not in before:
        interpreter.disable(patches=["loops"])


@pytest.fixture
def no_loops_patch() -> Iterator[None]:
    undone = interpreter.disable(patches=["loops"])
    yield
    if undone:
        interpreter.enable(patches=undone)


def test_loop_variable_is_int_without_patch(no_loops_patch: None) -> None:
    with pytest.raises(InterpreterError, match="has no attribute 'to'"):
        triangle_kernel[(1,)](torch.zeros(1, dtype=torch.int64), 5)


def test_loop_variable_is_tensor_with_patch(loops_patch: None) -> None:
    out = torch.zeros(1, dtype=torch.int64)
    triangle_kernel[(1,)](out, 5)
    assert out.item() == (0 + 1 + 2 + 3 + 4) + 1000 * (0 + 2 + 4)


def test_int32_loop_variable_wraps_like_a_gpu(loops_patch: None) -> None:
    out = torch.full((1,), -1, dtype=torch.int64)
    wrap_kernel[(1,)](out, 2**30)
    assert out.item() == 0


def test_python_int_loop_variable_does_not_wrap_without_patch(no_loops_patch: None) -> None:
    out = torch.full((1,), -1, dtype=torch.int64)
    wrap_kernel[(1,)](out, 2**30)
    assert out.item() == 2**32


def test_int64_bounds_give_int64_loop_variable(loops_patch: None) -> None:
    out = torch.zeros(2, dtype=torch.int64)
    wide_kernel[(1,)](out, 2**32)
    assert out.tolist() == [2**34, 2**34 + 4]


def test_static_range_variable_stays_python_int(loops_patch: None) -> None:
    out = torch.zeros(1)
    static_kernel[(1,)](out)
    assert out.item() == 1 + 2 + 4
