# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Delta-rule kernel speed and peak memory: our token-recurrent kernel beside FLA 0.6.0's.

Not part of the test suite; run with

    pytest benchmarks/test_delta_kernels.py --benchmark-only

Both implementations compute the same function: DeltaNet (no gate), q and k L2-normalised in the
kernel, beta in (0, 1), scale K^-1/2, layout ``[B, T, H, D]``: ``triton/delta.recurrent``
(`linattn_kernels.delta_rule.recurrent_delta_rule`) and FLA's ``fused_recurrent_delta_rule``,
the same token-recurrent algorithm.

* CPU (Triton interpreter, FLA through `linattn_verify.interpreter`'s patches): B = 1, H = 2,
  K = V = 32, fp32, T in {64, 128, 256}; forward, and forward + backward.
* CUDA (``gpu`` marker, skipped without a device): B = 8, H = 16, K = V = 128, bf16,
  T in {1k, 4k}.

Peak memory (`measure_peak`) shows the backward's checkpoints: ours keeps (T/C + C) K V fp32
per head (C about sqrt(T)) where FLA's backward keeps per-token corrections in the input dtype.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from pytest_benchmark.fixture import BenchmarkFixture

from linattn_verify import interpreter

PeakFn = Callable[[Callable[[], Any], torch.device], int]
HAS_FLA = importlib.util.find_spec("fla") is not None
HAS_CUDA = torch.cuda.is_available()


@dataclass(frozen=True)
class Size:
    """One benchmark shape."""

    B: int
    T: int
    H: int
    K: int
    dtype: torch.dtype
    device: str

    @property
    def id(self) -> str:
        """A short test id."""
        return f"{self.device}-T{self.T}-K{self.K}-{str(self.dtype).removeprefix('torch.')}"


CPU_SIZES = tuple(Size(1, T, 2, 32, torch.float32, "cpu") for T in (64, 128, 256))
CUDA_SIZES = tuple(Size(8, T, 16, 128, torch.bfloat16, "cuda") for T in (1024, 4096))
IMPLS = ("triton/delta.recurrent", "fla/delta_rule.fused_recurrent")


def kernel_of(impl: str) -> Callable[..., Any]:
    """The implementation as ``fn(q, k, v, beta) -> (o, state)`` (no gate, in-kernel L2 norm)."""
    if not torch.cuda.is_available():
        interpreter.enable()
    if impl == "triton/delta.recurrent":
        from linattn_kernels.delta_rule import recurrent_delta_rule

        def ours(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> Any:
            return recurrent_delta_rule(q, k, v, None, beta, use_qk_l2norm_in_kernel=True)

        return ours
    if not HAS_FLA:
        pytest.skip("FLA is not installed (pip install fla-core==0.6.0)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.delta_rule import fused_recurrent_delta_rule

    def theirs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> Any:
        return fused_recurrent_delta_rule(q, k, v, beta, use_qk_l2norm_in_kernel=True)

    return theirs


def run(
    benchmark: BenchmarkFixture, measure_peak: PeakFn, impl: str, size: Size, backward: bool
) -> None:
    """Time one implementation on one size (forward, or forward + backward)."""
    fn = kernel_of(impl)
    device = torch.device(size.device)
    gen = torch.Generator().manual_seed(0)
    shape = (size.B, size.T, size.H, size.K)
    q, k, v = (torch.randn(shape, generator=gen).to(device, size.dtype) for _ in range(3))
    beta = torch.rand(shape[:3], generator=gen).to(device, size.dtype)
    leaves = [x.requires_grad_(backward) for x in (q, k, v, beta)]

    def step() -> torch.Tensor:
        o, _ = fn(*leaves)
        if backward:
            grads = torch.autograd.grad(o, leaves, torch.ones_like(o))
            o = grads[0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return o  # type: ignore[no-any-return]

    peak = measure_peak(step, device)
    passes = "forward+backward" if backward else "forward"
    benchmark.group = f"delta {size.id} {passes}"
    benchmark.extra_info.update(suite="delta_kernels", impl=impl, passes=passes, peak_bytes=peak)
    rounds = 10 if device.type == "cuda" else 2
    out = benchmark.pedantic(step, rounds=rounds, iterations=1, warmup_rounds=0)  # type: ignore[no-untyped-call]
    assert bool(torch.isfinite(out).all())


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", CPU_SIZES, ids=[s.id for s in CPU_SIZES])
def test_cpu(
    benchmark: BenchmarkFixture, measure_peak: PeakFn, impl: str, size: Size, backward: bool
) -> None:
    run(benchmark, measure_peak, impl, size, backward)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", CUDA_SIZES, ids=[s.id for s in CUDA_SIZES])
def test_cuda(
    benchmark: BenchmarkFixture, measure_peak: PeakFn, impl: str, size: Size, backward: bool
) -> None:
    run(benchmark, measure_peak, impl, size, backward)
