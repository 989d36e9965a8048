# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernel speed and peak memory: our Triton forms vs the torch references and FLA 0.6.0.

Not part of the test suite; run with ``python benchmarks/results.py`` or

    pytest benchmarks/test_kernels.py --benchmark-only

Every implementation computes the same function: unnormalized, identity feature map, no decay,
scale K^-1/2, fp32 on the CPU and bf16 on CUDA, layout ``[B, T, H, D]``. Each form is matched
with FLA's kernel of the same algorithm (`FLA_MATCH`): ``simple_gla.parallel`` without g is the
parallel form of plain linear attention.

* CPU (Triton interpreter): smoke sizes, B = 1, H = 2, T up to 512 and K = V up to 64 (the
  interpreter costs milliseconds per program and time step); the torch references continue to
  T = 4096 so that linear and quadratic growth show.
* CUDA (``gpu`` marker, skipped without a device): B = 8, H = 16 (B*H = 128), K = V = 128, bf16,
  T in {1k, 4k, 16k}, against FLA's chunk kernels; the forward also reports its effective
  bandwidth (compulsory bytes: q, k, v read and o written once) next to a measured device copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from linattn_kernels.linear_attn import FORMS
from pytest_benchmark.fixture import BenchmarkFixture

from linattn_verify.linear_attn.reference_kernels import float32_reference

KernelFn = Callable[..., tuple[torch.Tensor, Any]]
PeakFn = Callable[[Callable[[], Any], torch.device], int]

FLA_MATCH = {
    "parallel": "fla/simple_gla.parallel",
    "chunk": "fla/linear_attn.chunk",
    "recurrent": "fla/linear_attn.fused_recurrent",
}
"""FLA's kernel of each form, by `linattn_verify.linear_attn.adapters.fla` name."""

CPU_SEQ_LENS = (64, 128, 256, 512)
CPU_HEAD_DIMS = (32, 64)
"""Head dims swept at T = 128 (K = 16 is in the T sweep)."""
TORCH_ONLY_SEQ_LENS = (1024, 2048, 4096)
"""Longer sequences for the torch references only: the interpreter would take minutes."""

CUDA_SEQ_LENS = (1024, 4096, 16384)
CUDA_IMPLS = (
    ("triton/chunk", "chunk"),
    ("fla/linear_attn.chunk", "chunk"),
    ("fla/linear_attn.fused_chunk", "chunk"),
    ("triton/parallel", "parallel"),
    ("fla/simple_gla.parallel", "parallel"),
    ("triton/recurrent", "recurrent"),
    ("fla/linear_attn.fused_recurrent", "recurrent"),
)
"""Our forms and FLA's kernels of the same algorithms, on CUDA: ``(impl, form)``."""


@dataclass(frozen=True)
class Size:
    """One benchmarked problem size (the layout is ``[B, T, H, D]``, K = V)."""

    B: int
    T: int
    H: int
    K: int
    dtype: torch.dtype
    device: str

    def label(self) -> str:
        return f"T{self.T}-K{self.K}"


@dataclass(frozen=True)
class Case:
    """An implementation (``triton/<form>``, ``torch/<form>`` or an FLA name) at a size."""

    impl: str
    form: str
    size: Size

    @property
    def id(self) -> str:
        return f"{self.impl}-{self.size.label()}"


def _cpu_cases() -> list[Case]:
    cases = []
    for form in FORMS:
        impls = [f"triton/{form}", f"torch/{form}", FLA_MATCH[form]]
        sizes = [Size(1, T, 2, 16, torch.float32, "cpu") for T in CPU_SEQ_LENS]
        sizes += [Size(1, 128, 2, K, torch.float32, "cpu") for K in CPU_HEAD_DIMS]
        cases += [Case(impl, form, size) for impl in impls for size in sizes]
        long = [Size(1, T, 2, 16, torch.float32, "cpu") for T in TORCH_ONLY_SEQ_LENS]
        cases += [Case(f"torch/{form}", form, size) for size in long]
    return cases


CPU_CASES = _cpu_cases()
CUDA_CASES = [
    Case(impl, form, Size(8, T, 16, 128, torch.bfloat16, "cuda"))
    for impl, form in CUDA_IMPLS
    for T in CUDA_SEQ_LENS
]


@pytest.fixture(scope="session")
def fla() -> dict[str, KernelFn]:
    """Return FLA's kernels by adapter name; skip when FLA is not installed."""
    from linattn_verify.core.fla_release import FLA_REQUIREMENT
    from linattn_verify.linear_attn.adapters.fla import fla_kernels

    try:
        kernels = fla_kernels()
    except ImportError as exc:
        pytest.skip(f"{FLA_REQUIREMENT} not importable: {exc}")
    return {kernel.name: kernel.fn for kernel in kernels}


def kernel_fn(impl: str, request: pytest.FixtureRequest) -> KernelFn:
    """Return the callable of ``impl`` (FLA's only when FLA is installed)."""
    library, _, name = impl.partition("/")
    if library == "triton":
        return FORMS[name]
    if library == "torch":
        return float32_reference(name)  # type: ignore[arg-type]
    kernels: dict[str, KernelFn] = request.getfixturevalue("fla")
    return kernels[impl]


