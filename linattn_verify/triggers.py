# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A failure's trigger: what its minimal case has that the simplest case lacks.

One defect must not hide another. A search that found a failure shrinks it to a minimal case,
and every field of that case that differs from the strategy's simplest case is, locally, needed
for the failure (Hypothesis would have shrunk it away otherwise): a varlen batch, an initial
state, T of at least 9, a bf16 dtype. Those differences are the failure's `Trigger`. A later
search of the same property skips the cases `near` a known trigger (the cases that have every
one of its differences) and so looks for failures elsewhere: a second defect is found and
shrunk on its own instead of being answered, every time, by the first one's minimal case.

A failure of the simplest case itself has an empty trigger: every case is near it, and the
property has nowhere left to look.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from linattn_verify.errors import InvalidArgument

VALUE_ONLY_FIELDS = ("seed",)
"""Fields that pick values, not structure: never part of a trigger. A minimal case at seed 1
says only that seed 0's values happened to hide the failure (zeros, a tie), not that the
defect lives at seeds >= 1."""


@dataclass(frozen=True)
class Trigger:
    """The differences of a minimal failing case from the simplest case, field by field.

    Attributes:
        at_least: Integer fields the failure needed at least this large (a shrink makes integers
            as small as the failure allows): ``(("T", 9),)``.
        not_simplest: Other fields whose value differed from the simplest case's, with that
            simplest value: ``(("segments", None), ("initial_state", False))``.
    """

    at_least: tuple[tuple[str, int], ...] = ()
    not_simplest: tuple[tuple[str, Any], ...] = ()

    @property
    def everywhere(self) -> bool:
        """Whether every case is near it (the simplest case failed): no search can avoid it."""
        return not (self.at_least or self.not_simplest)

    def describe(self) -> str:
        """The trigger on one line: ``T >= 9, segments != None``."""
        parts = [f"{name} >= {value}" for name, value in self.at_least]
        parts += [f"{name} != {value!r}" for name, value in self.not_simplest]
        return ", ".join(parts) or "every case"


def trigger_of(minimal: Any, simplest: Any) -> Trigger:
    """The `Trigger` of a failure whose minimal case is ``minimal``.

    Args:
        minimal: The minimal failing case (a frozen dataclass: `ProblemSpec`, `DeltaCase`).
        simplest: The simplest case of the strategy the search drew ``minimal`` from, of the
            same type (`simplest_case`).
    """
    if not (dataclasses.is_dataclass(minimal) and type(simplest) is type(minimal)):
        raise InvalidArgument(
            f"Expected two cases of one dataclass type but got minimal={minimal!r}, "
            f"simplest={simplest!r}."
        )
    at_least: list[tuple[str, int]] = []
    not_simplest: list[tuple[str, Any]] = []
    for field in dataclasses.fields(minimal):
        if field.name in VALUE_ONLY_FIELDS:
            continue
        value, base = getattr(minimal, field.name), getattr(simplest, field.name)
        if value == base:
            continue
        ordered = isinstance(value, int) and not isinstance(value, bool)
        if ordered and isinstance(base, int) and value > base:
            at_least.append((field.name, value))
        else:
            not_simplest.append((field.name, base))
    return Trigger(tuple(at_least), tuple(not_simplest))


def near(case: Any, trigger: Trigger) -> bool:
    """Whether ``case`` has every difference of ``trigger`` (it may fail the same way)."""
    if not isinstance(trigger, Trigger):
        raise InvalidArgument(f"Expected a Trigger but got trigger={trigger!r}.")
    return all(getattr(case, name) >= value for name, value in trigger.at_least) and all(
        getattr(case, name) != base for name, base in trigger.not_simplest
    )


@functools.lru_cache(maxsize=8)
def simplest_case(strategy: Any) -> Any:
    """The simplest case ``strategy`` draws (the one Hypothesis shrinks everything toward).

    A Hypothesis search of its own (0.1 s or more): cached for the last few strategies, since
    `check_kernel` asks for its two strategies' after every failure.
    """
    from hypothesis import HealthCheck, Phase, find, settings

    from linattn_verify.core.draws import seeded_draws

    with seeded_draws():
        return find(
            strategy,
            lambda _: True,
            settings=settings(
                database=None,
                phases=[Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            ),
        )


__all__ = ["VALUE_ONLY_FIELDS", "Trigger", "near", "simplest_case", "trigger_of"]
