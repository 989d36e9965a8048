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
from typing import TYPE_CHECKING, Any
from unittest import SkipTest

from linattn_verify.core.draws import seeded_draws
from linattn_verify.core.family import family_of
from linattn_verify.core.loading import KernelTimeout, load_target, with_timeout
from linattn_verify.core.reuse import reusing_results
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.results import CaseRecord, PropertyVerdict
from linattn_verify.triggers import Trigger, near, simplest_case, trigger_of

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

FIRST_ROUND_EXAMPLES = 5
"""Most examples per property in the first round (later rounds size theirs to the time slice)."""

MIN_SEARCH_EXAMPLES = 3
"""Fewest cases a search runs before its time slice can stop it (the budget's end still can)."""

MAX_SEARCH_EXAMPLES = 200
"""Most examples in one search of a later round, however fast the property."""

SLICES = 8
"""The budget is cut into this many slices per property: round r gives each (r + 1) of them."""

REACH_SHARE = 0.4
"""Share of the budget for the size reach (`linattn_verify.reach`), after the first round."""

SHRINK_SHARE = 0.25
"""Longest a failure is shrunk, as a share of the budget (each property's own search)."""

DRAWN_SEQ_LEN = 32
"""Longest T the search draws (the reach goes further); ``max_seq_len`` caps both."""


