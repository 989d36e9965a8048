# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's visits: one Hypothesis search of one property on one kernel, and its reporting."""

from __future__ import annotations

import contextlib
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from linattn_verify.core.family import family_of
from linattn_verify.diagnosis import DIAGNOSIS_SECONDS
from linattn_verify.errors import InvalidArgument
from linattn_verify.results import CaseRecord, PropertyVerdict

if TYPE_CHECKING:
    from linattn_verify.checking import CheckListener
    from linattn_verify.linear_attn.kernel import Kernel

from linattn_verify.soak.state import (
    DEFAULT_CHUNK_EXAMPLES,
    PairState,
    SoakFailure,
    SoakState,
    SoakStopped,
    VisitResult,
    utc_now,
    visit_seed,
)


class Stopper:
    """Turns SIGINT and SIGTERM into a clean stop.

    Between visits a signal only sets `requested`; the soak stops before the next visit. During
    a visit (`visiting`) it raises `SoakStopped`, abandoning the visit, so a stop never waits for
    a long search.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None
        self._in_visit = False

    def request(self, reason: str) -> None:
        """Ask the soak to stop (what a signal does); raise `SoakStopped` inside a visit."""
        self.requested = reason
        if self._in_visit:
            self._in_visit = False
            raise SoakStopped(reason)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Handle SIGINT and SIGTERM for the block (the main thread only), then restore."""
        previous: dict[signal.Signals, Any] = {}
        try:
            for sig in self.SIGNALS:
                previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: signals stay as they were
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def visiting(self) -> Iterator[None]:
        """Mark a visit: a signal inside it raises `SoakStopped`."""
        if self.requested is not None:
            raise SoakStopped(self.requested)
        self._in_visit = True
        try:
            yield
        finally:
            self._in_visit = False


@dataclass(frozen=True)
class SoakSettings:
    """How a soak searches.

    Attributes:
        chunk_examples: Examples in one visit's Hypothesis search.
        max_seq_len: Longest T drawn.
        max_head_dim: Largest K and V drawn.
        budget: Wall-clock seconds for this invocation (no new visit starts after), or `None`.
        max_visits: Visits for this invocation, or `None`.
        seed: Base seed of a new state (`None`: 0); a resumed state keeps its own.
        example_db: The shared example database, as ``--example-db`` names it (a directory,
            ``redis://host[:port][/db]``; `linattn_verify.example_db`): failures found by
            any worker sharing it are replayed first (`linattn_verify.soak.replay_first`).
            `None` or ``none``: no database. The command line's default is the directory
            beside the state (`example_db.default_example_db`).
    """

    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
    max_seq_len: int = 32
    max_head_dim: int = 16
    budget: float | None = None
    max_visits: int | None = None
    seed: int | None = None
    # A string, not an open database: the settings travel to worker processes.
    example_db: str | None = None


@dataclass(frozen=True)
class VisitOutcome:
    """What one visit did.

    Attributes:
        pair: The pair's state after the visit.
        examples: Examples the visit tried.
        failed: Whether the visit failed.
        new_failure: The failure it recorded, or `None` (none, or a case already recorded).
    """

    pair: PairState
    examples: int
    failed: bool
    new_failure: SoakFailure | None


@dataclass
class _Seen:
    """What a visit's listener saw: cases started, the last one, the last failing record."""

    cases: int = 0
    last_case: str = ""
    last_failure: CaseRecord | None = None


def _listener(seen: _Seen) -> CheckListener:
    """A `CheckListener` filling ``seen`` (the last failing record is the shrunk minimal case)."""
    from linattn_verify.checking import CheckListener

    class Watcher(CheckListener):
        def case_started(self, property: str, case: str) -> None:
            seen.cases += 1
            seen.last_case = case

        def case_finished(self, record: CaseRecord) -> None:
            if not record.ok:
                seen.last_failure = record

    return Watcher()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "unnamed"


def visit_folder(failures_dir: Path, kernel: str, prop: str, number: int) -> Path:
    """Where visit ``number`` of (kernel, prop) saves its failing case, in ``failures_dir``."""
    return failures_dir / f"{_safe(prop)}-{_safe(kernel)}-v{number}"


