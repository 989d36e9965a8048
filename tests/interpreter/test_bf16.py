# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bf16 patch: bf16 arithmetic in fp32, rounded to nearest even like torch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from linattn_verify import interpreter
from linattn_verify.interpreter.bf16 import bf16_to_f32, f32_to_bf16, f64_to_bf16

# Kernels below are decorated at import, so the interpreter must be selected first.
interpreter.enable(patches=())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

pytestmark = pytest.mark.interpret

N = 256


@triton.jit
def ops_kernel(
    a,
    b,
    x,
    add,
    sub,
    mul,
    div,
    neg,
    lt,
    mx,
    cast,
    scaled,
    n,
    BLOCK: tl.constexpr,
    CONST: tl.constexpr,
):
    o = tl.arange(0, BLOCK)
    m = o < n
    va = tl.load(a + o, mask=m, other=0.0)
    vb = tl.load(b + o, mask=m, other=1.0)
    tl.store(add + o, va + vb, mask=m)
    tl.store(sub + o, va - vb, mask=m)
    tl.store(mul + o, va * vb, mask=m)
    tl.store(div + o, va / vb, mask=m)
    tl.store(neg + o, -va, mask=m)
    tl.store(lt + o, (va < vb).to(tl.int8), mask=m)
    tl.store(mx + o, tl.maximum(va, vb), mask=m)
    # An fp32 value stored through a bf16 pointer is cast (rounded) on the way.
    tl.store(cast + o, tl.load(x + o, mask=m), mask=m)
    if CONST:
        # A bf16 constant: the builder's get_bf16, which triton < 3.9 lacks.
        tl.store(scaled + o, va * 0.1, mask=m)


@triton.jit
def reduce_kernel(a, s, c, mx, mn, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    va = tl.load(a + rows[:, None] * N + cols[None, :])
    tl.store(s + rows, tl.sum(va, axis=1))
    tl.store(c + rows[:, None] * N + cols[None, :], tl.cumsum(va, axis=1))
    tl.store(mx + rows, tl.max(va, axis=1))
    tl.store(mn + rows, tl.min(va, axis=1))


@triton.jit
def dot_kernel(a, b, c, M: tl.constexpr):
    r = tl.arange(0, M)
    va = tl.load(a + r[:, None] * M + r[None, :])
    vb = tl.load(b + r[:, None] * M + r[None, :])
    tl.store(c + r[:, None] * M + r[None, :], tl.dot(va, vb))


@pytest.fixture
def bf16_patch() -> Iterator[None]:
    before = interpreter.enabled()
    interpreter.enable(patches=["bf16"])
    yield
    if "bf16" not in before:
        interpreter.disable(patches=["bf16"])


@pytest.fixture
def no_bf16_patch() -> Iterator[None]:
    undone = interpreter.disable(patches=["bf16"])
    yield
    if undone:
        interpreter.enable(patches=undone)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def _run_ops(*, constant: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(N, generator=gen) * 3).bfloat16()
    b = (torch.randn(N, generator=gen) * 3).bfloat16()
    # Wide magnitudes, ties and specials for the fp32 -> bf16 rounding.
    x = torch.randn(N, generator=gen) * torch.logspace(-40, 38, N)
    x[:4] = torch.tensor([float("inf"), -float("inf"), 1.0 + 2**-8, 1.0 + 3 * 2**-8])
    outs = {k: torch.empty(N, dtype=torch.bfloat16) for k in ("add", "sub", "mul", "div", "neg")}
    outs |= {k: torch.empty(N, dtype=torch.bfloat16) for k in ("mx", "cast", "scaled")}
    outs["lt"] = torch.empty(N, dtype=torch.int8)
    ops_kernel[(1,)](a, b, x, **outs, n=N, BLOCK=N, CONST=constant)
    expected = {
        "add": a + b,
        "sub": a - b,
        "mul": a * b,
        "div": a / b,
        "neg": -a,
        "lt": (a < b).to(torch.int8),
        "mx": torch.maximum(a, b),
        "cast": x.to(torch.bfloat16),
        # Triton gives a Python float the tensor's dtype (0.1 -> bf16) before multiplying.
        "scaled": a * torch.tensor(0.1, dtype=torch.bfloat16),
    }
    return outs, expected


def test_elementwise_ops_and_casts_are_garbage_without_patch(no_bf16_patch: None) -> None:
    with np.errstate(all="ignore"):
        outs, expected = _run_ops(constant=False)
    assert not torch.equal(_bits(outs["add"]), _bits(expected["add"]))
    assert not torch.equal(_bits(outs["cast"]), _bits(expected["cast"]))


def test_bf16_constants_without_patch(no_bf16_patch: None) -> None:
    from triton.runtime.errors import InterpreterError
    from triton.runtime.interpreter import InterpreterBuilder

    if hasattr(InterpreterBuilder, "get_bf16"):
        # triton 3.9: the constant is made, then multiplied as raw bits.
        with np.errstate(all="ignore"):
            outs, expected = _run_ops()
        assert not torch.equal(_bits(outs["scaled"]), _bits(expected["scaled"]))
    else:
        # triton 3.7 and 3.8: no bf16 constant can be made at all.
        with pytest.raises(InterpreterError, match="no attribute 'get_bf16'"):
            _run_ops()


def test_patch_adds_or_replaces_get_bf16() -> None:
    from triton.runtime.interpreter import InterpreterBuilder

    undone = interpreter.disable(patches=["bf16"])
    try:
        original = InterpreterBuilder.__dict__.get("get_bf16")
        interpreter.enable(patches=["bf16"])
        assert InterpreterBuilder.__dict__["get_bf16"] is not original
        interpreter.disable(patches=["bf16"])
        # Undone: the builder's own method is back, or (before 3.9) there is none again.
        assert InterpreterBuilder.__dict__.get("get_bf16") is original
    finally:
        if undone:
            interpreter.enable(patches=undone)


def test_elementwise_ops_and_casts_match_torch_bit_for_bit(bf16_patch: None) -> None:
    outs, expected = _run_ops()
    for key, want in expected.items():
        got = outs[key]
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), key