@dataclass(frozen=True)
class SearchSettings:
    """How `check_kernel` searches: everything but the kernel, its properties and the listener.

    Attributes:
        budget: Wall-clock seconds for the whole check.
        failures_dir: Where failing cases are saved.
        seed: Seed of the search.
        max_seq_len: Longest T anywhere (the search draws up to `DRAWN_SEQ_LEN`, the reach up
            to `linattn_verify.reach.MAX_SEQ_LEN`), or `None` for no cap.
        max_head_dim: Largest K and V the search draws (the reach goes to the kernel's limit).
        fail_fast: Stop at the first property that fails.
        reach: Check the boundary sizes (`linattn_verify.reach`) after the first round.
    """

    budget: float
    failures_dir: Path
    seed: int = 0
    max_seq_len: int | None = None
    max_head_dim: int = 16
    fail_fast: bool = False
    reach: bool = True


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

    The budget is shared by time, not by examples, so that one slow property (a compile, an
    interpreted kernel) cannot eat it. Round r gives each property that still holds one
    Hypothesis search of (r + 1) slices of ``budget / (SLICES * properties)`` seconds, seeded
    from ``search.seed``, the round and the property, so the check is reproducible and later
    rounds see new cases. A search stops starting cases when its slice (or the budget) is spent;
    the first round's searches run `FIRST_ROUND_EXAMPLES` cases at most, later ones as many as
    the property's speed so far fits in the slice (at most `MAX_SEARCH_EXAMPLES`). The first
    round draws realistic values only (the kernel's family's realistic cases, `Family.cases_for`:
    a failure at magnitudes models produce is found before one at extreme magnitudes). The budget
    is wall-clock: past it no case starts in any round, shrinking stops and no diagnosis begins
    (a property the first round never reached is ``not_run``; the case running then finishes,
    each of its kernel calls within the per-call timeout). Then the size reach
    (`linattn_verify.reach`, for the families it knows) checks the boundary sizes for up to
    `REACH_SHARE` of the budget, then the rounds go on with every value family. A failure is
    shrunk to a minimal case (for at most `SHRINK_SHARE` of the budget), diagnosed
    (`linattn_verify.diagnosis`, where the family has one, within the same share) and
    saved in ``search.failures_dir``;
    with ``search.fail_fast`` the check stops there. Otherwise later rounds search a failed
    property too, after the holding ones, away from its failures' triggers
    (`linattn_verify.triggers`): another defect is shrunk on its own and recorded as another
    failure (in ``failure-2/``, ...), until a failure of the simplest case leaves nowhere to look.

    Args:
        kernel: The kernel under test.
        properties: Property functions by name, ``(spec, kernel) -> PropertyResult``.
        search: Budget, seed, case sizes, where failures go, whether to stop at the first.
        listener: Told about progress, cases and outcomes as they happen.

    Raises:
        InvalidArgument: if the budget is not a positive number.
    """
    budget = search.budget
    if not (isinstance(budget, int | float) and budget > 0 and math.isfinite(budget)):
        raise InvalidArgument(f"Got budget={budget!r}, but the budget must be a positive number.")
    listener = listener or CheckListener()
    started = time.perf_counter()
    verdicts = {name: PropertyVerdict(kernel.name, name, "held") for name in properties}
    seen: dict[str, set[str]] = {name: set() for name in properties}
    drawn_T = DRAWN_SEQ_LEN if search.max_seq_len is None else search.max_seq_len
    max_T, max_D = min(drawn_T, DRAWN_SEQ_LEN), search.max_head_dim
    family = family_of(kernel)
    realistic = family.cases_for(kernel, max_seq_len=max_T, max_head_dim=max_D, realistic=True)
    every_family = family.cases_for(kernel, max_seq_len=max_T, max_head_dim=max_D, realistic=False)
    slice_ = budget / (SLICES * max(1, len(properties)))

    def stopped() -> bool:
        return search.fail_fast and not all(v.ok for v in verdicts.values())

    # The triggers of each property's failures: a failed property is searched on away from
    # them (`linattn_verify.triggers`), after the holding ones, until a failure is everywhere.
    triggers: dict[str, list[Trigger]] = {name: [] for name in properties}
    round_ = 0
    while not stopped():
        holding = [name for name, verdict in verdicts.items() if verdict.ok]
        pending = holding + [
            name
            for name in verdicts
            if name not in holding and not any(t.everywhere for t in triggers[name])
        ]
        if not pending:
            break
        seconds = slice_ * (round_ + 1)
        for name in pending:
            search_started = time.perf_counter()
            end = started + budget
            # The budget is wall-clock: past it no search starts, the first round's included
            # (a property never reached is not_run); a case running then finishes.
            if search_started >= end:
                break
            examples = _examples_for(verdicts[name], seconds, round_)
            known = len(triggers[name])
            verdict = search_property(
                properties[name],
                kernel,
                realistic if round_ == 0 else every_family,
                seed=search.seed * 1_000_003 + round_ * 1009 + list(verdicts).index(name),
                examples=examples,
                verdict=verdicts[name],
                failures_dir=search.failures_dir,
                started=started,
                listener=listener,
                deadline=search_started + seconds,
                end=end,
                seen=seen[name],
                shrink_seconds=SHRINK_SHARE * budget,
                diagnosis_seconds=_diagnosis_seconds(budget),
                triggers=triggers[name],
            )
            _settle(verdicts, verdict, search_started, listener)
            if len(triggers[name]) > known:
                _tell_trigger(name, triggers[name], listener)
            if stopped():
                break
        elapsed = time.perf_counter() - started
        listener.progress(
            f"  round {round_ + 1}: {seconds:.2g} s per property, "
            f"{sum(v.ok for v in verdicts.values())}/{len(verdicts)} holding, {elapsed:.1f} s"
        )
        if round_ == 0 and search.reach and family.reach and not stopped():
            reach_seconds = min(REACH_SHARE * budget, budget - elapsed)
            failed = _reach(kernel, properties, search, verdicts, listener, started, reach_seconds)
            for name, spec in failed.items():
                # A failure at a reach size: search on below it (or without its other changes).
                triggers[name].append(trigger_of(spec, simplest_case(every_family)))
        if time.perf_counter() - started >= budget:
            break
        round_ += 1
    settled = tuple(v.settled() for v in verdicts.values())
    for verdict in settled:
        listener.progress(
            f"  {verdict.property:32s} {verdict.status:14s} {verdict.examples:4d} examples "
            f"{verdict.seconds:6.1f} s"
        )
    return CheckReport(kernel=kernel.name, verdicts=settled, seconds=time.perf_counter() - started)


def _examples_for(verdict: PropertyVerdict, seconds: float, round_: int) -> int:
    """How many examples fit in a search of ``seconds``, at the property's speed so far.

    Two more than fit: Hypothesis starts every search from its simplest cases, which earlier
    searches ran already (`search_property` skips them at no cost).
    """
    if round_ == 0 or not verdict.examples:
        return FIRST_ROUND_EXAMPLES
    per_example = max(verdict.seconds / verdict.examples, 1e-3)
    return max(1, min(MAX_SEARCH_EXAMPLES, int(seconds / per_example))) + 2


def _tell_trigger(name: str, triggers: list[Trigger], listener: CheckListener) -> None:
    """Say where a property's search goes on after its latest failure (n-th: ``triggers[-1]``)."""
    latest = triggers[-1]
    line = "" if len(triggers) == 1 else f"failure {len(triggers)}, away from the earlier ones: "
    if latest.everywhere:
        line += "no case is away from it, the search ends"
    else:
        line += f"the search goes on away from {latest.describe()}"
    listener.progress(f"  {name:32s} {line}")


