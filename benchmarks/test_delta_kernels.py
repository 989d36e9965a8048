# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Delta-rule kernel speed and peak memory: our kernels beside FLA 0.6.0's, form by form.

Not part of the test suite; run with

    pytest benchmarks/test_delta_kernels.py --benchmark-only

or, to merge its timings into ``benchmarks/results.json`` and re-render ``RESULTS.md`` without
re-running the other suites, ``python benchmarks/results.py --suites test_delta_kernels.py
--merge``.

Both sides compute the same function: DeltaNet (no gate), q and k L2-normalised in the kernel,
beta in (0, 1), scale K^-1/2, layout ``[B, T, H, D]``, per form:

* recurrent: ``triton/delta.recurrent`` (`linattn_kernels.delta_rule.recurrent_delta_rule`) and
  FLA's ``fused_recurrent_delta_rule``, the same token-recurrent algorithm;
* chunk: ``triton/delta.chunk`` (`linattn_kernels.delta_rule.chunk_delta_rule`, C = 64) and
  FLA's ``chunk_delta_rule`` (C = 64), the same WY / UT chunk form. FLA's asserts 16-bit inputs
  (``ops/delta_rule/chunk.py:303``), so the comparison is in bf16; ours also runs in fp32.

* CPU (Triton interpreter, FLA through `linattn_verify.interpreter`'s patches): B = 1, H = 2,
  K = V = 32, T in {64, 128, 256}; forward, and forward + backward. The recurrent form in fp32,
  the chunk form in bf16 (and ours in fp32).
* CUDA (``gpu`` marker, skipped without a device): B = 8, H = 16, K = V = 128, bf16,
  T in {1k, 4k}, both forms.

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
    def dtype_name(self) -> str:
        """``"float32"``, ``"bfloat16"``..."""
        return str(self.dtype).removeprefix("torch.")

    @property
    def id(self) -> str:
        """A short test id."""
        return f"{self.device}-T{self.T}-K{self.K}-{self.dtype_name}"


CPU_SIZES = tuple(Size(1, T, 2, 32, torch.float32, "cpu") for T in (64, 128, 256))
CUDA_SIZES = tuple(Size(8, T, 16, 128, torch.bfloat16, "cuda") for T in (1024, 4096))
IMPLS = ("triton/delta.recurrent", "fla/delta_rule.fused_recurrent")
CHUNK_IMPLS = ("triton/delta.chunk", "fla/delta_rule.chunk")
CPU_CHUNK_CASES = tuple(
    (impl, Size(1, T, 2, 32, dtype, "cpu"))
    for dtype, impls in ((torch.bfloat16, CHUNK_IMPLS), (torch.float32, CHUNK_IMPLS[:1]))
    for impl in impls
    for T in (64, 128, 256)
)
"""The chunk form on the CPU: both in bf16 (FLA's takes no fp32), ours in fp32 as well."""
CUDA_CHUNK_CASES = tuple((impl, size) for impl in CHUNK_IMPLS for size in CUDA_SIZES)


def kernel_of(impl: str) -> Callable[..., Any]:
    """The implementation as ``fn(q, k, v, beta) -> (o, state)`` (no gate, in-kernel L2 norm)."""
    if not torch.cuda.is_available():
        interpreter.enable()
    if impl.startswith("triton/"):
        from linattn_kernels.delta_rule import chunk_delta_rule, recurrent_delta_rule

        form = chunk_delta_rule if impl == "triton/delta.chunk" else recurrent_delta_rule

        def ours(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> Any:
            return form(q, k, v, None, beta, use_qk_l2norm_in_kernel=True)

        return ours
    if not HAS_FLA:
        pytest.skip("FLA is not installed (pip install fla-core==0.6.0)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.delta_rule import chunk_delta_rule as fla_chunk
        from fla.ops.delta_rule import fused_recurrent_delta_rule

    fla_form = fla_chunk if impl == "fla/delta_rule.chunk" else fused_recurrent_delta_rule

    def theirs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> Any:
        return fla_form(q, k, v, beta, use_qk_l2norm_in_kernel=True)

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
    form = "chunk" if impl.endswith(".chunk") else "recurrent"
    benchmark.group = f"delta {form} {size.id} {passes}"
    benchmark.extra_info.update(
        suite="delta_kernels",
        impl=impl,
        form=form,
        passes=passes,
        peak_bytes=peak,
        device=size.device,
        dtype=size.dtype_name,
        B=size.B,
        T=size.T,
        H=size.H,
        K=size.K,
    )
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


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize(
    ("impl", "size"), CPU_CHUNK_CASES, ids=[f"{i}-{s.id}" for i, s in CPU_CHUNK_CASES]
)
def test_cpu_chunk(
    benchmark: BenchmarkFixture, measure_peak: PeakFn, impl: str, size: Size, backward: bool
) -> None:
    run(benchmark, measure_peak, impl, size, backward)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize(
    ("impl", "size"), CUDA_CHUNK_CASES, ids=[f"{i}-{s.id}" for i, s in CUDA_CHUNK_CASES]
)
def test_cuda_chunk(
    benchmark: BenchmarkFixture, measure_peak: PeakFn, impl: str, size: Size, backward: bool
) -> None:
    run(benchmark, measure_peak, impl, size, backward)
