# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run `check_kernel` in a child process that the kernel under test may crash.

On CUDA one illegal memory access poisons the process's context: every later call fails, and a
kernel that hangs inside the driver never returns to Python, so neither an exception handler nor
the per-call alarm can save the check. `check_isolated` runs the check in a spawned child and
streams every event (progress, case records, verdicts, as JSON) to the parent as it happens.
When the child dies or stops talking, the property it was checking fails with the exit status
and the case it was running, and a fresh child checks the properties still holding with the
budget left.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from linattn_verify.checking import (
    CheckListener,
    CheckReport,
    SearchSettings,
    check_kernel,
)
from linattn_verify.core.family import KernelSource
from linattn_verify.results import CaseRecord, PropertyVerdict

SILENCE_FACTOR = 10
"""A child silent for this many per-call timeouts (at least `MIN_SILENCE` s) is hung."""

MIN_SILENCE = 120.0

OVERRUN_GRACE = 10.0
"""Seconds past the budget the parent waits for a child's last case before killing it (a kernel
hung where the per-call alarm cannot reach it); that case is dropped, not failed."""


class _QueueListener(CheckListener):
    """The child's listener: forwards every event to the parent."""

    def __init__(self, events: Any) -> None:
        self.events = events

    def progress(self, line: str) -> None:
        self.events.put(("progress", line))

    def case_started(self, property: str, case: str) -> None:
        self.events.put(("case_started", (property, case)))

    def case_finished(self, record: CaseRecord) -> None:
        self.events.put(("case_finished", record.to_json()))

    def verdict(self, verdict: PropertyVerdict) -> None:
        self.events.put(("verdict", verdict.to_json()))


def _child(source: KernelSource, names: Sequence[str], search: SearchSettings, events: Any) -> None:
    """The child process: load the kernel, check ``names``, report the end."""
    from linattn_verify.core.family import family_of

    # Ctrl-C reaches the whole process group: the parent stops the check and kills this child,
    # which must not print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    kernel = source.load()
    catalogue = family_of(kernel).properties()
    report = check_kernel(
        kernel,
        {name: catalogue[name] for name in names},
        search,
        listener=_QueueListener(events),
    )
    events.put(("done", report.seconds))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def check_isolated(
    source: KernelSource,
    names: Sequence[str],
    search: SearchSettings,
    *,
    listener: CheckListener | None = None,
) -> CheckReport:
    """Check ``source``'s kernel against the properties ``names`` in child processes.

    Returns the same report as `check_kernel` would, plus a failed verdict for every property
    during which a child crashed or hung (its message names the exit status and the case).
    """
    listener = listener or CheckListener()
    context = multiprocessing.get_context("spawn")
    kernel = source.target
    verdicts = {name: PropertyVerdict(kernel, name, "held") for name in names}
    started = time.perf_counter()
    silence = max(MIN_SILENCE, SILENCE_FACTOR * source.timeout)
    remaining = list(names)
    while remaining:
        budget_left = search.budget - (time.perf_counter() - started)
        events = context.Queue()
        child = context.Process(
            target=_child,
            args=(source, remaining, replace(search, budget=max(budget_left, 1e-3)), events),
            daemon=True,
        )
        child.start()
        # Verdicts from a child are cumulative over its own life: add them to what earlier
        # children found, with its times shifted to the start of the whole check.
        base, offset = dict(verdicts), time.perf_counter() - started
        current: tuple[str, str] | None = None
        finished, last_heard, overrun = False, time.perf_counter(), False
        while not finished:
            try:
                kind, payload = events.get(timeout=1.0)
            except queue_module.Empty:
                quiet = time.perf_counter() - last_heard
                overrun = time.perf_counter() - started > search.budget + OVERRUN_GRACE
                if not child.is_alive() or quiet > silence or overrun:
                    break
                continue
            except BaseException:
                child.kill()  # Ctrl-C in the parent: no child outlives the check
                raise
            last_heard = time.perf_counter()
            if kind == "progress":
                listener.progress(payload)
            elif kind == "case_started":
                current = payload
                listener.case_started(*payload)
            elif kind == "case_finished":
                listener.case_finished(CaseRecord.from_json(payload))
            elif kind == "verdict":
                verdict = PropertyVerdict.from_json(payload)
                verdicts[verdict.property] = _merge(base[verdict.property], verdict, offset)
                listener.verdict(verdicts[verdict.property])
            elif kind == "done":
                finished = True
        if child.is_alive():
            child.kill()
        child.join()
        if finished:
            break
        if overrun and child.exitcode is not None and child.exitcode < 0:
            # The budget ended during a case the child did not finish: dropped, not failed.
            listener.progress(
                f"  the budget ended {OVERRUN_GRACE:g} s ago while "
                f"{current[0] if current else 'the child'} ran a case: stopped"
            )
            break
        crashed = current[0] if current else remaining[0]
        case = current[1] if current else "(before the first case)"
        verdicts[crashed] = replace(
            verdicts[crashed],
            status="failed",
            first_failure_seconds=round(time.perf_counter() - started, 3),
            message=(
                f"{crashed} FAILED for {source.target}: the process checking it "
                f"{_describe_exit(child.exitcode)} while running the kernel on\n  {case}\n"
                "(the check went on in a fresh process)"
            ),
        )
        listener.progress(f"  {crashed:32s} FAILED: its process {_describe_exit(child.exitcode)}")
        listener.verdict(verdicts[crashed])
        if search.fail_fast:
            break
        remaining = [name for name in remaining if verdicts[name].ok]
        if time.perf_counter() - started >= search.budget:
            break
    return CheckReport(
        kernel=kernel,
        verdicts=tuple(v.settled() for v in verdicts.values()),
        seconds=time.perf_counter() - started,
    )


def _merge(before: PropertyVerdict, now: PropertyVerdict, offset: float) -> PropertyVerdict:
    """Add a child's verdict to what earlier children found for the same property."""
    first = now.first_failure_seconds
    return replace(
        now,
        status="failed" if not (before.ok and now.ok) else now.status,
        examples=before.examples + now.examples,
        seconds=round(before.seconds + now.seconds, 3),
        not_applicable=before.not_applicable + now.not_applicable,
        within_rounding=before.within_rounding + now.within_rounding,
        # A failure's report wins over a within-rounding one (`PropertyVerdict.message`).
        message=(before.message if not before.ok or now.ok else "") or now.message,
        failure_file=before.failure_file or now.failure_file,
        first_failure_seconds=before.first_failure_seconds
        or (None if first is None else round(first + offset, 3)),
    )


__all__ = ["SearchSettings", "check_isolated"]