def _settle(
    verdicts: dict[str, PropertyVerdict],
    verdict: PropertyVerdict,
    search_started: float,
    listener: CheckListener,
) -> None:
    """Store a property's verdict after one of its searches (or reach items); tell the listener."""
    seconds = round(verdict.seconds + time.perf_counter() - search_started, 3)
    verdict = replace(verdict, seconds=seconds)
    newly_failed = verdicts[verdict.property].ok and not verdict.ok
    verdicts[verdict.property] = verdict
    listener.verdict(verdict)
    if newly_failed:
        listener.progress(
            f"  {verdict.property:32s} FAILED after {verdict.examples} examples "
            f"({verdict.first_failure_seconds:.1f} s into the check)"
        )


def _reach(
    kernel: Kernel,
    properties: Mapping[str, Callable[..., Any]],
    search: SearchSettings,
    verdicts: dict[str, PropertyVerdict],
    listener: CheckListener,
    started: float,
    seconds: float,
) -> dict[str, Any]:
    """Run the size reach within ``seconds``; each item is one more example of its property.

    Returns the failing case of each property the reach failed.

    The items of a size judge the same case (the backward pass and the forward reruns after the
    forward pass): its forward bounds are computed once (`linattn_verify.core.reuse`).
    """
    with reusing_results():
        from linattn_verify.reach import ReachRun, reach_plan
        from linattn_verify.running import check_property, record_of

        family = family_of(kernel)
        plan = reach_plan(kernel, tuple(properties), max_seq_len=search.max_seq_len)
        run = ReachRun(plan, max(seconds, 0.0))
        reach_started = time.perf_counter()
        reached = {"T": 0, "K": 0, "H": 0, "items": 0}
        failed: dict[str, Any] = {}
        for item in run.walk(lambda: time.perf_counter() - reach_started):
            name = item.property
            if not verdicts[name].ok:
                continue
            prop = properties[name]
            spec = family.reach_case(kernel, item.size, search.seed)
            listener.case_started(name, repr(spec))
            item_started = time.perf_counter()
            verdict = verdicts[name]
            decided = True
            try:
                result = check_property(
                    prop, spec, kernel, directory=search.failures_dir, steer=False
                )
            except PropertyViolation as exc:
                failed[name] = spec
                seconds_left = _left(_diagnosis_seconds(search.budget), started + search.budget)
                if seconds_left > 0:
                    exc = _diagnosed(prop, spec, kernel, exc, search.failures_dir, seconds_left)
                seconds_ = time.perf_counter() - item_started
                listener.case_finished(
                    record_of(kernel, spec, exc.result, seconds_, exc.failure_file)
                )
                verdict = replace(
                    verdict,
                    status="failed",
                    examples=verdict.examples + 1,
                    message=f"{exc}\n(size reach: {item.size.why}"
                    + (f", rerun {item.rerun} of the same case)" if item.rerun else ")"),
                    failure_file=exc.failure_file,
                    first_failure_seconds=round(time.perf_counter() - started, 3),
                )
            else:
                listener.case_finished(
                    record_of(kernel, spec, result, time.perf_counter() - item_started)
                )
                verdict = verdict.counted(result)
                # A bound that certified nothing here certifies nothing at larger sizes either;
                # one that certified some tensors (not a blunt dg) goes on deciding those.
                decided = result.status != "ill_conditioned" or result.certified_any
                if result.status != "not_applicable":
                    reached.update(
                        T=max(reached["T"], spec.T),
                        K=max(reached["K"], spec.K, spec.V),
                        H=max(reached["H"], spec.H),
                    )
            run.record(item, time.perf_counter() - item_started, decided=decided)
            reached["items"] += 1
            _settle(verdicts, verdict, item_started, listener)
            if search.fail_fast and not verdict.ok:
                break
        skipped = sorted({(i.size.T, i.size.K, i.size.V, i.size.H) for i in run.skipped})
        elapsed = time.perf_counter() - reach_started
        listener.progress(
            f"  size reach: {reached['items']} runs in {elapsed:.1f} s, "
            f"largest T {reached['T']}, largest head dim {reached['K']}, most heads {reached['H']}"
            + (f"; {len(skipped)} sizes left for a larger budget" if skipped else "")
        )
    return failed


