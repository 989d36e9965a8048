# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Check a kernel: search the property catalogue for a counterexample within a time budget.

`check_kernel` runs every per-kernel property the kernel's declared capabilities allow under
Hypothesis, in rounds: each round gives every property that still holds a fresh search of a few
more examples than the last, so a bug that only one property sees is found early rather than
after the others have used their share of the budget. A failure is shrunk to a minimal case and
saved for ``linattn-verify replay``. A kernel that raises, returns the wrong thing, returns NaN
or hangs past the per-call timeout fails a property; it never crashes the check.

What happens is reported to a `CheckListener` as it happens (progress lines, each case's record,
each property's outcome), so a caller can write results while the check runs, and the process
isolation of `linattn_verify.isolation` can stream them out of a child process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.kernel import Kernel
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

    def case_finished(self, record: dict[str, Any]) -> None:
        """One property ran on one case: its `linattn_verify._runner.case_record`."""

    def outcome(self, outcome: PropertyOutcome) -> None:
        """A property's outcome so far (after each of its searches)."""


@dataclass
class PropertyOutcome:
    """What the search found for one property.

    Attributes:
        property: The property's name.
        ok: Whether it held on every example tried.
        examples: Cases tried (shrinking included).
        seconds: Time spent searching it.
        message: The failure report (property, case, worst element, bound, replay command).
        failure_file: The saved minimal failing case, for ``linattn-verify replay``.
        first_failure_seconds: Seconds from the start of the check to the first failing example.
        skipped: Cases on which the property did not apply.
        not_run: Never searched: the check stopped at an earlier failure (``fail_fast``).
    """

    property: str
    ok: bool = True
    examples: int = 0
    seconds: float = 0.0
    message: str = ""
    failure_file: str | None = None
    first_failure_seconds: float | None = None
    skipped: int = 0
    not_run: bool = False

    def status(self) -> str:
        """``FAILED``, ``held``, ``n/a`` (never applied) or ``not run``."""
        if not self.ok:
            return "FAILED"
        if self.not_run:
            return "not run"
        return "n/a" if self.skipped == self.examples else "held"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``status``)."""
        return {**self.__dict__, "seconds": round(self.seconds, 3), "status": self.status()}


@dataclass
class CheckReport:
    """The outcome of `check_kernel`."""

    kernel: str
    outcomes: list[PropertyOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every property held on every example tried."""
        return all(o.ok for o in self.outcomes)

    @property
    def first_failure_seconds(self) -> float | None:
        """Seconds to the first failing example of any property (`None` if none failed)."""
        times = [o.first_failure_seconds for o in self.outcomes if o.first_failure_seconds]
        return min(times, default=None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kernel": self.kernel,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "first_failure_seconds": self.first_failure_seconds,
            "properties": [o.to_json() for o in self.outcomes],
        }


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
    outcomes = {name: PropertyOutcome(property=name) for name in properties}
    strategy = kernel_specs(
        kernel, max_seq_len=search.max_seq_len, max_head_dim=search.max_head_dim
    )
    stop = False
    round_ = 0
    while not stop:
        pending = [name for name, outcome in outcomes.items() if outcome.ok]
        if not pending:
            break
        examples = FIRST_ROUND_EXAMPLES * (round_ + 1)
        for name in pending:
            if round_ > 0 and time.perf_counter() - started >= budget:
                stop = True
                break
            outcome = outcomes[name]
            search_started = time.perf_counter()
            index = list(outcomes).index(name)
            _search(
                properties[name],
                kernel,
                strategy,
                seed=search.seed * 1_000_003 + round_ * 1009 + index,
                examples=examples,
                outcome=outcome,
                failures_dir=search.failures_dir,
                started=started,
                listener=listener,
            )
            outcome.seconds += time.perf_counter() - search_started
            listener.outcome(outcome)
            if not outcome.ok:
                listener.progress(
                    f"  {name:32s} FAILED after {outcome.examples} examples "
                    f"({outcome.first_failure_seconds:.1f} s into the check)"
                )
                if search.fail_fast:
                    stop = True
                    break
        else:
            elapsed = time.perf_counter() - started
            held = sum(o.ok for o in outcomes.values())
            listener.progress(
                f"  round {round_ + 1}: {examples} examples per property, {held}/{len(outcomes)} "
                f"holding, {elapsed:.1f} s"
            )
            stop = elapsed >= budget
        round_ += 1
    for outcome in outcomes.values():
        outcome.not_run = outcome.ok and outcome.examples == 0
        listener.progress(
            f"  {outcome.property:32s} {outcome.status():7s} {outcome.examples:4d} examples "
            f"{outcome.seconds:6.1f} s"
        )
    return CheckReport(
        kernel=kernel.name,
        outcomes=list(outcomes.values()),
        seconds=time.perf_counter() - started,
    )


def _search(
    prop: Callable[..., Any],
    kernel: Kernel,
    strategy: Any,
    *,
    seed: int,
    examples: int,
    outcome: PropertyOutcome,
    failures_dir: Path,
    started: float,
    listener: CheckListener,
) -> None:
    """One Hypothesis search of ``examples`` cases; records a (shrunk) failure in ``outcome``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from linattn_verify._runner import case_record
    from linattn_verify.failures import check as run_check

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
        outcome.examples += 1
        listener.case_started(outcome.property, repr(spec))
        case_started = time.perf_counter()
        try:
            result = run_check(prop, spec, kernel, directory=failures_dir)
        except PropertyViolation as exc:
            if outcome.first_failure_seconds is None:
                outcome.first_failure_seconds = round(time.perf_counter() - started, 3)
            if exc.result is not None:
                record = case_record(kernel, spec, exc.result, time.perf_counter() - case_started)
                listener.case_finished({**record, "failure_file": exc.failure_file})
            raise
        outcome.skipped += int(result.skipped is not None)
        seconds = time.perf_counter() - case_started
        listener.case_finished(case_record(kernel, spec, result, seconds))

    try:
        search()
    except PropertyViolation as exc:
        # Hypothesis re-raises the shrunk example's violation: that is the minimal case.
        _record_failure(outcome, exc)
    except Exception as exc:
        # Hypothesis raises an exception group (FlakyFailure) when a failing example passed on
        # a rerun: a nondeterministic kernel. The violations inside still fail the property.
        violation = _first_violation(exc)
        if violation is None:
            raise
        _record_failure(outcome, violation, note=f"Hypothesis: {exc}")


def _first_violation(exc: BaseException) -> PropertyViolation | None:
    if isinstance(exc, PropertyViolation):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_violation(inner)
        if found is not None:
            return found
    return None


def _record_failure(outcome: PropertyOutcome, exc: BaseException, *, note: str = "") -> None:
    outcome.ok = False
    outcome.message = f"{exc}\n{note}" if note else str(exc)
    outcome.failure_file = getattr(exc, "failure_file", None)


__all__ = [
    "CheckListener",
    "CheckReport",
    "KernelTimeout",
    "PropertyOutcome",
    "SearchSettings",
    "check_kernel",
    "load_target",
    "with_timeout",
]
