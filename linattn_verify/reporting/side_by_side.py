# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels side by side: the cases of a run that several kernels of one family were judged on.

``run --side-by-side N`` runs cases drawn for each kernel on every other kernel of its family
that takes them (`linattn_verify.running.side_by_side_cases`); kernels with the same
capabilities draw the same cases anyway. A case is the same case when its text (the repro),
dtype and property are. For each family and dtype this gives, per case, every kernel's error
relative to the tensor's scale (``Scores.relative_error``, the worst over its tensors) and its
r, and per kernel the median and worst of both over the shared cases and the cases where it was
the most accurate, so "which kernel is more accurate here" has an answer on equal inputs. The
ranking is by relative error, not r: kernels with other precision recipes are judged against
other bounds, so a looser recipe shows a smaller r for a larger error.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linattn_verify.reporting.summary import cases_of, oracle_comparisons, rank
from linattn_verify.typing import DTYPE_NAMES


@dataclass(frozen=True)
class SharedCase:
    """One case judged on several kernels.

    Attributes:
        case: The case's text (its repro).
        T: Sequence length. K: Key head dimension. V: Value head dimension.
        scores: Deciding score (worst r or η against the oracle) by kernel.
        errors: Worst relative error over the tensors by kernel (`None` where not measured).
    """

    case: str
    T: int
    K: int
    V: int
    scores: Mapping[str, float]
    errors: Mapping[str, float | None]

    def accuracy(self, kernel: str) -> float:
        """What ranks ``kernel`` on this case: its relative error, else its r."""
        error = self.errors.get(kernel)
        return self.scores[kernel] if error is None else error

    @property
    def best(self) -> float:
        """The most accurate kernel's `accuracy` on the case."""
        return min(self.accuracy(k) for k in self.scores)


@dataclass(frozen=True)
class KernelSummary:
    """One kernel over the shared cases it took.

    Attributes:
        kernel: The kernel's name.
        cases: Shared cases it was judged on.
        median: Median deciding score r.
        worst: Largest deciding score r.
        median_error: Median relative error (`None` where not measured).
        worst_error: Largest relative error (`None` where not measured).
        most_accurate: Cases where its relative error was the lowest (ties count for each).
    """

    kernel: str
    cases: int
    median: float
    worst: float
    median_error: float | None
    worst_error: float | None
    most_accurate: int


@dataclass(frozen=True)
class SideBySide:
    """One family and dtype.

    Attributes:
        family: The family.
        dtype: The input dtype.
        property: The judging property.
        kernels: Kernels with at least one shared case, in the run's order.
        cases: The shared cases (by T, then text).
        summaries: One per kernel, in ``kernels`` order.
    """

    family: str
    dtype: str
    property: str
    kernels: tuple[str, ...]
    cases: tuple[SharedCase, ...]
    summaries: tuple[KernelSummary, ...]


def side_by_side(document: Mapping[str, Any]) -> list[SideBySide]:
    """Return the side-by-side comparisons of a run document (none when no case is shared)."""
    order = [k["name"] for k in document["kernels"]]
    families = {k["name"]: str(k.get("family", "linear_attn")) for k in document["kernels"]}
    groups: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for record in cases_of(document):
        scored = oracle_comparisons(record)
        if record.status == "not_applicable" or not scored or record.error:
            continue
        key = (families.get(record.kernel, "linear_attn"), record.dtype, record.property)
        entry = groups.setdefault(key, {}).setdefault(
            record.case, {"T": record.T, "K": record.K, "V": record.V, "scores": {}, "errors": {}}
        )
        entry["scores"][record.kernel] = max(c.deciding for c in scored)
        # A tensor whose exact value is all zeros has no scale: the others rank the case.
        errors = [c.scores.relative_error for c in scored if c.scores.relative_error is not None]
        entry["errors"][record.kernel] = max(errors) if errors else None
    out = []
    for (family, dtype, prop), by_case in groups.items():
        shared = [
            SharedCase(case, e["T"], e["K"], e["V"], dict(e["scores"]), dict(e["errors"]))
            for case, e in by_case.items()
            if len(e["scores"]) > 1
        ]
        if not shared:
            continue
        shared.sort(key=lambda c: (c.T, c.case))
        kernels = tuple(
            sorted(
                {k for c in shared for k in c.scores},
                key=lambda k: (order.index(k), "") if k in order else (len(order), k),
            )
        )
        summaries = []
        for kernel in kernels:
            mine = [c for c in shared if kernel in c.scores]
            scores = [c.scores[kernel] for c in mine]
            measured = [e for c in mine if (e := c.errors.get(kernel)) is not None]
            complete = len(measured) == len(mine)
            summaries.append(
                KernelSummary(
                    kernel,
                    len(mine),
                    statistics.median(scores),
                    max(scores),
                    statistics.median(measured) if complete else None,
                    max(measured) if complete else None,
                    sum(1 for c in mine if c.accuracy(kernel) <= c.best),
                )
            )
        out.append(SideBySide(family, dtype, prop, kernels, tuple(shared), tuple(summaries)))
    out.sort(key=lambda s: (s.family, rank(s.dtype, DTYPE_NAMES), s.property))
    return out


__all__ = ["KernelSummary", "SharedCase", "SideBySide", "side_by_side"]
