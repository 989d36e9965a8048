# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Read a version 1 run document (``linattn-verify/run/v1``) as version 2.

Version 1 recorded a case as a loose dict: ``ok``, ``skipped`` (the reason a property did not
apply), ``tensors`` (``{"o": {"max_r": .., "max_rho": .., "p999_r": .., "median_rho": ..,
"max_eta": ..}}``), ``report`` (the failure message) or ``error`` (a harness error). Here

- each entry of ``tensors`` becomes an oracle `Comparison` (``scores.r`` = ``max_r``, ``rho`` =
  ``max_rho``, ``eta`` = ``max_eta``, ...; ``deciding`` = max(r, η); ``failed`` when that is
  past `FAIL_THRESHOLD`). Version 1 kept no per-element detail (counts, values at the worst
  element), so a failed comparison says so in its ``reason``;
- ``ok`` / ``skipped`` / ``error`` become the status ``held``, ``failed`` or
  ``not_applicable`` (a harness error: ``failed`` with ``error``), and the failure message,
  the harness error or the skip reason becomes ``reason``;
- verdict statuses ``n/a`` and ``not run`` become ``not_applicable`` and ``not_run``, and a
  verdict's ``skipped`` count its ``not_applicable`` count;
- the summary sections a version 1 run computed from what it knew (distributions, failures with
  their messages) are kept as they are; the totals' ``skipped`` becomes ``not_applicable``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from linattn_verify.reporting._validate import SCHEMA_V1, SCHEMA_VERSION, validate
from linattn_verify.reporting._values import jsonable, score
from linattn_verify.results import (
    FAIL_THRESHOLD,
    CaseRecord,
    Comparison,
    PropertyVerdict,
    Scores,
    Status,
)

NO_DETAIL = f"recorded by a {SCHEMA_V1} document, which kept no per-element detail"
"""The ``reason`` of a failed comparison read from version 1."""

VERDICT_STATUSES: dict[str, Status] = {
    "held": "held",
    "failed": "failed",
    "n/a": "not_applicable",
    "not run": "not_run",
}
"""Version 1 verdict statuses and their version 2 names."""


def _comparison(kernel: str, tensor: str, by_name: Mapping[str, Any]) -> Comparison:
    r = score(by_name.get("max_r"))
    eta = score(by_name.get("max_eta"))
    deciding = max((v for v in (r, eta) if v is not None), default=0.0, key=_rankable)
    failed = math.isnan(deciding) or deciding > FAIL_THRESHOLD
    return Comparison(
        tensor=tensor,
        subject=kernel,
        reference="oracle",
        status="failed" if failed else "held",
        deciding=deciding,
        scores=Scores(
            r=0.0 if r is None else r,
            p999_r=score(by_name.get("p999_r")),
            eta=eta,
            rho=score(by_name.get("max_rho")),
            median_rho=score(by_name.get("median_rho")),
        ),
        reason=NO_DETAIL if failed else None,
    )


def _rankable(value: float) -> float:
    return math.inf if math.isnan(value) else value


def case_from_v1(record: Mapping[str, Any]) -> CaseRecord:
    """Return a version 1 case record (a dict) as a `CaseRecord`."""
    kernel = str(record.get("kernel", "?"))
    tensors = record.get("tensors") or {}
    comparisons = tuple(
        _comparison(kernel, str(name), by_name)
        for name, by_name in tensors.items()
        if isinstance(by_name, Mapping)
    )
    error = record.get("error")
    skipped = record.get("skipped")
    status: Status
    if error is not None:
        status, reason = "failed", str(error)
    elif skipped:
        status, reason = "not_applicable", str(skipped)
    elif record.get("ok"):
        status, reason = "held", None
    else:
        status, reason = "failed", record.get("report")
    return CaseRecord(
        kernel=kernel,
        form=None if record.get("form") is None else str(record["form"]),
        property=str(record.get("property") or "?"),
        dtype=str(record.get("dtype") or "?"),
        T=int(record.get("T") or 0),
        K=int(record.get("K") or 0),
        V=int(record.get("V") or 0),
        case=str(record.get("case") or record.get("spec") or ""),
        status=status,
        comparisons=comparisons,
        reason=None if reason is None else str(reason),
        seconds=float(record.get("seconds") or 0.0),
        failure_file=record.get("failure_file"),
        error=error is not None,
    )


def verdict_from_v1(verdict: Mapping[str, Any]) -> PropertyVerdict:
    """Return a version 1 verdict (a dict) as a `PropertyVerdict`."""
    return PropertyVerdict(
        kernel=str(verdict["kernel"]),
        property=str(verdict["property"]),
        status=VERDICT_STATUSES[str(verdict["status"])],
        examples=int(verdict["examples"]),
        not_applicable=int(verdict.get("skipped", 0)),
        seconds=float(verdict.get("seconds") or 0.0),
        message=str(verdict.get("message") or ""),
        failure_file=verdict.get("failure_file"),
    )


def is_v1_case(line: Mapping[str, Any]) -> bool:
    """Whether a line of ``results.jsonl`` is a version 1 case record (it has ``ok``)."""
    return "ok" in line and "status" not in line


def upgrade(document: Mapping[str, Any]) -> dict[str, Any]:
    """Return a version 1 run document as a version 2 one (validated both before and after).

    Raises:
        InvalidArgument: if ``document`` is not a valid version 1 document.
    """
    validate(document, version=SCHEMA_V1)
    totals = dict(document["totals"])
    upgraded: dict[str, Any] = jsonable(
        {
            **document,
            "schema": SCHEMA_VERSION,
            "cases": [case_from_v1(c).to_json() for c in document["cases"]],
            "verdicts": [verdict_from_v1(v).to_json() for v in document["verdicts"]],
            "worst_cases": [case_from_v1(c).to_json() for c in document["worst_cases"]],
            "totals": {
                "cases": totals["cases"],
                "passed": totals["passed"],
                "failed": totals["failed"],
                "not_applicable": totals["skipped"],
                "undecided": 0,
                "errors": totals["errors"],
                "ok": totals["ok"],
            },
        }
    )
    validate(upgraded)
    return upgraded


def as_current(document: Any) -> Mapping[str, Any]:
    """Return ``document`` validated as version 2, upgrading a version 1 document first.

    Raises:
        InvalidArgument: if ``document`` is not a valid run document of either version.
    """
    if isinstance(document, Mapping) and document.get("schema") == SCHEMA_V1:
        return upgrade(document)
    validate(document)
    current: Mapping[str, Any] = document
    return current
