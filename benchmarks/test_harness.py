# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Harness speed: property checks per second, and the bug zoo's time to first failure.

Not part of the test suite; run with ``python benchmarks/results.py`` or

    pytest benchmarks/test_harness.py --benchmark-only

* Property checks: each catalogue property (``registered_properties()``) on the fixed `SPECS`
  against ``torch/chunk`` (float32 torch) and ``triton/chunk`` (the Triton interpreter on a CPU).
  A round checks every spec once; checks per second = specs the property applied to / median
  round time. Specs a property does not apply to (an unnormalized case for a normalizer
  property) return at once and are reported as skipped.
* Time to first failure: `tests/zoo`'s own search (``test_zoo.search_catalogue``: every example
  runs the whole catalogue, a failure counts when the correct twin holds) on each broken kernel,
  under the derandomized ``ci`` profile, as the test suite runs it. A round is one search.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from linattn_verify.core.loading import import_file
from linattn_verify.errors import PropertyViolation
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import PropertyFunction, get_kernel, registered_properties

ZOO_DIR = Path(__file__).resolve().parents[1] / "tests" / "zoo"

SPECS = (
    ProblemSpec(
        B=1, T=21, H=2, K=4, V=3, dtype="float32", feature_map="identity", normalize=False,
        eps=0.0, scale=None, values="normal", decay="mild", initial_state=True,
        output_final_state=True, segments=None, seed=7,
    ),
    ProblemSpec(
        B=1, T=37, H=2, K=8, V=8, dtype="float32", feature_map="elu1", normalize=True,
        eps=1e-6, scale=None, values="normal", decay="none", initial_state=True,
        output_final_state=True, segments=None, seed=3,
    ),
    ProblemSpec(
        B=2, T=16, H=1, K=6, V=5, dtype="bfloat16", feature_map="relu", normalize=False,
        eps=0.0, scale=0.5, values="normal", decay="none", initial_state=False,
        output_final_state=True, segments=None, seed=5,
    ),
    ProblemSpec(
        B=1, T=16, H=2, K=4, V=4, dtype="float16", feature_map="elu1", normalize=True,
        eps=1e-2, scale=None, values="normal", decay="steep", initial_state=False,
        output_final_state=False, segments=(5, 0, 11), seed=11,
    ),
)  # fmt: skip
"""Four cases that between them let every property apply: dense and packed, normalized and
not, fp32, bf16 and fp16, with and without decay and states."""

PROPERTY_KERNELS = ("torch/chunk", "triton/chunk")
PROPERTIES = tuple(registered_properties())


def load_by_path(name: str, path: Path) -> ModuleType:
    """Import ``path`` as module ``name`` (the tests use importlib mode: no package to import)."""
    if name in sys.modules:
        return sys.modules[name]
    return import_file(path, name)


ZOO = load_by_path("linattn_bench_zoo_kernels", ZOO_DIR / "bugs.py").ZOO
ZOO_SEARCH = load_by_path("linattn_bench_zoo_search", ZOO_DIR / "test_zoo.py")


@pytest.mark.parametrize("prop", PROPERTIES)
@pytest.mark.parametrize("kernel_name", PROPERTY_KERNELS)
def test_property_checks(benchmark: BenchmarkFixture, kernel_name: str, prop: str) -> None:
    kernel = get_kernel(kernel_name)
    check: PropertyFunction = registered_properties()[prop]

    def round_of_checks() -> list[Any]:
        return [check(spec, kernel) for spec in SPECS]

    results = benchmark.pedantic(round_of_checks, rounds=3, iterations=1, warmup_rounds=1)  # type: ignore[no-untyped-call]
    failed = [r.report() for r in results if not r.ok]
    assert not failed, failed
    skipped = sorted({r.reason for r in results if r.status == "not_applicable"})
    benchmark.group = f"property checks on {kernel_name}"
    benchmark.extra_info.update(
        suite="property_checks",
        kernel=kernel_name,
        property=prop,
        specs=len(SPECS),
        checked=sum(r.status != "not_applicable" for r in results),
        skipped_reasons=skipped,
    )


@pytest.mark.usefixtures("ci_profile")
@pytest.mark.parametrize("entry", ZOO, ids=[e.broken.name.removeprefix("zoo/") for e in ZOO])
def test_time_to_first_failure(benchmark: BenchmarkFixture, entry: Any) -> None:
    logs: list[dict[str, Any]] = []

    def search() -> None:
        log: dict[str, Any] = {}
        logs.append(log)
        with pytest.raises(PropertyViolation):
            ZOO_SEARCH.search_catalogue(entry.broken, entry.twin, log, entry.extra)()

    benchmark.pedantic(search, rounds=3, iterations=1)  # type: ignore[no-untyped-call]
    # Derandomized: every round searched the same examples and failed on the same one.
    first = logs[-1]
    assert first["properties"], f"{entry.broken.name} failed without a property the twin holds"
    benchmark.group = "bug zoo: time to first failure"
    benchmark.extra_info.update(
        suite="zoo",
        kernel=entry.broken.name,
        bug_class=entry.bug_class,
        mirrors=entry.mirrors,
        examples=first["examples"],
        caught_by=first["properties"],
        seconds_to_failure=[log["seconds"] for log in logs],
    )
