# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Summarize a run's case records: verdicts, score distributions, failures, worst cases, totals.

Every function here is pure: case records in (`linattn_verify._runner.case_record` dicts, as
read back from ``results.jsonl``), JSON-ready dicts out, in a deterministic order.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from linattn_verify.reporting._validate import SCHEMA_VERSION
from linattn_verify.reporting._values import jsonable, quantile, score, worst_first

FORM_ORDER = ("parallel", "chunk", "recurrent")
DTYPE_ORDER = ("float64", "float32", "float16", "bfloat16")
TENSOR_ORDER = (
    "o",
    "final_state",
    "final_key_sum",
    "dq",
    "dk",
    "dv",
    "dg",
    "dinitial_state",
    "dinitial_key_sum",
)
WORST_CASES = 10
"""Rows of the worst-cases table."""


def _rank(value: Any, order: Sequence[str]) -> tuple[int, str]:
    text = "" if value is None else str(value)
    return (order.index(text) if text in order else len(order), text)


def is_skipped(record: Mapping[str, Any]) -> bool:
    """Whether the property did not apply to the case (it is then neither passed nor failed)."""
    return bool(record.get("skipped"))


def is_failure(record: Mapping[str, Any]) -> bool:
    """Whether the case failed: the property was violated or the harness raised on it."""
    return not record.get("ok", False) and not is_skipped(record)


def replay_command(failure_file: str | None) -> str | None:
    """Return the command that re-runs a saved failure, or `None` when none was saved."""
    return None if not failure_file else f"linattn-verify replay {shlex.quote(failure_file)}"


