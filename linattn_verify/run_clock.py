# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The time left in a ``run``: from the (kernel, dtype) groups' own durations, kernel by kernel.

A rate over recent cases (rich's estimate) is about 2x too low for ``run``: its kernels differ
in cost by 3x (measured, 2026-11-28, ``run --kernels 'triton/*'`` on 2 loaded cores: 9-16 s per
linear-attention group of 22 cases, 18-27 s per delta-rule group of 20), and the costly ones
came last. `GroupClock` estimates a group's duration from its own kernel's finished groups, or,
while none has finished, from its cases so far (the cases of one group cost about alike); a
kernel not yet seen is taken at the mean of those seen. ``run`` orders its groups dtype by
dtype, every kernel once per dtype, so every kernel is seen within the first pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from linattn_verify.errors import InvalidArgument

Group = tuple[str, str]
"""A (kernel name, dtype) group of ``run``."""


class GroupClock:
    """Seconds left in a run of groups of ``planned`` cases each, over ``workers`` processes.

    Args:
        groups: Every group of the run, in any order.
        planned: Cases planned per group (the draw may make fewer, the side-by-side cases add
            some: a group's duration counts whatever it ran).
        workers: Processes running groups at once.
        clock: Seconds, monotonic. Default: `time.monotonic`.

    Raises:
        InvalidArgument: for a ``planned`` or ``workers`` that is not an int >= 1.
    """

    def __init__(
        self,
        groups: Sequence[Group],
        planned: int,
        workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        for name, value in (("planned", planned), ("workers", workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Expected an int >= 1 but got {name}={value!r}.")
        self.groups = list(groups)
        self.planned = planned
        self.workers = workers
        self.clock = clock
        self.start: dict[Group, float] = {}
        self.done: dict[Group, int] = {}
        self.duration: dict[Group, float] = {}

    def started(self, group: Group) -> None:
        """``group`` starts now (a worker's group: when its first case is heard of)."""
        self.start.setdefault(group, self.clock())

    def advanced(self, group: Group) -> None:
        """A case of ``group`` is done."""
        self.started(group)
        self.done[group] = self.done.get(group, 0) + 1

    def finished(self, group: Group) -> None:
        """``group`` is done."""
        self.started(group)
        self.duration[group] = self.clock() - self.start[group]

    def _per_kernel(self, now: float) -> dict[str, float]:
        """A whole group's expected seconds, by kernel, where something is known of it."""
        finished: dict[str, list[float]] = {}
        for (kernel, _), seconds in self.duration.items():
            finished.setdefault(kernel, []).append(seconds)
        known = {kernel: sum(s) / len(s) for kernel, s in finished.items()}
        for group, begun in self.start.items():
            kernel, done = group[0], self.done.get(group, 0)
            if kernel not in known and group not in self.duration and done:
                known[kernel] = (now - begun) * self.planned / done
        return known

    def seconds_left(self) -> float | None:
        """Seconds until the last group ends, or `None` while nothing is known."""
        now = self.clock()
        known = self._per_kernel(now)
        if not known:
            return None
        unseen = sum(known.values()) / len(known)
        work, running = 0.0, 0
        for group in self.groups:
            if group in self.duration:
                continue
            expected = known.get(group[0], unseen)
            running += 1
            if group in self.start:
                expected = max(0.0, expected - (now - self.start[group]))
            work += expected
        return work / max(1, min(self.workers, running))


__all__ = ["Group", "GroupClock"]
