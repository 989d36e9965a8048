# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Observers of property results, and the headroom a result leaves.

`linattn_verify.running.check_property` tells every observer added here about each
`PropertyResult` it gets (passing or failing), with the case it was run on; the pytest plugin
adds one to print the worst headroom per kernel at the end of a session. The registry imports
nothing heavy (no torch), so the plugin can import it at load time, and notifying nobody costs a
loop over an empty list.

The headroom of a deciding score r (error over bound, r = err / B; or η, the residual test) is
``FAIL_THRESHOLD / r``: how many times the error could grow before the comparison fails. Unlike
ρ = err / (u·M), it does not explode on cases whose values are tiny.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from linattn_verify.errors import InvalidArgument
from linattn_verify.results import FAIL_THRESHOLD, Comparison, PropertyResult, worst_of

Observer = Callable[[PropertyResult, Any], None]
"""Told ``(result, spec)`` for each result `check_property` gets."""

_OBSERVERS: list[Observer] = []


def add_observer(observer: Observer) -> Callable[[], None]:
    """Tell ``observer`` about every property result from now on.

    Args:
        observer: Called as ``observer(result, spec)``.

    Returns:
        A function that removes the observer again (idempotent).

    Raises:
        InvalidArgument: if ``observer`` is not callable.
    """
    if not callable(observer):
        raise InvalidArgument(f"Expected a callable but got observer={observer!r}.")
    _OBSERVERS.append(observer)

    def remove() -> None:
        if observer in _OBSERVERS:
            _OBSERVERS.remove(observer)

    return remove


def notify(result: PropertyResult, spec: Any) -> None:
    """Tell every observer about ``result`` on ``spec`` (what `check_property` calls)."""
    for observer in tuple(_OBSERVERS):
        observer(result, spec)


def oracle_worst(result: PropertyResult) -> Comparison | None:
    """The deciding comparison of ``result`` among those against the oracle, or `None`."""
    return worst_of(c for c in result.comparisons if c.kind == "oracle")


def headroom(score: float) -> float:
    """How many times an error with deciding score ``score`` could grow before failing.

    ``FAIL_THRESHOLD / score``: infinite for a zero score, zero for NaN or an infinite score.
    """
    if math.isnan(score) or math.isinf(score):
        return 0.0
    return math.inf if score <= 0 else FAIL_THRESHOLD / score


def format_headroom(score: float) -> str:
    """Write `headroom` of ``score`` for a reader: ``"60x"``, ``"3.4x"``, ``"inf"``.

    Below ``1x`` (``"0.064x"``) the score is past `FAIL_THRESHOLD`: the comparison failed.
    """
    room = headroom(score)
    if math.isinf(room):
        return "inf"
    return f"{room:.2g}x" if room < 10 else f"{room:.0f}x"


__all__ = ["Observer", "add_observer", "format_headroom", "headroom", "notify", "oracle_worst"]