def test_reductions_and_scans_round_an_fp32_accumulation(bf16_patch: None) -> None:
    gen = torch.Generator().manual_seed(1)
    m, n = 8, 16
    # Small dyadic values: every fp32 partial sum is exact, so any summation order gives the
    # same fp32 sum and the result is that sum rounded once.
    a = (torch.randint(-255, 256, (m, n), generator=gen) / 64).bfloat16() * 1.5
    s, mx, mn = (torch.empty(m, dtype=torch.bfloat16) for _ in range(3))
    c = torch.empty(m, n, dtype=torch.bfloat16)
    reduce_kernel[(1,)](a, s, c, mx, mn, M=m, N=n)
    assert torch.equal(_bits(s), _bits(a.sum(dim=1)))
    assert torch.equal(_bits(c), _bits(a.float().cumsum(dim=1).bfloat16()))
    assert torch.equal(_bits(mx), _bits(a.amax(dim=1)))
    assert torch.equal(_bits(mn), _bits(a.amin(dim=1)))


def test_dot_multiplies_exactly_and_accumulates_in_fp32(bf16_patch: None) -> None:
    gen = torch.Generator().manual_seed(2)
    m = 16
    a = (torch.randint(-255, 256, (m, m), generator=gen) / 64).bfloat16()
    b = (torch.randint(-255, 256, (m, m), generator=gen) / 64).bfloat16()
    c = torch.empty(m, m)
    dot_kernel[(1,)](a, b, c, M=m)
    assert torch.equal(c, a.float() @ b.float())
    a, b = torch.randn(m, m, generator=gen).bfloat16(), torch.randn(m, m, generator=gen).bfloat16()
    dot_kernel[(1,)](a, b, c, M=m)
    torch.testing.assert_close(c, a.double() @ b.double(), check_dtype=False, rtol=1e-6, atol=1e-5)


def test_dot_is_garbage_without_patch(no_bf16_patch: None) -> None:
    gen = torch.Generator().manual_seed(2)
    a, b = (
        torch.randn(16, 16, generator=gen).bfloat16(),
        torch.randn(16, 16, generator=gen).bfloat16(),
    )
    c = torch.empty(16, 16)
    dot_kernel[(1,)](a, b, c, M=16)
    assert (c - a.float() @ b.float()).abs().max() > 1e3


def test_encoders_match_torch_rounding() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4096, generator=gen) * torch.logspace(-45, 38, 4096)
    got = torch.from_numpy(f32_to_bf16(x.numpy()).view(np.int16))
    assert torch.equal(got, _bits(x.to(torch.bfloat16)))
    back = torch.from_numpy(bf16_to_f32(got.numpy().view(np.uint16)))
    assert torch.equal(back, x.to(torch.bfloat16).float())
    assert np.isnan(bf16_to_f32(f32_to_bf16(np.array([np.nan], np.float32)))).all()
    # fp64 rounds once: 1 + 2^-8 + 2^-30 is above the midpoint, so it rounds up (torch, going
    # through fp32 first, lands on the midpoint and rounds to even, down).
    up = bf16_to_f32(f64_to_bf16(np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30)])))
    assert up.tolist() == [1 + 2**-7, -(1 + 2**-7)]
    # Where fp32 represents the value, fp64 and fp32 paths agree.
    x64 = x.double().numpy()
    assert np.array_equal(f64_to_bf16(x64), f32_to_bf16(x.numpy()))
