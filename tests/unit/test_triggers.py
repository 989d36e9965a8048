# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A failure's trigger: the differences of its minimal case from the simplest, and what is near."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linattn_verify.core.family import family_of
from linattn_verify.errors import InvalidArgument
from linattn_verify.registry import get_kernel
from linattn_verify.triggers import Trigger, near, simplest_case, trigger_of

SIMPLEST = simplest_case(
    family_of(get_kernel("torch/recurrent")).cases_for(
        get_kernel("torch/recurrent"), max_seq_len=8, max_head_dim=4, realistic=False
    )
)


def test_the_simplest_case_is_what_the_strategy_shrinks_to() -> None:
    simplest = SIMPLEST
    assert (simplest.T, simplest.K, simplest.V, simplest.H) == (1, 1, 1, 1)
    assert simplest.segments is None
    assert not simplest.initial_state


def test_a_trigger_holds_each_difference_from_the_simplest_case() -> None:
    minimal = replace(SIMPLEST, T=9, segments=(0, 9), initial_state=True)
    trigger = trigger_of(minimal, SIMPLEST)
    assert trigger.at_least == (("T", 9),)
    assert trigger.not_simplest == (("initial_state", False), ("segments", None))
    assert trigger.describe() == "T >= 9, initial_state != False, segments != None"
    assert not trigger.everywhere


def test_a_case_is_near_only_with_every_difference() -> None:
    trigger = trigger_of(replace(SIMPLEST, T=9, segments=(0, 9), initial_state=True), SIMPLEST)
    assert near(replace(SIMPLEST, T=12, segments=(3, 0, 9), initial_state=True), trigger)
    assert not near(replace(SIMPLEST, T=8, segments=(0, 8), initial_state=True), trigger)
    assert not near(replace(SIMPLEST, T=12, segments=None, initial_state=True), trigger)
    assert not near(replace(SIMPLEST, T=12, segments=(0, 12), initial_state=False), trigger)


def test_the_seed_is_no_trigger() -> None:
    """A failure first seen at seed 1 is a failure of values, not of a structure to avoid."""
    trigger = trigger_of(replace(SIMPLEST, seed=1), SIMPLEST)
    assert trigger.everywhere
    assert trigger == Trigger()


@given(T=st.integers(1, 64), initial_state=st.booleans(), seed=st.integers(0, 9))
def test_a_failure_of_the_simplest_structure_is_near_every_case(
    T: int, initial_state: bool, seed: int
) -> None:
    trigger = trigger_of(replace(SIMPLEST, seed=seed), SIMPLEST)
    assert near(replace(SIMPLEST, T=T, initial_state=initial_state), trigger)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidArgument, match="two cases of one dataclass type"):
        trigger_of(SIMPLEST, "not a case")
    with pytest.raises(InvalidArgument, match="Expected a Trigger"):
        near(SIMPLEST, "T >= 2")  # type: ignore[arg-type]
