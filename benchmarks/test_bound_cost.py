# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What judging one case costs against T: the float64 oracles and bounds of each family.

Not part of the test suite; run with ``python benchmarks/results.py`` or

    pytest benchmarks/test_bound_cost.py --benchmark-only

One case per family, gate and recipe (`bound_cases.py`: H = 2, K = V = 64, fp32): the forward
bounds then the gradient bounds, each with its oracle, on one CPU thread. T doubles up to 65,536
until a case would pass `LIMIT_SECONDS` (the growth measured so far, extrapolated), so the suite
fits a few minutes; `results.py` fits each line's growth exponent (issue #27 asks for 1 and at
most 1.15 between T = 4096 and 65,536). Each case also records one float64 reference forward
of its problem (``reference_seconds``, untimed by the benchmark): judging costs that many
reference forwards. ``peak_rss_gb`` is the process's peak resident memory during the case
(Linux: the peak is reset before it, once the memory the earlier cases freed is given back), the
process's own baseline (torch, the inputs) included.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bound_cases import CASES, REFERENCES

LIMIT_SECONDS = 90.0
"""A case predicted to take longer than this is skipped (with the prediction as its reason)."""

SEQ_LENS = tuple(2**n for n in range(7, 17))  # 128 ... 65,536
LINES = [
    ("linear_attn", "scalar", "chunk"),
    ("linear_attn", "vector", "chunk"),
    ("delta", "none", "recurrent"),
    ("delta", "scalar", "recurrent"),
    ("delta", "scalar", "chunk"),
]

_SECONDS: dict[tuple[str, str, str], list[float]] = {}
_STOPPED: set[tuple[str, str, str]] = set()


def _predicted(line: tuple[str, str, str]) -> float:
    """The next size's time (T doubles): the last time grown as by the last doubling."""
    times = _SECONDS.get(line, [])
    if len(times) < 2:
        return 0.0
    return times[-1] * max(times[-1] / times[-2], 1.0)


@pytest.mark.parametrize("T", SEQ_LENS)
@pytest.mark.parametrize(("family", "gate", "form"), LINES, ids=["-".join(x) for x in LINES])
def test_bound_cost(benchmark: BenchmarkFixture, family: str, gate: str, form: str, T: int) -> None:
    line = (family, gate, form)
    guess = _predicted(line)
    if line in _STOPPED or guess > LIMIT_SECONDS:
        _STOPPED.add(line)
        pytest.skip(f"predicted past {LIMIT_SECONDS:g} s from the smaller T")
    make, _ = CASES[family]
    if line not in _SECONDS:
        make(64, gate, "cpu", form)()  # untimed: first-call imports (torch.func's jvp rules)
    reference = REFERENCES[family](T, gate, "cpu")
    started = time.perf_counter()
    reference()
    reference_seconds = time.perf_counter() - started
    # Its float64 problem is not the case's: held through the case, it would count in the
    # case's peak memory (268 MB at T = 65,536).
    del reference
    run = make(T, gate, "cpu", form)
    benchmark.group = f"bound cost {family} {gate} {form}"
    benchmark.extra_info.update(
        suite="bound_cost",
        family=family,
        gate=gate,
        form=form,
        T=T,
        reference_seconds=reference_seconds,
    )
    gc.collect()
    _return_freed_memory()
    reset = _reset_peak_rss()
    start = time.perf_counter()
    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)  # type: ignore[no-untyped-call]
    _SECONDS.setdefault(line, []).append(time.perf_counter() - start)
    if reset:
        benchmark.extra_info["peak_rss_gb"] = _peak_rss_kb() / 1e6


def _return_freed_memory() -> None:
    """Give the memory the earlier cases freed back to the system (glibc's ``malloc_trim``).

    The allocator keeps freed blocks in its heap; the peak is reset to the resident size, so
    without this a case's peak would count what the cases before it left behind. Elsewhere
    (not glibc) nothing happens.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak_rss() -> bool:
    """Reset the process's peak RSS (Linux >= 4.0: ``5`` to clear_refs); False where not."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _peak_rss_kb() > 0


def _peak_rss_kb() -> int:
    """VmHWM of /proc/self/status in kB (0 where unreadable)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(x.split()[1]) for x in lines if x.startswith("VmHWM:")), 0)
