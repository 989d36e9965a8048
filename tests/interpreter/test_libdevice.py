# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The libdevice patch: libdevice functions FLA uses compute with numpy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter

# Kernels below are decorated at import, so the interpreter must be selected first.
interpreter.enable(patches=())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.language.extra.libdevice as tldevice  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

pytestmark = pytest.mark.interpret

N = 64


@triton.jit
def unary_kernel(
    x, exp, exp2, log1p, tanh, rnd, fexp, flog, fl2, fth, fsin, fcos, BLOCK: tl.constexpr
):
    o = tl.arange(0, BLOCK)
    v = tl.load(x + o)
    tl.store(exp + o, tldevice.exp(v))
    tl.store(exp2 + o, tldevice.exp2(v))
    tl.store(log1p + o, tldevice.log1p(tl.abs(v)))
    tl.store(tanh + o, tldevice.tanh(v))
    tl.store(rnd + o, tldevice.round(v * 2.0))
    tl.store(fexp + o, tldevice.fast_expf(v))
    tl.store(flog + o, tldevice.fast_logf(tl.abs(v) + 1.0))
    tl.store(fl2 + o, tldevice.fast_log2f(tl.abs(v) + 1.0))
    tl.store(fth + o, tldevice.fast_tanhf(v))
    tl.store(fsin + o, tldevice.fast_sinf(v))
    tl.store(fcos + o, tldevice.fast_cosf(v))


@triton.jit
def scalar_pow_kernel(x, out):
    tl.store(out, tldevice.pow(tl.load(x), 2.0))


@triton.jit
def fp16_kernel(x, out):
    tl.store(out, tldevice.exp(tl.load(x)))


NAMES = ("exp", "exp2", "log1p", "tanh", "rnd", "fexp", "flog", "fl2", "fth", "fsin", "fcos")


def _expected(x: torch.Tensor) -> dict[str, torch.Tensor]:
    y = x.double()
    # The kernel adds 1 in fp32; take that rounded argument as given.
    z = (x.abs() + 1).double()
    return {
        "exp": y.exp(),
        "exp2": torch.exp2(y),
        "log1p": y.abs().log1p(),
        "tanh": y.tanh(),
        # Halves round away from zero (C round), unlike torch.round.
        "rnd": torch.sign(2 * y) * torch.floor((2 * y).abs() + 0.5),
        "fexp": y.exp(),
        "flog": z.log(),
        "fl2": torch.log2(z),
        "fth": y.tanh(),
        "fsin": y.sin(),
        "fcos": y.cos(),
    }


@pytest.fixture
def libdevice_patch() -> Iterator[None]:
    before = interpreter.enabled()
    interpreter.enable(patches=["libdevice"])
    yield
    if "libdevice" not in before:
        interpreter.disable(patches=["libdevice"])


@pytest.fixture
def no_libdevice_patch() -> Iterator[None]:
    undone = interpreter.disable(patches=["libdevice"])
    yield
    if undone:
        interpreter.enable(patches=undone)


def _inputs() -> torch.Tensor:
    x = torch.randn(N, generator=torch.Generator().manual_seed(0)) * 3
    x[:4] = torch.tensor([0.25, -0.25, 0.75, -1.25])  # ties for round(2x)
    return x


def test_libdevice_stubs_fail_without_patch(no_libdevice_patch: None) -> None:
    outs = {k: torch.empty(N) for k in NAMES}
    with pytest.raises(InterpreterError):
        unary_kernel[(1,)](_inputs(), **outs, BLOCK=N)


def test_libdevice_functions_match_float64_with_patch(libdevice_patch: None) -> None:
    x = _inputs()
    outs = {k: torch.empty(N) for k in NAMES}
    unary_kernel[(1,)](x, **outs, BLOCK=N)
    for key, want in _expected(x).items():
        # numpy's fp32 functions are within a few ulp of the exact value.
        torch.testing.assert_close(outs[key].double(), want, rtol=4e-7, atol=1e-30, msg=key)


def test_scalar_and_python_number_arguments(libdevice_patch: None) -> None:
    out = torch.empty(1)
    scalar_pow_kernel[(1,)](torch.tensor([3.0]), out)
    assert out.item() == 9.0


def test_unsupported_dtype_is_a_type_error(libdevice_patch: None) -> None:
    with pytest.raises(InterpreterError, match="fp32 or fp64"):
        fp16_kernel[(1,)](torch.ones(1, dtype=torch.float16), torch.empty(1, dtype=torch.float16))
