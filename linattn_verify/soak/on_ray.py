# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak on Ray: each visit a Ray task, the state kept by the driver alone.

The driver keeps up to ``workers`` visits in flight, taken from the `Schedule` as they would be
in sequence, and records each result as it returns, in one transaction (`Recorder`). A task
carries what a worker needs to run the visit anywhere (a `KernelLoader`, the property's name,
the visit number, the base seed, the settings, the failures folder) and returns a
`VisitResult`; it writes nothing but the visit's failing case. A task whose worker dies
(killed, node lost) is run again by Ray on another worker with the same visit number, hence the
same seed (up to `linattn_verify.cluster.RaySession.retries` times), and its result is counted
once: the store's log of visits ignores a visit recorded already. A visit whose worker died on
every attempt is recorded as a harness error (a kernel that kills its process is news), and the
soak goes on.

This module is imported by the workers (for `run_visit`), and never by the in-process path.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from linattn_verify.cluster import RaySession
from linattn_verify.core.family import family_of
from linattn_verify.errors import InvalidArgument
from linattn_verify.soak.schedule import Limits, PlannedVisit, Recorder, Schedule
from linattn_verify.soak.state import SoakFailure, VisitResult, utc_now, visit_seed
from linattn_verify.soak.visits import SoakSettings, Stopper, visit

WAIT_SECONDS = 0.2
"""How often the driver looks at a stop request while visits are in flight."""


class KernelLoader(Hashable, Protocol):
    """How a worker gets a kernel: picklable, hashable, named as the kernel is.

    `linattn_verify.cli.manifest.ManifestEntry` is one; `RegisteredKernel` the other.
    """

    @property
    def name(self) -> str:
        """The kernel's name."""
        ...

    def kernel(self) -> Any:
        """The kernel (a `Kernel`), built in the worker."""
        ...


@dataclass(frozen=True)
class RegisteredKernel:
    """A registered kernel (or FLA's), found by name in the worker (`running.select_kernels`).

    Attributes:
        name: The kernel's name.
    """

    name: str

    def kernel(self) -> Any:
        """The kernel named `name`.

        Raises:
            InvalidArgument: if no kernel of that name is registered in this process.
        """
        from linattn_verify.running import select_kernels

        try:
            found = [k for k in select_kernels([self.name]) if k.name == self.name]
        except InvalidArgument:
            found = []
        if not found:
            raise InvalidArgument(
                f"Got kernel {self.name!r}, but no kernel of that name is registered in this "
                "worker; a kernel of a manifest travels as its manifest entry."
            )
        return found[0]


@functools.cache
def _kernel_of(loader: KernelLoader) -> Any:
    """The loader's kernel, built once per worker process."""
    return loader.kernel()


def run_visit(
    loader: KernelLoader,
    name: str,
    number: int,
    base_seed: int,
    settings: SoakSettings,
    failures_dir: str,
) -> VisitResult:
    """A visit in a worker: property ``name`` of the kernel's family catalogue (`visit`)."""
    kernel = _kernel_of(loader)
    prop = family_of(kernel).properties()[name]
    return visit(
        kernel,
        name,
        prop,
        number=number,
        settings=settings,
        base_seed=base_seed,
        failures_dir=Path(failures_dir),
    )


def check_catalogue_properties(catalogues: Mapping[str, Mapping[str, Any]], kernels: Any) -> None:
    """Check that every property is its kernel family's own (the workers look them up by name).

    Raises:
        InvalidArgument: naming the property and the kernel, for one that is not.
    """
    for kernel in kernels:
        catalogue = family_of(kernel).properties()
        for name, prop in catalogues[kernel.name].items():
            if catalogue.get(name) is not prop:
                raise InvalidArgument(
                    f"Got property {name!r} for kernel {kernel.name!r}, but it is not the "
                    f"{family_of(kernel).name} family's catalogue entry of that name: workers "
                    "look properties up by name, so a soak with workers > 1 takes catalogue "
                    "properties only."
                )


def _failed_visit(
    planned: PlannedVisit, base_seed: int, exc: Exception, *, attempts: int
) -> VisitResult:
    """The result of a visit Ray could not run: a harness error, counted as a visit."""
    ray: Any = importlib.import_module("ray")

    kernel = planned.kernel.name
    seed = visit_seed(base_seed, kernel, planned.property, planned.number)
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        what = f"the visit's task raised {type(cause).__name__}: {cause}"
    else:
        # Only the kind: the details name processes and addresses, which differ per crash, and
        # a failure is recorded once per message.
        tries = f"{attempts} attempt{'s' * (attempts != 1)}"
        what = f"its worker died on each of {tries} ({type(exc).__name__})"
    failure = SoakFailure(
        visit=planned.number,
        seed=seed,
        case="",
        message=f"harness error: {what}",
        failure_file=None,
        examples_before=0,
        found_at=utc_now(),
        error=True,
    )
    return VisitResult(kernel, planned.property, planned.number, seed, 0, 0, 0, 0.0, failure)


def soak_on_ray(
    schedule: Schedule,
    loaders: Mapping[str, KernelLoader],
    settings: SoakSettings,
    *,
    session: RaySession,
    workers: int,
    base_seed: int,
    failures_dir: Path,
    stopper: Stopper,
    limits: Limits,
    recorder: Recorder,
) -> str:
    """Run visits as Ray tasks, ``workers`` at a time, until a limit; return why it stopped.

    After the budget or the visits allowed, the visits in flight finish and are recorded; on
    SIGINT or SIGTERM they are cancelled (their workers killed) and given back to the schedule.
    """
    ray: Any = importlib.import_module("ray")
    task = ray.remote(run_visit).options(**session.task_options())
    folder = str(failures_dir.absolute())
    in_flight: dict[Any, PlannedVisit] = {}
    dispatched = 0
    limit = None
    while True:
        while limit is None and len(in_flight) < workers:
            limit = limits.reason(dispatched)
            if limit is not None:
                break
            planned = schedule.take()
            loader = loaders[planned.kernel.name]
            ref = task.remote(loader, planned.property, planned.number, base_seed, settings, folder)
            in_flight[ref] = planned
            dispatched += 1
        if stopper.requested is not None:
            for ref, planned in in_flight.items():
                ray.cancel(ref, force=True)
                schedule.give_back(planned)
            return stopper.requested
        if not in_flight:
            assert limit is not None, "nothing in flight before a limit"
            return limit
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_SECONDS)
        for ref in ready:
            planned = in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                result = _failed_visit(planned, base_seed, exc, attempts=session.attempts)
            recorder.record(result)


__all__ = [
    "WAIT_SECONDS",
    "KernelLoader",
    "RegisteredKernel",
    "check_catalogue_properties",
    "run_visit",
    "soak_on_ray",
]
