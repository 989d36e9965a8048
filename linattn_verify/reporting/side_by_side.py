# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels side by side: the cases of a run that several kernels of one family were judged on.

``run --side-by-side N`` runs cases drawn for each kernel on every other kernel of its family
that takes them (`linattn_verify.running.side_by_side_cases`); kernels with the same
capabilities draw the same cases anyway. A case is the same case when its text (the repro),
dtype and property are. For each family and dtype this gives, per case, every kernel's deciding
score, and per kernel its median and worst score over the shared cases and the cases where it
was the most accurate, so "which kernel is more accurate here" has an answer on equal inputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linattn_verify.reporting.summary import cases_of, rank
from linattn_verify.typing import DTYPE_NAMES


@dataclass(frozen=True)
class SharedCase:
    """One case judged on several kernels.

    Attributes:
        case: The case's text (its repro).
        T: Sequence length. K: Key head dimension. V: Value head dimension.
        scores: Deciding score (worst r or η against the oracle) by kernel.
    """

    case: str
    T: int
    K: int
    V: int
    scores: Mapping[str, float]

    @property
    def best(self) -> float:
        """The lowest score of the case (the most accurate kernel's)."""
        return min(self.scores.values())


@dataclass(frozen=True)
class KernelSummary:
    """One kernel over the shared cases it took.

    Attributes:
        kernel: The kernel's name.
        cases: Shared cases it was judged on.
        median: Median deciding score.
        worst: Largest deciding score.
        most_accurate: Cases where its score was the lowest (ties count for each).
    """

    kernel: str
    cases: int
    median: float
    worst: float
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
        scored = [c for c in record.comparisons if c.reference == "oracle"]
        if record.status == "not_applicable" or not scored or record.error:
            continue
        key = (families.get(record.kernel, "linear_attn"), record.dtype, record.property)
        entry = groups.setdefault(key, {}).setdefault(
            record.case, {"T": record.T, "K": record.K, "V": record.V, "scores": {}}
        )
        entry["scores"][record.kernel] = max(c.deciding for c in scored)
    out = []
    for (family, dtype, prop), by_case in groups.items():
        shared = [
            SharedCase(case, e["T"], e["K"], e["V"], dict(e["scores"]))
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
            summaries.append(
                KernelSummary(
                    kernel,
                    len(mine),
                    statistics.median(scores),
                    max(scores),
                    sum(1 for c in mine if c.scores[kernel] <= c.best),
                )
            )
        out.append(SideBySide(family, dtype, prop, kernels, tuple(shared), tuple(summaries)))
    out.sort(key=lambda s: (s.family, rank(s.dtype, DTYPE_NAMES), s.property))
    return out


__all__ = ["KernelSummary", "SharedCase", "SideBySide", "side_by_side"]
