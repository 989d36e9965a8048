# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`run`'s time left: from each kernel's own group durations, not a rate over recent cases."""

from __future__ import annotations

import io

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.progress import Progress
from linattn_verify.run_clock import GroupClock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(clock: GroupClock, fake: FakeClock, group: tuple[str, str], cases: int, each: float):
    clock.started(group)
    for _ in range(cases):
        fake.now += each
        clock.advanced(group)
    clock.finished(group)


def test_nothing_is_known_before_a_case_is_done() -> None:
    fake = FakeClock()
    clock = GroupClock([("a", "fp32")], planned=10, clock=fake)
    assert clock.seconds_left() is None
    clock.started(("a", "fp32"))
    fake.now = 5.0
    assert clock.seconds_left() is None


def test_a_group_in_progress_is_extrapolated_from_its_own_cases() -> None:
    fake = FakeClock()
    clock = GroupClock([("a", "fp32"), ("a", "fp16")], planned=10, clock=fake)
    clock.started(("a", "fp32"))
    for _ in range(4):
        fake.now += 2.0
        clock.advanced(("a", "fp32"))
    # 8 s for 4 of 10 cases: 12 s more for this group, 20 s for the next of the same kernel.
    assert clock.seconds_left() == 32.0


def test_each_kernel_is_timed_by_its_own_groups() -> None:
    """A slow kernel after a fast one: the rate of the fast one would say 3x too little."""
    fake = FakeClock()
    groups = [("fast", "fp32"), ("slow", "fp32"), ("fast", "fp16"), ("slow", "fp16")]
    clock = GroupClock(groups, planned=10, clock=fake)
    _run(clock, fake, ("fast", "fp32"), 10, 1.0)
    # Only the fast kernel is known: the slow one is taken at its mean.
    assert clock.seconds_left() == 30.0
    _run(clock, fake, ("slow", "fp32"), 10, 3.0)
    assert clock.seconds_left() == 10.0 + 30.0
    _run(clock, fake, ("fast", "fp16"), 10, 1.0)
    assert clock.seconds_left() == 30.0
    _run(clock, fake, ("slow", "fp16"), 10, 3.0)
    assert clock.seconds_left() == 0.0


def test_workers_share_the_work_left() -> None:
    fake = FakeClock()
    groups = [("k", d) for d in ("fp32", "fp16", "bf16", "fp64")]
    clock = GroupClock(groups, planned=5, workers=2, clock=fake)
    _run(clock, fake, ("k", "fp32"), 5, 2.0)
    assert clock.seconds_left() == 3 * 10.0 / 2
    _run(clock, fake, ("k", "fp16"), 5, 2.0)
    _run(clock, fake, ("k", "bf16"), 5, 2.0)
    # One group left: one worker runs it, the other idles.
    assert clock.seconds_left() == 10.0


def test_the_bar_shows_the_clock_estimate() -> None:
    stream = io.StringIO()
    with Progress("run", 4, stream=stream, left=lambda: 3725.0) as bar:
        bar.advance()
    assert "1:02:05" in stream.getvalue()
    unknown = io.StringIO()
    with Progress("run", 4, stream=unknown, left=lambda: None) as bar:
        bar.advance()
    assert "-:--:--" in unknown.getvalue()


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidArgument, match="planned=0"):
        GroupClock([("a", "fp32")], planned=0)
    with pytest.raises(InvalidArgument, match="workers=True"):
        GroupClock([("a", "fp32")], planned=3, workers=True)
