# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak: visit every (kernel, property) until the budget, in this process or on Ray."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from linattn_verify.cluster import RaySession, check_engine, ray_session
from linattn_verify.errors import InvalidArgument
from linattn_verify.soak.files import open_state
from linattn_verify.soak.schedule import Limits, Recorder, Schedule
from linattn_verify.soak.state import Invocation, SoakState, SoakStopped, failures_dir_of, utc_now
from linattn_verify.soak.visits import SoakSettings, Stopper, VisitOutcome, visit

if TYPE_CHECKING:
    from linattn_verify.soak.on_ray import KernelLoader
    from linattn_verify.soak.store import SoakStore

Properties = Mapping[str, Callable[..., Any]] | Callable[[Any], Mapping[str, Callable[..., Any]]]
"""The properties of a soak: one catalogue for every kernel, or a kernel's own (its family's)."""


def soak(
    kernels: Sequence[Any],
    properties: Properties,
    state_path: Path,
    settings: SoakSettings,
    *,
    say: Callable[[str], None] = lambda line: None,
    stopper: Stopper | None = None,
    visited: Callable[[VisitOutcome, float], None] | None = None,
    workers: int = 1,
    session: RaySession | None = None,
    loaders: Mapping[str, KernelLoader] | None = None,
) -> SoakState:
    """Visit every (kernel, property) round-robin until the budget; keep score in ``state_path``.

    Resumes from the state ``state_path`` names (`linattn_verify.soak.files`: a SQLite store,
    migrated from a JSON state of before when need be). Each visit's result is recorded in one
    transaction as it returns; ``say`` gets a progress line per visit (`progress_line`), and
    ``visited`` the visit's outcome and the seconds since the soak started (a progress bar's
    news). Stops when ``settings.budget`` seconds have passed or ``settings.max_visits`` visits
    were started (neither: until ``stopper`` is told to).

    Args:
        kernels: The kernels (`Kernel`).
        properties: Their properties (`Properties`).
        state_path: What ``--state`` named.
        settings: How to search.
        say: Takes a progress line per visit. Default: drop it.
        stopper: Stops the soak on request (SIGINT, SIGTERM). Default: a new one.
        visited: Takes each visit's outcome and the seconds so far. Default: `None`.
        workers: Visits in flight at once: 1 runs them in this process, more as Ray tasks
            (`linattn_verify.soak.on_ray`; ``properties`` must then be catalogue entries).
            Default: `1`.
        session: The Ray session for ``workers`` > 1; `None` starts a local instance for the
            soak (and installs ``stopper``'s handlers after Ray's). Default: `None`.
        loaders: How a worker gets each kernel, by name; a kernel without one is looked up in
            the registry (`on_ray.RegisteredKernel`). Default: `None`.

    Raises:
        SoakStateError: if the state cannot be read, or ``settings.seed`` contradicts it.
        InvalidArgument: if there is nothing to visit, or a property is not a catalogue entry
            with ``workers`` > 1.
        ClusterError: if ``workers`` > 1 and Ray is missing or cannot start.
    """
    check_engine(workers=workers)
    # The properties of each kernel: the same for all, or chosen per kernel (its family's).
    catalogues = {
        k.name: dict(properties if isinstance(properties, Mapping) else properties(k))
        for k in kernels
    }
    names = list(dict.fromkeys(n for c in catalogues.values() for n in c))
    pairs = [(k, n) for k in kernels for n in catalogues[k.name]]
    if not pairs:
        raise InvalidArgument("Got no kernels or no properties: there is nothing to soak.")
    if workers > 1:
        from linattn_verify.soak.on_ray import check_catalogue_properties

        check_catalogue_properties(catalogues, kernels)
    from linattn_verify._device import versions
    from linattn_verify.example_db import parse_example_db

    stopper = stopper or Stopper()
    store, note = open_state(state_path, seed=settings.seed)
    with contextlib.closing(store):
        if note is not None:
            say(note)
        invocation = store.start_invocation(
            Invocation(
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
                    "workers": workers,
                    # What --example-db named, without a Redis password.
                    "example_db": parse_example_db(settings.example_db or "none").describe(),
                },
            )
        )
        schedule = Schedule(pairs, store.done_visits())
        limits = Limits(settings, stopper)
        recorder = Recorder(store, invocation, limits, say=say, visited=visited)
        if workers == 1:
            reason = _soak_here(schedule, catalogues, settings, store, stopper, limits, recorder)
        else:
            with _engine(workers, session, stopper) as engine:
                reason = _soak_on_ray(
                    schedule, kernels, loaders, settings, store, engine, workers, stopper,
                    limits, recorder,
                )  # fmt: skip
        store.finish_invocation(invocation, seconds=limits.elapsed(), stopped=reason)
        return store.snapshot()


def _soak_here(
    schedule: Schedule,
    catalogues: Mapping[str, Mapping[str, Callable[..., Any]]],
    settings: SoakSettings,
    store: SoakStore,
    stopper: Stopper,
    limits: Limits,
    recorder: Recorder,
) -> str:
    """Visit in this process, one at a time, until a limit; return why it stopped.

    A signal inside a visit abandons it (`Stopper.visiting`): its number is given back.
    """
    failures_dir = failures_dir_of(store.path)
    dispatched = 0
    while (reason := limits.reason(dispatched)) is None:
        planned = schedule.take()
        dispatched += 1
        try:
            with stopper.visiting():
                result = visit(
                    planned.kernel,
                    planned.property,
                    catalogues[planned.kernel.name][planned.property],
                    number=planned.number,
                    settings=settings,
                    base_seed=store.seed,
                    failures_dir=failures_dir,
                )
        except SoakStopped as stop:
            schedule.give_back(planned)
            return str(stop)
        recorder.record(result)
    return reason


@contextlib.contextmanager
def _engine(workers: int, session: RaySession | None, stopper: Stopper) -> Iterator[RaySession]:
    """``session``, or a local Ray instance for the block with ``stopper`` handling signals."""
    if session is not None:
        yield session
        return
    # Ray takes SIGTERM when it starts: the stopper takes it back for the soak.
    with ray_session(workers=workers) as started, stopper.installed():
        yield started


def _soak_on_ray(
    schedule: Schedule,
    kernels: Sequence[Any],
    loaders: Mapping[str, KernelLoader] | None,
    settings: SoakSettings,
    store: SoakStore,
    session: RaySession,
    workers: int,
    stopper: Stopper,
    limits: Limits,
    recorder: Recorder,
) -> str:
    from linattn_verify.soak.on_ray import RegisteredKernel, soak_on_ray

    given = dict(loaders or {})
    by_name = {k.name: given.get(k.name) or RegisteredKernel(k.name) for k in kernels}
    return soak_on_ray(
        schedule,
        by_name,
        settings,
        session=session,
        workers=workers,
        base_seed=store.seed,
        failures_dir=failures_dir_of(store.path),
        stopper=stopper,
        limits=limits,
        recorder=recorder,
    )


__all__ = ["Properties", "soak"]
