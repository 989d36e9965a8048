# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Values in a run document: non-finite scores as standard JSON, back to floats; quantiles."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def jsonable(value: Any) -> Any:
    """Return ``value`` as standard JSON data: tuples become lists, inf and NaN become strings.

    Python's `json` writes ``Infinity`` and ``NaN``, which other JSON readers reject; a failing
    case can score inf, so non-finite floats are written as ``"inf"``, ``"-inf"``, ``"nan"``.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def score(value: Any) -> float | None:
    """Return a score written by `jsonable` as a float (`None` for a missing or odd value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    return None


def worst_first(value: float) -> float:
    """Return a sort key that ranks NaN with +inf: a NaN score is a failure, not a small error."""
    return math.inf if math.isnan(value) else value


def quantile(values: Iterable[float], q: float) -> float | None:
    """Return the ``q`` quantile of ``values`` (linear interpolation, numpy's default), or `None`.

    NaN counts as +inf.
    """
    ordered = sorted(worst_first(v) for v in values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    if ordered[low] == ordered[high]:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def format_score(value: Any) -> str:
    """Return a score for a table: 3 significant digits, ``-`` when absent."""
    number = score(value)
    if number is None:
        return "-"
    return f"{number:.3g}"


def format_finding_score(finding: Any) -> str:
    """A finding's deciding score, named: ``r 3.4e+06``, or ``|Δ| 0.0625 (bit for bit)``.

    A bit-for-bit comparison's score is an absolute difference, not a ratio to a bound
    (`linattn_verify.reporting.summary.finding_evidence`'s ``score_kind``).
    """
    text = format_score(finding.get("score"))
    if text == "-":
        return text
    if finding.get("score_kind") == "bitwise":
        return f"|Δ| {text} (bit for bit)"
    return f"r {text}"