def visit(
    kernel: Kernel,
    name: str,
    prop: Callable[..., Any],
    *,
    number: int,
    settings: SoakSettings,
    base_seed: int,
    failures_dir: Path,
) -> VisitResult:
    """Search property ``name`` (``prop``) on ``kernel`` for the pair's visit ``number``.

    One Hypothesis search of the visit's own seed (`visit_seed`): `checking.check_kernel`'s
    (`checking.search_property`), so every case goes through `running.check_property`, and a
    failure is shrunk and saved for ``linattn-verify replay`` in `visit_folder`. With a shared
    example database (``settings.example_db``), the pair's failures saved there that this
    process has not replayed come first (`soak.replay_first`): one that still fails is the
    visit's failure, and the seed is not searched. An error of the harness itself (an exception
    that is not a property violation) is returned as a failure with ``error`` set. Nothing is
    recorded: the caller counts the result (`SoakStore.record`), once, however many times the
    visit ran.

    Raises:
        InvalidArgument: if ``number`` is not an int >= 1.
    """
    from linattn_verify.example_db import database_key, open_example_db
    from linattn_verify.soak.replay_first import replay_then_search

    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise InvalidArgument(f"Expected an int >= 1 but got number={number!r}.")
    seed = visit_seed(base_seed, kernel.name, name, number)
    folder = visit_folder(failures_dir, kernel.name, name, number)
    seen = _Seen()
    started = time.perf_counter()
    fresh = PropertyVerdict(kernel.name, name, "held")
    failure: SoakFailure | None = None
    try:
        strategy = family_of(kernel).cases_for(
            kernel,
            max_seq_len=settings.max_seq_len,
            max_head_dim=settings.max_head_dim,
            realistic=False,
        )
        database = None if settings.example_db is None else open_example_db(settings.example_db)
        verdict = replay_then_search(
            prop,
            kernel,
            strategy,
            database=database,
            key=database_key(family_of(kernel).name, kernel.name, name),
            seed=seed,
            examples=settings.chunk_examples,
            verdict=fresh,
            failures_dir=folder,
            started=started,
            listener=_listener(seen),
            diagnosis_seconds=DIAGNOSIS_SECONDS,
        )
    except Exception as exc:  # the harness failed, not the kernel: record it, go on
        verdict = replace(fresh, examples=seen.cases)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        failure = SoakFailure(
            visit=number,
            seed=seed,
            case=seen.last_case,
            message=f"harness error: {detail}{where}",
            failure_file=None,
            examples_before=0,
            found_at=utc_now(),
            error=True,
        )
    else:
        if not verdict.ok:
            last = seen.last_failure
            failure = SoakFailure(
                visit=number,
                seed=seed,
                case=last.case if last is not None else verdict.message.splitlines()[0],
                message=verdict.message,
                failure_file=verdict.failure_file,
                examples_before=0,
                found_at=utc_now(),
            )
    return VisitResult(
        kernel=kernel.name,
        property=name,
        number=number,
        seed=seed,
        examples=verdict.examples,
        not_applicable=verdict.not_applicable,
        within_rounding=verdict.within_rounding,
        seconds=time.perf_counter() - started,
        failure=failure,
        folder=str(folder) if folder.is_dir() else None,
    )


def progress_line(outcome: VisitOutcome, elapsed: float) -> str:
    """One line saying how a visit went."""
    pair = outcome.pair
    if not outcome.failed:
        how = "held" if pair.ok else f"held this visit ({len(pair.failures)} failed before)"
    elif outcome.new_failure is None:
        how = "FAILED again (a case already recorded)"
    elif outcome.new_failure.error:
        how = "HARNESS ERROR (recorded)"
    else:
        how = f"FAILED (new case #{len(pair.failures)}: {outcome.new_failure.replay})"
    return (
        f"[{elapsed:8.1f} s] {pair.kernel:16s} {pair.property:30s} visit {pair.visits:4d} "
        f"+{outcome.examples:<3d} -> {pair.examples:6d} examples  {how}"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def summary(state: SoakState, state_path: Path) -> str:
    """The table of a soak: examples per (kernel, property), wall time, failures with replays."""
    kw = max([len("kernel"), *(len(p.kernel) for p in state.pairs)])
    pw = max([len("property"), *(len(p.property) for p in state.pairs)])
    rows = [
        f"{'kernel':{kw}s} {'property':{pw}s} {'visits':>6s} {'examples':>8s} {'n/a':>6s} "
        f"{'seconds':>8s}  status"
    ]
    for pair in sorted(state.pairs, key=lambda p: p.kernel):  # stable: catalogue order
        count = len(pair.failures)
        status = f"FAILED ({count} case{'s' * (count > 1)})" if count else pair.verdict().status
        rows.append(
            f"{pair.kernel:{kw}s} {pair.property:{pw}s} {pair.visits:6d} {pair.examples:8d} "
            f"{pair.not_applicable:6d} {pair.seconds:8.1f}  {status}"
        )
    examples = sum(p.examples for p in state.pairs)
    last = state.invocations[-1] if state.invocations else None
    stopped = "" if last is None else f"; last stopped: {last.stopped}"
    rows.append(
        f"\n{examples} examples over {len(state.pairs)} (kernel, property) pairs, "
        f"{len(state.invocations)} invocation{'s' * (len(state.invocations) != 1)}, "
        f"{_duration(state.wall_seconds)} wall time{stopped} (state {state_path})"
    )
    failures = [(p, f) for p in state.pairs for f in p.failures]
    if not failures:
        rows.append("No failures.")
    for pair, failure in failures:
        head = failure.message.splitlines()[0] if failure.message else ""
        kind = "HARNESS ERROR" if failure.error else "FAILED"
        rows.append(
            f"\n{kind} {pair.property} on {pair.kernel} (visit {failure.visit}, seed "
            f"{failure.seed}, after {failure.examples_before} examples, {failure.found_at})\n"
            f"  {head}"
        )
        if failure.case and not failure.error:
            rows.append(f"  case: {failure.case}")
        if failure.replay:
            rows.append(f"  Replay: {failure.replay}")
    return "\n".join(rows)


__all__ = [
    "SoakSettings",
    "Stopper",
    "VisitOutcome",
    "progress_line",
    "summary",
    "visit",
    "visit_folder",
]