def inputs(size: Size, *, grad: bool) -> tuple[torch.Tensor, ...]:
    """Return q, k, v ``[B, T, H, K]`` (seeded) and a cotangent do for o."""
    # Drawn on the device itself: at the CUDA sizes each tensor is 256 Mi elements.
    gen = torch.Generator(size.device).manual_seed(0)
    shape = (size.B, size.T, size.H, size.K)
    q, k, v, do = (
        torch.randn(shape, generator=gen, device=size.device).to(size.dtype) for _ in range(4)
    )
    return (*(x.requires_grad_(grad) for x in (q, k, v)), do)


def forward_step(fn: KernelFn, size: Size) -> Callable[[], torch.Tensor]:
    q, k, v, _ = inputs(size, grad=False)
    scale = size.K**-0.5

    def step() -> torch.Tensor:
        with torch.no_grad():
            return fn(q, k, v, scale=scale)[0]

    return step


def forward_backward_step(fn: KernelFn, size: Size) -> Callable[[], torch.Tensor]:
    q, k, v, do = inputs(size, grad=True)
    scale = size.K**-0.5

    def step() -> torch.Tensor:
        o = fn(q, k, v, scale=scale)[0]
        # autograd.grad, not backward(): the leaves would otherwise accumulate across rounds.
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        return torch.stack([dq, dk, dv])

    return step


def run_case(
    benchmark: BenchmarkFixture,
    request: pytest.FixtureRequest,
    measure_peak: PeakFn,
    case: Case,
    passes: str,
) -> torch.Tensor:
    """Time ``passes`` (``forward`` or ``forward+backward``) of ``case``; record its memory."""
    fn = kernel_fn(case.impl, request)
    make = forward_step if passes == "forward" else forward_backward_step
    step = make(fn, case.size)
    device = torch.device(case.size.device)
    cuda = device.type == "cuda"

    def timed() -> torch.Tensor:
        out = step()
        if cuda:
            # Kernels launch asynchronously: the round ends when the device is done.
            torch.cuda.synchronize(device)
        return out

    # The memory-measuring call doubles as the warm-up (first-call compilation, caches).
    peak = measure_peak(step, device)
    size = case.size
    benchmark.group = f"{case.size.device} {passes} T={size.T} K={size.K}"
    benchmark.extra_info.update(
        suite="kernels",
        impl=case.impl,
        library=case.impl.split("/")[0],
        form=case.form,
        passes=passes,
        B=size.B,
        T=size.T,
        H=size.H,
        K=size.K,
        V=size.K,
        dtype=str(size.dtype).removeprefix("torch."),
        device=torch.cuda.get_device_name(device) if cuda else "cpu (Triton interpreter)",
        peak_bytes=peak,
    )
    rounds = 10 if cuda else 3
    out: torch.Tensor = benchmark.pedantic(  # type: ignore[no-untyped-call]
        timed, rounds=rounds, iterations=1, warmup_rounds=1
    )
    assert bool(torch.isfinite(out).all())
    return out


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.id for c in CPU_CASES])
def test_cpu_forward(
    benchmark: BenchmarkFixture, request: pytest.FixtureRequest, measure_peak: PeakFn, case: Case
) -> None:
    o = run_case(benchmark, request, measure_peak, case, "forward")
    assert o.shape == (case.size.B, case.size.T, case.size.H, case.size.K)


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.id for c in CPU_CASES])
def test_cpu_forward_backward(
    benchmark: BenchmarkFixture, request: pytest.FixtureRequest, measure_peak: PeakFn, case: Case
) -> None:
    grads = run_case(benchmark, request, measure_peak, case, "forward+backward")
    assert grads.shape == (3, case.size.B, case.size.T, case.size.H, case.size.K)


@pytest.fixture(scope="session")
def copy_bandwidth() -> float:
    """Return the device's measured copy bandwidth in bytes/s (1 GiB read + 1 GiB written)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    repeats = 20
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = float(start.elapsed_time(end)) / 1e3 / repeats
    return 2 * src.numel() / seconds


@pytest.mark.gpu
@pytest.mark.parametrize("case", CUDA_CASES, ids=[c.id for c in CUDA_CASES])
def test_cuda_forward(
    benchmark: BenchmarkFixture,
    request: pytest.FixtureRequest,
    measure_peak: PeakFn,
    copy_bandwidth: float,
    case: Case,
) -> None:
    o = run_case(benchmark, request, measure_peak, case, "forward")
    # Compulsory traffic: q, k, v read and o written once each.
    benchmark.extra_info.update(
        bytes_moved=4 * o.numel() * o.element_size(), copy_bandwidth=copy_bandwidth
    )


@pytest.mark.gpu
@pytest.mark.parametrize("case", CUDA_CASES, ids=[c.id for c in CUDA_CASES])
def test_cuda_forward_backward(
    benchmark: BenchmarkFixture, request: pytest.FixtureRequest, measure_peak: PeakFn, case: Case
) -> None:
    run_case(benchmark, request, measure_peak, case, "forward+backward")
