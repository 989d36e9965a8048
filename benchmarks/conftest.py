# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Shared setup of the benchmark suites: one CPU thread, peak memory, the machine's context.

The benchmarks are not collected by the test run (``testpaths = ["tests"]``); run them with
``python benchmarks/results.py`` (see ``benchmarks/RESULTS.md``) or ``pytest benchmarks
--benchmark-only``.

Peak memory is measured by the allocator that owns the tensors:

* CUDA: ``torch.cuda.max_memory_allocated`` over the call, less what was allocated before.
* CPU: the torch profiler's allocation records (``profile_memory=True``), replayed in time
  order: the most bytes held at once in blocks the call itself allocated.
  Under the Triton interpreter the kernels copy their arguments into numpy arrays, which torch
  does not see: the CPU figure counts what the launchers allocate (outputs, states,
  workspaces), the analogue of the CUDA number.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any

import pytest
import torch
from hypothesis import settings

MEMORY_METHOD = {
    "cuda": "torch.cuda.max_memory_allocated",
    "cpu": "torch profiler allocation records (torch tensors only)",
}
"""How `peak_bytes` measures, by device type (shown in RESULTS.md)."""

VERSIONED = ("torch", "triton", "fla-core", "hypothesis", "mpmath", "numpy", "pytest-benchmark")

_LOAD_AT_START: list[float] = []
_STARTED_AT: list[float] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="skip the benchmarks that would start this many seconds after the session began",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    _LOAD_AT_START[:] = list(os.getloadavg())
    _STARTED_AT[:] = [time.monotonic()]


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A run stopped by a signal mid-benchmark writes no JSON at all (pytest-benchmark's saving
    # fails on the interrupted case's empty statistics), so a time-limited run (the GPU lease)
    # ends by skipping what is left: everything measured before the deadline is saved.
    deadline = item.config.getoption("--deadline")
    if deadline is not None and time.monotonic() - _STARTED_AT[0] > deadline:
        pytest.skip(f"--deadline {deadline:g} s passed before this benchmark started")


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> Iterator[None]:
    """Run torch on one CPU thread, so timings compare single-core work on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _allocations(nodes: Iterable[Any]) -> Iterator[Any]:
    """Yield the allocation records (frees have negative sizes) of a profiler event tree."""
    for node in nodes:
        if type(node.extra_fields).__name__ == "_ExtraFields_Allocation":
            yield node
        yield from _allocations(node.children)


def _cpu_peak_bytes(call: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted(
        (node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size)
        for node in _allocations(prof.profiler.kineto_results.experimental_event_tree())
    )
    # Count only blocks the call allocated: frees of older blocks (the previous benchmark's
    # tensors, collected by the garbage collector during this call) must not lower the total.
    live: dict[int, int] = {}
    held = peak = 0
    for _, ptr, size in events:
        if size > 0:
            live[ptr] = size
            held += size
            peak = max(peak, held)
        elif ptr in live:
            held -= live.pop(ptr)
    return peak


def _cuda_peak_bytes(call: Callable[[], Any], device: torch.device) -> int:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - before)


def peak_bytes(call: Callable[[], Any], device: torch.device) -> int:
    """Return the most bytes of tensor memory ``call()`` held at once on ``device``."""
    if device.type == "cuda":
        return _cuda_peak_bytes(call, device)
    return _cpu_peak_bytes(call)


@pytest.fixture(scope="session")
def measure_peak() -> Callable[[Callable[[], Any], torch.device], int]:
    """Return `peak_bytes` (test modules cannot import this conftest under importlib mode)."""
    return peak_bytes


@pytest.fixture
def ci_profile() -> Iterator[None]:
    """Load Hypothesis's derandomized ``ci`` profile (the plugin's), then restore the active one."""
    previous = settings._current_profile  # Hypothesis has no public getter
    settings.load_profile("ci")
    yield
    if previous is not None:
        settings.load_profile(previous)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def pytest_benchmark_update_json(
    config: pytest.Config, benchmarks: list[Any], output_json: dict[str, Any]
) -> None:
    """Add what RESULTS.md needs besides the timings: versions, devices, load, methods."""
    cuda = torch.cuda.is_available()
    output_json["linattn"] = {
        "versions": {"python": platform.python_version()}
        | {name: _version(name) for name in VERSIONED},
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
        "loadavg_start": _LOAD_AT_START,
        "loadavg_end": list(os.getloadavg()),
        "memory_method": MEMORY_METHOD,
    }
