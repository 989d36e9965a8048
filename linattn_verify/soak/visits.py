# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's visits: one Hypothesis search of one property on one kernel, round-robin."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    Invocation,
    PairState,
    SoakFailure,
    SoakState,
    SoakStateError,
    SoakStopped,
    failures_dir_of,
    load_state,
    save_state,
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
    """

    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
    max_seq_len: int = 32
    max_head_dim: int = 16
    budget: float | None = None
    max_visits: int | None = None
    seed: int | None = None


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


def _key(failure: SoakFailure) -> tuple[bool, str]:
    """What makes a failure distinct: its case; for a harness error, the error."""
    return (failure.error, failure.message if failure.error else failure.case)


def visit(
    pair: PairState,
    kernel: Kernel,
    prop: Callable[..., Any],
    *,
    settings: SoakSettings,
    base_seed: int,
    failures_dir: Path,
) -> VisitOutcome:
    """Search ``prop`` on ``kernel`` once more: one Hypothesis search of a fresh seed.

    The search is `checking.check_kernel`'s (`checking.search_property`): every case goes
    through `running.check_property`, a failure is shrunk and saved for ``linattn-verify replay`` in
    ``failures_dir/<property>-<kernel>-v<visit>/``. An error of the harness itself (an exception
    that is not a property violation) is recorded as a failure with ``error`` set.
    """
    from linattn_verify.checking import search_property

    number = pair.visits + 1
    seed = visit_seed(base_seed, kernel.name, pair.property, number)
    folder = failures_dir / f"{_safe(pair.property)}-{_safe(kernel.name)}-v{number}"
    seen = _Seen()
    started = time.perf_counter()
    fresh = PropertyVerdict(kernel.name, pair.property, "held")
    failure: SoakFailure | None = None
    try:
        strategy = family_of(kernel).cases_for(
            kernel,
            max_seq_len=settings.max_seq_len,
            max_head_dim=settings.max_head_dim,
            realistic=False,
        )
        verdict = search_property(
            prop,
            kernel,
            strategy,
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
            examples_before=pair.examples,
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
                examples_before=pair.examples,
                found_at=utc_now(),
            )
    seconds = time.perf_counter() - started
    known = failure is not None and _key(failure) in {_key(f) for f in pair.failures}
    if known and folder.is_dir():
        shutil.rmtree(folder)  # this visit's copy of a case already recorded
    new_failure = None if known else failure
    updated = replace(
        pair,
        visits=number,
        examples=pair.examples + verdict.examples,
        not_applicable=pair.not_applicable + verdict.not_applicable,
        within_rounding=pair.within_rounding + verdict.within_rounding,
        seconds=round(pair.seconds + seconds, 3),
        failures=pair.failures if new_failure is None else (*pair.failures, new_failure),
    )
    return VisitOutcome(updated, verdict.examples, failure is not None, new_failure)


def soak(
    kernels: Sequence[Any],
    properties: Mapping[str, Callable[..., Any]]
    | Callable[[Any], Mapping[str, Callable[..., Any]]],
    state_path: Path,
    settings: SoakSettings,
    *,
    say: Callable[[str], None] = lambda line: None,
    stopper: Stopper | None = None,
    visited: Callable[[VisitOutcome, float], None] | None = None,
) -> SoakState:
    """Visit every (kernel, property) round-robin until the budget; keep score in ``state_path``.

    Resumes from the state at ``state_path`` when there is one. The state is saved after every
    visit; ``say`` gets a progress line per visit (`progress_line`), and ``visited`` the visit's
    outcome and the seconds since the soak started (a progress bar's news). Stops when
    ``settings.budget`` seconds have passed or ``settings.max_visits`` visits are done
    (neither: until ``stopper`` is told to).

    Raises:
        SoakStateError: if the state file cannot be read, or ``settings.seed`` contradicts it.
        InvalidArgument: if there is nothing to visit.
    """
    # The properties of each kernel: the same for all, or chosen per kernel (its family's).
    catalogues = {
        k.name: dict(properties if isinstance(properties, Mapping) else properties(k))
        for k in kernels
    }
    names = list(dict.fromkeys(n for c in catalogues.values() for n in c))
    pairs = [(k, n) for k in kernels for n in catalogues[k.name]]
    if not pairs:
        raise InvalidArgument("Got no kernels or no properties: there is nothing to soak.")
    from linattn_verify._device import versions

    stopper = stopper or Stopper()
    state = load_state(state_path)
    if state is None:
        state = SoakState(seed=settings.seed or 0)
    elif settings.seed is not None and settings.seed != state.seed:
        raise SoakStateError(
            f"Got --seed {settings.seed}, but --state {state_path} was started with seed "
            f"{state.seed}: resume without --seed, or start another state file."
        )
    failures_dir = failures_dir_of(state_path)
    invocation = Invocation(
        started=utc_now(),
        versions=versions(),
        settings={
            "kernels": [k.name for k in kernels],
            "properties": names,
            "chunk_examples": settings.chunk_examples,
            "max_seq_len": settings.max_seq_len,
            "max_head_dim": settings.max_head_dim,
            "budget": settings.budget,
            "max_visits": settings.max_visits,
        },
    )
    state = state.with_invocation(invocation, new=True)
    save_state(state, state_path)
    started = time.perf_counter()
    reason = "running"
    while True:
        elapsed = time.perf_counter() - started
        if stopper.requested is not None:
            reason = stopper.requested
        elif settings.budget is not None and elapsed >= settings.budget:
            reason = "budget"
        elif settings.max_visits is not None and invocation.visits >= settings.max_visits:
            reason = "max_visits"
        if reason != "running":
            break
        current = state
        kernel, name = min(pairs, key=lambda p: current.pair(p[0].name, p[1]).visits)
        try:
            with stopper.visiting():
                outcome = visit(
                    state.pair(kernel.name, name),
                    kernel,
                    catalogues[kernel.name][name],
                    settings=settings,
                    base_seed=state.seed,
                    failures_dir=failures_dir,
                )
        except SoakStopped as stop:
            reason = str(stop)
            break
        invocation = replace(
            invocation,
            seconds=round(time.perf_counter() - started, 3),
            visits=invocation.visits + 1,
        )
        state = state.with_pair(outcome.pair).with_invocation(invocation)
        save_state(state, state_path)
        say(progress_line(outcome, invocation.seconds))
        if visited is not None:
            visited(outcome, invocation.seconds)
    invocation = replace(
        invocation, seconds=round(time.perf_counter() - started, 3), stopped=reason
    )
    state = state.with_invocation(invocation)
    save_state(state, state_path)
    return state


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


__all__ = ["SoakSettings", "Stopper", "VisitOutcome", "progress_line", "soak", "summary", "visit"]