def _left(seconds: float, end: float | None) -> float:
    """``seconds``, or what is left until ``end`` (a `time.perf_counter` value) if less."""
    return seconds if end is None else min(seconds, end - time.perf_counter())


def _diagnosis_seconds(budget: float) -> float:
    """A diagnosis's time in a check: the shrink's share of the budget, 5 s to its default."""
    from linattn_verify.diagnosis import DIAGNOSIS_SECONDS

    return min(DIAGNOSIS_SECONDS, max(5.0, SHRINK_SHARE * budget))


def _diagnosed(
    prop: Callable[..., Any],
    spec: Any,
    kernel: Kernel,
    failure: PropertyViolation,
    failures_dir: Path,
    seconds: float,
) -> PropertyViolation:
    """``failure`` with the recipe diagnosis of its result (saved again, the message rebuilt)."""
    from linattn_verify.diagnosis import diagnose
    from linattn_verify.running import violation

    result = failure.result
    if result is None:
        return failure
    text = diagnose(prop, spec, kernel, result, time_limit=seconds)
    if text is None:
        return failure
    return violation(replace(result, diagnosis=text), spec, kernel, directory=failures_dir)


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
    deadline: float | None = None,
    end: float | None = None,
    diagnosis_seconds: float | None = None,
    seen: set[str] | None = None,
    shrink_seconds: float | None = None,
    triggers: list[Trigger] | None = None,
    database: ExampleDatabase | None = None,
    database_key: bytes | None = None,
    replay_only: bool = False,
) -> PropertyVerdict:
    """One Hypothesis search of at most ``examples`` cases; return ``verdict`` with what it found.

    After ``deadline`` (a `time.perf_counter` value) no further case runs once
    `MIN_SEARCH_EXAMPLES` have (Hypothesis draws its simplest cases first: a search of one or
    two cases would only ever see those), and after ``end`` none at all. A failure is shrunk
    for at most ``shrink_seconds`` (`None`: until Hypothesis is done) and not past ``end``.
    Cases in ``seen`` (reprs of the cases earlier searches of this property ran; updated) are
    skipped: every search starts from Hypothesis's simplest case, which a short search would
    otherwise spend its time on again. The minimal failing case is recorded (the cases tried
    while shrinking are not), with its recipe diagnosis (`linattn_verify.diagnosis`) within
    ``diagnosis_seconds`` when given, and not past ``end``.

    ``triggers`` (updated) are the `Trigger`s of the property's failures found so far: cases near
    one are skipped, so the search looks for another defect, and the trigger of a failure found
    is appended (`Trigger.everywhere` when it cannot be told). The first failure is saved in
    ``failures_dir``, the n-th in its subfolder ``failure-n``, and ``verdict`` keeps the first
    failure's message.

    A Hypothesis ``database`` (the soak's: `linattn_verify.example_db`) keeps failures under
    ``database_key`` (no seed changes it); ``replay_only`` runs only what it gives to replay.
    Without one (``check``, ``run``) nothing outlives the search: a seed draws the same cases.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from linattn_verify.running import check_property, record_of

    if (database is None) != (database_key is None) or (replay_only and database is None):
        raise InvalidArgument(
            f"Got database={database!r}, database_key={database_key!r} and "
            f"replay_only={replay_only}, but a database needs a key, and replay_only a database."
        )
    seen = set() if seen is None else seen
    known = [] if triggers is None else triggers
    if known:
        failures_dir = failures_dir / f"failure-{len(known) + 1}"
    tally = {"examples": 0}
    # The verdict with every case that did not fail counted (`PropertyVerdict.counted`).
    counted = [verdict]
    # (spec, violation, seconds into the check, seconds of the case, when) of each failing case.
    failing: list[tuple[Any, PropertyViolation, float, float, float]] = []

    def shrunk_enough() -> bool:
        """Whether the shrink's time, or the budget, is spent (only after a failure)."""
        now = time.perf_counter()
        spent = shrink_seconds is not None and now - failing[0][4] > shrink_seconds
        return spent or (end is not None and now > end)

    def skipped(key: str) -> bool:
        """Whether the case ``key`` is left out (it then counts as passing)."""
        now = time.perf_counter()
        if failing:
            # Shrinking: past its time only the cases that failed count (Hypothesis replays the
            # smallest of them last; `search` answers those from memory); the others pass,
            # which ends the shrink.
            return shrunk_enough() and key not in {repr(f[0]) for f in failing}
        ran = tally["examples"]
        slice_spent = deadline is not None and now > deadline and ran >= MIN_SEARCH_EXAMPLES
        budget_spent = end is not None and now > end
        return slice_spent or budget_spent or key in seen

    # The settings go above the seed, which turns off the database of the settings it finds.
    # Replaying is a search of its own (``replay_only``): with the reuse phase in every search,
    # each visit would end on the same saved failure (`soak.replay_first` runs each once).
    @settings(
        max_examples=examples,
        deadline=None,
        database=database,
        phases=[Phase.reuse]
        if replay_only
        else [Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @hypothesis_seed(seed)
    @given(spec=strategy)
    def search(spec: Any) -> None:
        key = repr(spec)
        if failing and shrunk_enough():
            # A case that failed fails again without running the kernel: past the shrink's
            # time a hung kernel's replays would each cost the whole per-call timeout.
            for failed, violation, *_ in failing:
                if repr(failed) == key:
                    raise violation
        if skipped(key) or any(near(spec, t) for t in known):
            return
        seen.add(key)
        tally["examples"] += 1
        listener.case_started(verdict.property, repr(spec))
        case_started = time.perf_counter()
        try:
            result = check_property(prop, spec, kernel, directory=failures_dir)
        except PropertyViolation as exc:
            now = time.perf_counter()
            failing.append((spec, exc, round(now - started, 3), now - case_started, now))
            raise
        counted[0] = counted[0].counted(result)
        listener.case_finished(record_of(kernel, spec, result, time.perf_counter() - case_started))

    if database_key is not None:  # as `hypothesis.find(database_key=...)` sets it: not a hash
        # of the source of `search`, which is the same for every kernel and property
        search._hypothesis_internal_database_key = database_key  # type: ignore[attr-defined]
    failure: PropertyViolation | None = None
    note = ""
    try:
        # The same cases for the same seed in a child process as in this one (`seeded_draws`).
        with seeded_draws():
            search()
    except PropertyViolation as exc:
        # Hypothesis re-raises the shrunk example's violation: that is the minimal case.
        failure = exc
    except SkipTest:  # no case ran: the entry to replay was unreadable (Hypothesis deleted it)
        if not replay_only:
            raise
    except Exception as exc:
        # Hypothesis raises an exception group (FlakyFailure) when a failing example passed on
        # a rerun: a nondeterministic kernel. The violations inside still fail the property.
        failure = _first_violation(exc)
        if failure is None:
            raise
        note = f"\nHypothesis: {exc}"
    # The failing case itself counts as an example, not as a case that did not fail.
    verdict = replace(counted[0], examples=verdict.examples + tally["examples"])
    if failure is None:
        return verdict
    final = next((f for f in reversed(failing) if f[1] is failure), None)
    if triggers is not None:
        # A failure with no minimal case recorded (a flaky one) is taken to be everywhere.
        triggers.append(
            Trigger() if final is None else trigger_of(final[0], simplest_case(strategy))
        )
    if final is not None and failure.result is not None:
        spec, _, _, seconds, _ = final
        if diagnosis_seconds is not None:
            seconds_left = _left(diagnosis_seconds, end)
            if seconds_left > 0:
                failure = _diagnosed(prop, spec, kernel, failure, failures_dir, seconds_left)
        listener.case_finished(
            record_of(kernel, spec, failure.result, seconds, failure.failure_file)
        )
    if not verdict.ok:
        return verdict  # an earlier failure of the property is its verdict's
    return replace(
        verdict,
        status="failed",
        message=f"{failure}{note}",
        failure_file=failure.failure_file,
        first_failure_seconds=verdict.first_failure_seconds
        or (failing[0][2] if failing else round(time.perf_counter() - started, 3)),
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