def case_verdicts(
    cases: Iterable[Mapping[str, Any]], explicit: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Return one verdict per (kernel, property): held, failed, or n/a when every case skipped.

    Verdicts in ``explicit`` (a search's own account, e.g. `check`'s) replace those derived from
    the cases for the same kernel and property.
    """
    derived: dict[tuple[str, str], dict[str, Any]] = {}
    for record in cases:
        key = (str(record.get("kernel", "?")), str(record.get("property") or "?"))
        verdict = derived.setdefault(
            key,
            {
                "kernel": key[0],
                "property": key[1],
                "status": "held",
                "examples": 0,
                "skipped": 0,
                "seconds": 0.0,
                "message": "",
                "failure_file": None,
            },
        )
        verdict["examples"] += 1
        verdict["skipped"] += int(is_skipped(record))
        verdict["seconds"] = round(verdict["seconds"] + float(record.get("seconds") or 0.0), 3)
        if is_failure(record):
            verdict["status"] = "failed"
            verdict["message"] = verdict["message"] or str(_message(record))
            verdict["failure_file"] = record.get("failure_file") or verdict["failure_file"]
    for verdict in derived.values():
        if verdict["status"] == "held" and verdict["skipped"] == verdict["examples"]:
            verdict["status"] = "n/a"
    for given in explicit:
        derived[(str(given["kernel"]), str(given["property"]))] = dict(given)
    return [derived[key] for key in sorted(derived)]


def _message(record: Mapping[str, Any]) -> str:
    return str(record.get("error") or record.get("report") or "")


def _tensor_scores(record: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    tensors = record.get("tensors") or {}
    return tensors.items() if isinstance(tensors, Mapping) else ()


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "max": max((worst_first(v) for v in values), default=None),
        "p999": quantile(values, 0.999),
        "median": quantile(values, 0.5),
    }


def distributions(cases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the score distribution of each (kernel, form, dtype, tensor) over its cases.

    ``r`` and ``rho`` are the max, p99.9 and median over the group's cases of each case's
    largest r (and ρ); ``eta`` is the largest η; ``element`` holds the element-level figures
    the property reports: the largest per-case p99.9 of r and the median of per-case median ρ.
    """
    groups: dict[tuple[str, Any, str, str], dict[str, list[float]]] = {}
    for record in cases:
        if is_skipped(record):
            continue
        for tensor, by_name in _tensor_scores(record):
            key = (
                str(record.get("kernel", "?")),
                record.get("form"),
                str(record.get("dtype", "?")),
                str(tensor),
            )
            group = groups.setdefault(key, {})
            for name in ("max_r", "max_rho", "max_eta", "p999_r", "median_rho"):
                value = score(by_name.get(name)) if isinstance(by_name, Mapping) else None
                if value is not None:
                    group.setdefault(name, []).append(value)
    out = []
    for key in sorted(
        groups,
        key=lambda k: (
            k[0],
            _rank(k[1], FORM_ORDER),
            _rank(k[2], DTYPE_ORDER),
            _rank(k[3], TENSOR_ORDER),
        ),
    ):
        group = groups[key]
        eta = group.get("max_eta", [])
        p999 = group.get("p999_r", [])
        median_rho = group.get("median_rho", [])
        out.append(
            {
                "kernel": key[0],
                "form": key[1],
                "dtype": key[2],
                "tensor": key[3],
                "cases": max((len(v) for v in group.values()), default=0),
                "r": _stats(group.get("max_r", [])),
                "rho": _stats(group.get("max_rho", [])),
                "eta": max((worst_first(v) for v in eta), default=None),
                "element": {
                    "p999_r": max((worst_first(v) for v in p999), default=None),
                    "median_rho": statistics.median(median_rho) if median_rho else None,
                },
            }
        )
    return out


def failures(
    cases: Iterable[Mapping[str, Any]], verdicts: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Return the failures, each with its replay command.

    Failing cases that share a saved file are one failure: a Hypothesis search fails on every
    shrinking step and saves each over the last, so the entry keeps the last case (the shrunk,
    minimal one, which the file holds) and counts the rest in ``occurrences``. Cases without a
    file are grouped by kernel, property and dtype the same way. A failed verdict without any
    failing case record still appears, with its own message and file.
    """
    found: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for record in cases:
        if not is_failure(record):
            continue
        dtype = record.get("dtype")
        failure_file = record.get("failure_file")
        key = (
            str(record.get("kernel", "?")),
            str(record.get("property") or "?"),
            str(failure_file) if failure_file else None if dtype is None else str(dtype),
        )
        previous = found.get(key)
        found[key] = {
            "kernel": key[0],
            "property": key[1],
            "dtype": None if dtype is None else str(dtype),
            "case": str(record.get("case") or record.get("spec") or ""),
            "message": _message(record),
            "failure_file": failure_file,
            "replay": replay_command(failure_file),
            "occurrences": 1 if previous is None else previous["occurrences"] + 1,
        }
    seen = {(k[0], k[1]) for k in found}
    for verdict in verdicts:
        key2 = (str(verdict["kernel"]), str(verdict["property"]))
        if verdict.get("status") != "failed" or key2 in seen:
            continue
        message = str(verdict.get("message") or "")
        failure_file = verdict.get("failure_file")
        found[(*key2, None)] = {
            "kernel": key2[0],
            "property": key2[1],
            "dtype": None,
            "case": message.splitlines()[0] if message else "",
            "message": message,
            "failure_file": failure_file,
            "replay": replay_command(failure_file),
            "occurrences": 1,
        }
    return sorted(
        found.values(),
        key=lambda f: (f["kernel"], f["property"], _rank(f["dtype"], DTYPE_ORDER), f["case"]),
    )


def worst_cases(cases: Iterable[Mapping[str, Any]], n: int = WORST_CASES) -> list[dict[str, Any]]:
    """Return the ``n`` scored cases with the largest worst r (or η), largest first."""
    scored = []
    for index, record in enumerate(cases):
        value = score(record.get("worst_r"))
        if value is not None and not is_skipped(record):
            scored.append((-worst_first(value), index, record))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [dict(record) for _, _, record in scored[:n]]


def totals(
    cases: Sequence[Mapping[str, Any]], verdicts: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Count the cases: passed, failed (property violated), skipped, errors (harness raised)."""
    errors = sum(1 for r in cases if "error" in r and is_failure(r))
    skipped = sum(1 for r in cases if is_skipped(r))
    failed = sum(1 for r in cases if is_failure(r)) - errors
    verdict_failed = any(v.get("status") == "failed" for v in verdicts)
    return {
        "cases": len(cases),
        "passed": len(cases) - errors - skipped - failed,
        "failed": failed,
        "skipped": skipped,
        "errors": errors,
        "ok": failed == 0 and errors == 0 and not verdict_failed,
    }


def build_document(
    *,
    command: str,
    status: str,
    started: str,
    finished: str | None,
    seconds: float,
    environment: Mapping[str, Any],
    arguments: Mapping[str, Any],
    kernels: Sequence[Mapping[str, Any]],
    cases: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Return the run document (schema ``linattn-verify/run/v1``) for these records.

    Args:
        command: ``"run"`` or ``"check"``.
        status: ``"complete"``, or ``"incomplete"`` for an interrupted run.
        started: UTC start time, ISO 8601.
        finished: UTC end time, or `None` when incomplete.
        seconds: Wall-clock duration.
        environment: Device, versions, profile and seed.
        arguments: The command's arguments.
        kernels: One entry per kernel (name, form, capabilities, recipes).
        cases: The case records in the order they finished.
        verdicts: Explicit per-property verdicts (`check`'s); the rest are derived from cases.
            Default: `()`.

    Returns:
        The JSON-ready document.
    """
    all_verdicts = case_verdicts(cases, verdicts)
    document: dict[str, Any] = jsonable(
        {
            "schema": SCHEMA_VERSION,
            "command": command,
            "status": status,
            "started": started,
            "finished": finished,
            "seconds": round(max(seconds, 0.0), 3),
            "environment": dict(environment),
            "arguments": dict(arguments),
            "kernels": list(kernels),
            "cases": list(cases),
            "verdicts": all_verdicts,
            "distributions": distributions(cases),
            "failures": failures(cases, all_verdicts),
            "worst_cases": worst_cases(cases),
            "totals": totals(cases, all_verdicts),
        }
    )
    return document
