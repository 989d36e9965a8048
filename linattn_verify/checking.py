# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Check a kernel: search the property catalogue for a counterexample within a time budget.

`check_kernel` runs every per-kernel property the kernel's declared capabilities allow under
Hypothesis, in rounds: each round gives every property that still holds a fresh search of a few
more examples than the last, so a bug that only one property sees is found early rather than
after the others have used their share of the budget. A failure is shrunk to a minimal case and
saved for ``linattn-verify replay``. A kernel that raises, returns the wrong thing, returns NaN
or hangs past the per-call timeout fails a property; it never crashes the check.

What happens is reported to a `CheckListener` as it happens (progress lines, each case's
`CaseRecord`, each property's `PropertyVerdict`), so a caller can write results while the check
runs, and the process isolation of `linattn_verify.isolation` can stream them out of a child
process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.results import CaseRecord, PropertyVerdict
from linattn_verify.targets import KernelTimeout, load_target, with_timeout

FIRST_ROUND_EXAMPLES = 5
"""Examples per property in the first round; round r searches (r + 1) times as many."""


@dataclass(frozen=True)
class SearchSettings:
    """How `check_kernel` searches: everything but the kernel, its properties and the listener.

    Attributes:
        budget: Wall-clock seconds for the whole check.
        failures_dir: Where failing cases are saved.
        seed: Seed of the search.
        max_seq_len: Longest T drawn.
        max_head_dim: Largest K and V drawn.
        fail_fast: Stop at the first property that fails.
    """

    budget: float
    failures_dir: Path
    seed: int = 0
    max_seq_len: int = 32
    max_head_dim: int = 16
    fail_fast: bool = False


class CheckListener:
    """Receives what `check_kernel` finds while it runs; every method does nothing by default."""

    def progress(self, line: str) -> None:
        """A line for the user."""

    def case_started(self, property: str, case: str) -> None:
        """``property`` is about to run on ``case`` (a spec's repr)."""

    def case_finished(self, record: CaseRecord) -> None:
        """One property ran on one case."""

    def verdict(self, verdict: PropertyVerdict) -> None:
        """A property's verdict so far (after each of its searches)."""


@dataclass(frozen=True)
class CheckReport:
    """The outcome of `check_kernel`: one verdict per property, in catalogue order."""

    kernel: str
    verdicts: tuple[PropertyVerdict, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every property held on every example tried."""
        return all(v.ok for v in self.verdicts)

    @property
    def first_failure_seconds(self) -> float | None:
        """Seconds to the first failing example of any property (`None` if none failed)."""
        times = [v.first_failure_seconds for v in self.verdicts if v.first_failure_seconds]
        return min(times, default=None)


def check_kernel(
    kernel: Kernel,
    properties: Mapping[str, Callable[..., Any]],
    search: SearchSettings,
    *,
    listener: CheckListener | None = None,
) -> CheckReport:
    """Search every property for a counterexample until ``search.budget`` seconds are spent.

    Rounds: round r gives each property that still holds one Hypothesis search of
    ``FIRST_ROUND_EXAMPLES * (r + 1)`` cases, seeded from ``search.seed``, the round and the
    property, so the check is reproducible and later rounds see new cases. The first round always
    runs to the end, whatever the budget, so every property is tried. A failure is shrunk to a
    minimal case and saved in ``search.failures_dir``; with ``search.fail_fast`` the check stops
    there.

    Args:
        kernel: The kernel under test.
        properties: Property functions by name, ``(spec, kernel) -> PropertyResult``.
        search: Budget, seed, case sizes, where failures go, whether to stop at the first.
        listener: Told about progress, cases and outcomes as they happen.

    Raises:
        InvalidArgument: if the budget is not a positive number.
    """
    from linattn_verify.strategies import kernel_specs

    budget = search.budget
    if not (isinstance(budget, int | float) and budget > 0 and math.isfinite(budget)):
        raise InvalidArgument(f"Got budget={budget!r}, but the budget must be a positive number.")
    listener = listener or CheckListener()
    started = time.perf_counter()
    verdicts = {name: PropertyVerdict(kernel.name, name, "held") for name in properties}
    strategy = kernel_specs(
        kernel, max_seq_len=search.max_seq_len, max_head_dim=search.max_head_dim
    )
    stop = False
    round_ = 0
    while not stop:
        pending = [name for name, verdict in verdicts.items() if verdict.ok]
        if not pending:
            break
        examples = FIRST_ROUND_EXAMPLES * (round_ + 1)
        for name in pending:
            if round_ > 0 and time.perf_counter() - started >= budget:
                stop = True
                break
            search_started = time.perf_counter()
            index = list(verdicts).index(name)
            verdict = search_property(
                properties[name],
                kernel,
                strategy,
                seed=search.seed * 1_000_003 + round_ * 1009 + index,
                examples=examples,
                verdict=verdicts[name],
                failures_dir=search.failures_dir,
                started=started,
                listener=listener,
            )
            verdict = replace(
                verdict, seconds=round(verdict.seconds + time.perf_counter() - search_started, 3)
            )
            verdicts[name] = verdict
            listener.verdict(verdict)
            if not verdict.ok:
                listener.progress(
                    f"  {name:32s} FAILED after {verdict.examples} examples "
                    f"({verdict.first_failure_seconds:.1f} s into the check)"
                )
                if search.fail_fast:
                    stop = True
                    break
        else:
            elapsed = time.perf_counter() - started
            held = sum(v.ok for v in verdicts.values())
            listener.progress(
                f"  round {round_ + 1}: {examples} examples per property, {held}/{len(verdicts)} "
                f"holding, {elapsed:.1f} s"
            )
            stop = elapsed >= budget
        round_ += 1
    settled = tuple(v.settled() for v in verdicts.values())
    for verdict in settled:
        listener.progress(
            f"  {verdict.property:32s} {verdict.status:14s} {verdict.examples:4d} examples "
            f"{verdict.seconds:6.1f} s"
        )
    return CheckReport(kernel=kernel.name, verdicts=settled, seconds=time.perf_counter() - started)


def search_property(
    prop: Callable[..., Any],
    kernel: Kernel,
    strategy: Any,
    *,
    seed: int,
    examples: int,
    verdict: PropertyVerdict,
    failures_dir: Path,
    started: float,
    listener: CheckListener,
) -> PropertyVerdict:
    """One Hypothesis search of ``examples`` cases; return ``verdict`` with what it found."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from linattn_verify.running import check_property, record_of

    tally = {"examples": 0, "not_applicable": 0}
    first_failure: list[float] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(spec=strategy)
    def search(spec: Any) -> None:
        tally["examples"] += 1
        listener.case_started(verdict.property, repr(spec))
        case_started = time.perf_counter()
        try:
            result = check_property(prop, spec, kernel, directory=failures_dir)
        except PropertyViolation as exc:
            first_failure.append(round(time.perf_counter() - started, 3))
            if exc.result is not None:
                seconds = time.perf_counter() - case_started
                listener.case_finished(
                    record_of(kernel, spec, exc.result, seconds, exc.failure_file)
                )
            raise
        tally["not_applicable"] += int(result.status == "not_applicable")
        listener.case_finished(record_of(kernel, spec, result, time.perf_counter() - case_started))

    failure: PropertyViolation | None = None
    note = ""
    try:
        search()
    except PropertyViolation as exc:
        # Hypothesis re-raises the shrunk example's violation: that is the minimal case.
        failure = exc
    except Exception as exc:
        # Hypothesis raises an exception group (FlakyFailure) when a failing example passed on
        # a rerun: a nondeterministic kernel. The violations inside still fail the property.
        failure = _first_violation(exc)
        if failure is None:
            raise
        note = f"\nHypothesis: {exc}"
    verdict = replace(
        verdict,
        examples=verdict.examples + tally["examples"],
        not_applicable=verdict.not_applicable + tally["not_applicable"],
    )
    if failure is None:
        return verdict
    return replace(
        verdict,
        status="failed",
        message=f"{failure}{note}",
        failure_file=failure.failure_file,
        first_failure_seconds=verdict.first_failure_seconds or first_failure[0],
    )


def _first_violation(exc: BaseException) -> PropertyViolation | None:
    if isinstance(exc, PropertyViolation):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_violation(inner)
        if found is not None:
            return found
    return None


__all__ = [
    "CheckListener",
    "CheckReport",
    "KernelTimeout",
    "SearchSettings",
    "check_kernel",
    "load_target",
    "search_property",
    "with_timeout",
]
