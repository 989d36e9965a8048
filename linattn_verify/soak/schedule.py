# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Which visit comes next, when the soak stops, and how a returned visit is counted.

The order of visits is a function of the state alone: the pair with the fewest visits taken
(recorded, or in flight) next, ties in kernel then catalogue order, and its lowest visit number
not taken. Counting the visits in flight as done makes the first n visits a soak with N workers
dispatches exactly the n visits a sequential soak makes, (pair, number, seed) for
(pair, number, seed), whatever order they finish in; a number whose visit was abandoned (a stop,
a crash of the driver) is the next one its pair takes, so every seed is searched once.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from linattn_verify.errors import InvalidArgument
from linattn_verify.soak.state import VisitResult
from linattn_verify.soak.visits import SoakSettings, Stopper, VisitOutcome, progress_line

if TYPE_CHECKING:
    from linattn_verify.soak.store import SoakStore


@dataclass(frozen=True)
class PlannedVisit:
    """A visit taken from the `Schedule`.

    Attributes:
        kernel: The kernel (a `Kernel`).
        property: The property's name.
        number: The pair's visit number (from 1).
    """

    kernel: Any
    property: str
    number: int


class Schedule:
    """The order of visits (module docstring).

    Args:
        pairs: Every (kernel, property name) to visit, in kernel then catalogue order.
        done: The visit numbers recorded so far, per (kernel name, property name).
    """

    def __init__(
        self, pairs: Sequence[tuple[Any, str]], done: Mapping[tuple[str, str], set[int]]
    ) -> None:
        if not pairs:
            raise InvalidArgument("Got no kernels or no properties: there is nothing to soak.")
        self._pairs = list(pairs)
        self._taken = {(k.name, n): set(done.get((k.name, n), ())) for k, n in self._pairs}
        # The lowest number each pair may still lack (numbers below it are all taken).
        self._low = dict.fromkeys(self._taken, 1)

    def taken(self, kernel: str, prop: str) -> int:
        """Visits of (kernel, prop) recorded or in flight."""
        return len(self._taken[kernel, prop])

    def take(self) -> PlannedVisit:
        """The next visit; it counts as taken until `give_back`."""
        kernel, prop = min(self._pairs, key=lambda p: len(self._taken[p[0].name, p[1]]))
        key = (kernel.name, prop)
        number = self._low[key]
        while number in self._taken[key]:
            number += 1
        self._taken[key].add(number)
        self._low[key] = number + 1
        return PlannedVisit(kernel, prop, number)

    def give_back(self, planned: PlannedVisit) -> None:
        """Return a visit that will not be recorded: its number is its pair's next again."""
        key = (planned.kernel.name, planned.property)
        self._taken[key].discard(planned.number)
        self._low[key] = min(self._low[key], planned.number)


class Limits:
    """When a soak stops taking visits: a signal, the budget, the visits allowed."""

    def __init__(self, settings: SoakSettings, stopper: Stopper) -> None:
        self.started = time.perf_counter()
        self._settings = settings
        self._stopper = stopper

    def elapsed(self) -> float:
        """Seconds since the soak started."""
        return time.perf_counter() - self.started

    def reason(self, dispatched: int) -> str | None:
        """Why no visit may start after ``dispatched`` visits in this invocation, or `None`."""
        if self._stopper.requested is not None:
            return self._stopper.requested
        if self._settings.budget is not None and self.elapsed() >= self._settings.budget:
            return "budget"
        if self._settings.max_visits is not None and dispatched >= self._settings.max_visits:
            return "max_visits"
        return None


class Recorder:
    """Counts each returned visit once (`SoakStore.record`) and tells the caller about it."""

    def __init__(
        self,
        store: SoakStore,
        invocation: int,
        limits: Limits,
        *,
        say: Callable[[str], None],
        visited: Callable[[VisitOutcome, float], None] | None,
    ) -> None:
        self.store = store
        self.invocation = invocation
        self.recorded = 0
        self._limits = limits
        self._say = say
        self._visited = visited

    def record(self, result: VisitResult) -> bool:
        """Record ``result``; `False` if its visit was recorded already (nothing changed)."""
        seconds = round(self._limits.elapsed(), 3)
        recorded = self.store.record(result, invocation=self.invocation, invocation_seconds=seconds)
        if not recorded.counted:
            return False
        self.recorded += 1
        if result.failure is not None and recorded.new_failure is None and result.folder:
            # This visit's copy of a case already recorded.
            shutil.rmtree(Path(result.folder), ignore_errors=True)
        outcome = VisitOutcome(
            recorded.pair, result.examples, result.failure is not None, recorded.new_failure
        )
        self._say(progress_line(outcome, seconds))
        if self._visited is not None:
            self._visited(outcome, seconds)
        return True


__all__ = ["Limits", "PlannedVisit", "Recorder", "Schedule"]
