# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Summarize a run's case records: verdicts, score distributions, failures, worst cases, totals.

Every function here is pure: `CaseRecord` and `PropertyVerdict` objects in, read by attribute,
JSON-ready dicts (or records) out, in a deterministic order. `cases_of` and `verdicts_of` read a
run document's records back, for the renderers.
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from linattn_verify.reporting._validate import SCHEMA_VERSION
from linattn_verify.reporting._values import jsonable, quantile, worst_first
from linattn_verify.results import CaseRecord, Comparison, PropertyVerdict, base_tensor
from linattn_verify.results.message import BREACHED_DECLARATION, EXPLAINED_BY_RECIPE
from linattn_verify.typing import DTYPE_NAMES, FORMS

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
"""Report order of the tensors; others follow, by name."""
WORST_CASES = 10
"""Rows of the worst-cases table."""
BIASED_T = 4.0
"""A case's tensor counts as biased when its |bias_t| exceeds this (a 4-sigma excursion for
unbiased independent rounding; `linattn_verify.compare.oracle.signed_bias`)."""
UNDECIDED = frozenset({"undefined", "out_of_contract", "ill_conditioned", "not_run"})
"""Case statuses that are neither a pass nor a defect, nor a property that did not apply."""


def rank(value: str | None, order: Sequence[str]) -> tuple[int, str]:
    """Sort key: ``value``'s place in ``order``, values outside it after, by name."""
    text = "" if value is None else value
    return (order.index(text) if text in order else len(order), text)


def is_failure(record: CaseRecord) -> bool:
    """Whether the case failed: the property was violated or the harness failed on it."""
    return record.status == "failed"


def oracle_comparisons(record: CaseRecord) -> list[Comparison]:
    """The record's comparisons against the oracle (the ones scored as r, ρ, η)."""
    return [c for c in record.comparisons if c.reference == "oracle"]


def failure_message(record: CaseRecord) -> str:
    """A failed record's message: the harness's error, or the property's report."""
    return (record.reason or "") if record.error else record.result.report()


def replay_command(failure_file: str | None) -> str | None:
    """Return the command that re-runs a saved failure, or `None` when none was saved."""
    return None if not failure_file else f"linattn-verify replay {shlex.quote(failure_file)}"


def property_verdicts(
    cases: Iterable[CaseRecord], explicit: Iterable[PropertyVerdict] = ()
) -> list[PropertyVerdict]:
    """Return one verdict per (kernel, property), sorted by kernel then property.

    The verdicts are derived from the cases (`PropertyVerdict.of_cases`); those in ``explicit``
    (a search's own account, e.g. `check`'s) replace them for the same kernel and property.
    """
    verdicts = {(v.kernel, v.property): v for v in PropertyVerdict.of_cases(cases)}
    verdicts.update({(v.kernel, v.property): v for v in explicit})
    return [verdicts[key] for key in sorted(verdicts)]


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "max": max((worst_first(v) for v in values), default=None),
        "p999": quantile(values, 0.999),
        "median": quantile(values, 0.5),
    }


def _largest(values: Sequence[float]) -> float | None:
    return max((worst_first(v) for v in values), default=None)


def distributions(cases: Iterable[CaseRecord]) -> list[dict[str, Any]]:
    """Return the score distribution of each (kernel, form, dtype, tensor) over its cases.

    Only comparisons against the oracle count. ``r`` and ``rho`` are the max, p99.9 and median
    over the group's comparisons of their largest r (and ρ); ``eta`` is the largest η;
    ``element`` holds the element-level figures: the largest per-case p99.9 of r and the median
    of per-case median ρ; ``ulps`` (16-bit outputs, else `None`) the mean shares of correctly
    and faithfully rounded elements and the largest error in ulps; ``bias`` the mean signed
    bias Σ(x̂ - x)/ΣB and the share of cases whose |t| exceeds `BIASED_T`. Cases the property
    did not apply to are left out.
    """
    groups: dict[tuple[str, str | None, str, str], dict[str, list[float]]] = {}
    for record in cases:
        if record.status == "not_applicable":
            continue
        for comparison in oracle_comparisons(record):
            key = (record.kernel, record.form, record.dtype, comparison.tensor)
            group = groups.setdefault(key, {})
            s = comparison.scores
            named = {"r": s.r, "rho": s.rho, "eta": s.eta, "p999_r": s.p999_r}
            named["median_rho"] = s.median_rho
            named["correctly_rounded"] = s.correctly_rounded
            named["faithfully_rounded"] = s.faithfully_rounded
            named["max_ulps"] = s.max_ulps
            named["bias"] = s.bias
            named["biased"] = None if s.bias_t is None else float(abs(s.bias_t) > BIASED_T)
            group.setdefault("cases", []).append(1.0)
            for name, value in named.items():
                if value is not None:
                    group.setdefault(name, []).append(value)
    order = sorted(
        groups,
        key=lambda k: (k[0], rank(k[1], FORMS), rank(k[2], DTYPE_NAMES), rank(k[3], TENSOR_ORDER)),
    )
    out = []
    for key in order:
        group = groups[key]
        median_rho = group.get("median_rho", [])
        entry: dict[str, Any] = {
            "kernel": key[0],
            "form": key[1],
            "dtype": key[2],
            "tensor": key[3],
            "cases": len(group["cases"]),
            "r": _stats(group.get("r", [])),
            "rho": _stats(group.get("rho", [])),
            "eta": _largest(group.get("eta", [])),
            "element": {
                "p999_r": _largest(group.get("p999_r", [])),
                "median_rho": statistics.median(median_rho) if median_rho else None,
            },
        }
        # Written only where measured, so documents of older runs keep their exact shape.
        measured = {"ulps": _ulps(group), "bias": _bias(group)}
        entry.update({k: v for k, v in measured.items() if v is not None})
        out.append(entry)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _ulps(group: Mapping[str, list[float]]) -> dict[str, float | None] | None:
    """Ulp figures of a 16-bit output over the cases: mean shares and the worst error."""
    if not group.get("max_ulps"):
        return None
    return {
        "correctly_rounded": _mean(group.get("correctly_rounded", [])),
        "faithfully_rounded": _mean(group.get("faithfully_rounded", [])),
        "max": _largest(group["max_ulps"]),
    }


def _bias(group: Mapping[str, list[float]]) -> dict[str, float | None] | None:
    """The signed bias over the cases: its mean, and the share of cases biased past `BIASED_T`."""
    if not group.get("bias"):
        return None
    return {"mean": _mean(group["bias"]), "biased_share": _mean(group.get("biased", []))}


def _failure_entry(
    kernel: str,
    prop: str,
    dtype: str | None,
    case: str,
    message: str,
    failure_file: str | None,
    occurrences: int,
    record: CaseRecord | None = None,
) -> dict[str, Any]:
    return {
        **({} if record is None else finding_evidence(record)),
        "kernel": kernel,
        "property": prop,
        "properties": [prop],
        "dtype": dtype,
        "case": case,
        "message": message,
        "failure_file": failure_file,
        "replay": replay_command(failure_file),
        "occurrences": occurrences,
    }


def finding_evidence(record: CaseRecord) -> dict[str, Any]:
    """What a failed case shows at a glance: severity, and the tensor and score that decided.

    ``severity``: ``"realistic"`` or ``"extreme-range"`` (`linattn_verify.triage.severity`) for
    a failed comparison, the worse one when several failed; ``"kernel failure"`` when the kernel
    raised or broke the calling convention (no comparison failed); ``"harness error"`` for a
    bug of ours on the case. The score is the worst failed comparison against a bound (r, η or
    a pair ratio: ``score_kind`` ``"bound"``); a bit-for-bit comparison's score, an absolute
    difference, is shown only where no bound comparison failed (``"bitwise"``), so that a
    |Δ| of 0.06 is never read as a small r. ``kind``: ``"declaration"`` where a change to the
    declared recipe explains the failure (`linattn_verify.diagnosis`: "consistent with ..."), or
    the kernel failed only a declared convention (`BREACHED_DECLARATION`: a NaN on a 0/0 row of a
    kernel declared to return 0), else ``"defect"``.
    """
    if record.error:
        return {"severity": "harness error", "kind": "defect"}
    failed = [c for c in record.comparisons if not c.ok]
    if not failed:
        breach = BREACHED_DECLARATION in (record.reason or "")
        return {"severity": "kernel failure", "kind": "declaration" if breach else "defect"}
    bound = [c for c in failed if c.kind != "bitwise"]
    worst = max(bound or failed, key=lambda c: worst_first(c.deciding))
    realistic = any(c.severity in (None, "realistic") for c in failed)
    return {
        "severity": "realistic" if realistic else "extreme-range",
        "tensor": worst.tensor,
        "score": worst.deciding,
        "score_kind": "bound" if bound else "bitwise",
        "T": record.T,
        "kind": "declaration" if declaration_explains(record.diagnosis) else "defect",
    }


def declaration_explains(diagnosis: str | None) -> bool:
    """Whether a diagnosis found a declared-recipe change that explains the failure."""
    return bool(diagnosis) and str(diagnosis).startswith(EXPLAINED_BY_RECIPE)


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\bnan\b|\binf\b")
_NONFINITE = re.compile(
    r"(\w+) holds \d+ (?:NaN|non-finite) value\(s\) of \d+[^(]*first at index (\([\d, ]*\))"
)


_NUMBER_RUN = re.compile(r"#(?:\s*,\s*#)+")


def _masked(message: str) -> str:
    """``message`` with every number, and every list of numbers, masked as ``#``.

    A shape of any rank is one ``#``: the same reshape error raised for a 4-d and a 5-d view
    (a kernel reshaping v by q's head dim) is one root cause.
    """
    return _NUMBER_RUN.sub("#", _NUMBER.sub("#", message))


def root_causes(record: CaseRecord) -> set[tuple[str, ...]]:
    """Return the keys naming a failing case's root cause; failures sharing one are one finding.

    * ``("nonfinite", kernel, case, tensor, index)``: a non-finite value, at the worst element of
      a failed comparison that counted a finite/non-finite mismatch, or at the first element a
      kernel failure names (``"o holds 2 NaN value(s) of 8, first at index (0, 1, 0, 0)"``):
      the same case and the same non-finite element is one root cause;
    * ``("message", kernel, text)``: a kernel failure (the kernel raised or broke the calling
      convention: no comparison failed), by its first line with every number and list of
      numbers masked (`_masked`): the same kernel failure whatever the case's sizes.

    A harness error, and a failure with neither, has none: it is a finding of its own.
    """
    if record.error or record.ok:
        return set()
    keys: set[tuple[str, ...]] = set()
    failed = [c for c in record.comparisons if not c.ok]
    for c in failed:
        if c.counts.nonfinite and c.worst is not None:
            tensor = base_tensor(c.tensor)
            keys.add(("nonfinite", record.kernel, record.case, tensor, str(c.worst.index)))
    if record.reason and not failed:
        first = record.reason.splitlines()[0]
        keys.add(("message", record.kernel, _masked(first)))
        for tensor, index in _NONFINITE.findall(first):
            keys.add(("nonfinite", record.kernel, record.case, tensor, index))
    return keys


def _grouped(entries: list[tuple[dict[str, Any], set[tuple[str, ...]]]]) -> list[dict[str, Any]]:
    """Merge the entries that share a root-cause key (transitively), in their given order.

    A group is its first entry, listing every property of the group in ``properties`` (in the
    entries' order) and the sum of their ``occurrences``; a defect if any of them is one.
    """
    parent = list(range(len(entries)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[str, ...], int] = {}
    for i, (_, keys) in enumerate(entries):
        for key in sorted(keys):
            if key in owner:
                a, b = find(owner[key]), find(i)
                parent[max(a, b)] = min(a, b)
            else:
                owner[key] = i
    groups: dict[int, dict[str, Any]] = {}
    for i, (entry, _) in enumerate(entries):
        root = find(i)
        if root not in groups:
            groups[root] = dict(entry, properties=list(entry["properties"]))
            continue
        group = groups[root]
        group["occurrences"] += entry["occurrences"]
        if entry["property"] not in group["properties"]:
            group["properties"].append(entry["property"])
        if entry.get("kind") == "defect":
            # A defect on the same case explains what a declaration would: it is the finding.
            group["kind"] = "defect"
    return [groups[root] for root in sorted(groups)]


def failures(
    cases: Iterable[CaseRecord], verdicts: Iterable[PropertyVerdict] = ()
) -> list[dict[str, Any]]:
    """Return the findings: failures grouped by root cause, each with message and replay command.

    Failing cases that share a saved file are one failure: a Hypothesis search fails on every
    shrinking step and saves each over the last, so the entry keeps the last case (the shrunk,
    minimal one, which the file holds) and counts the rest in ``occurrences``. Cases without a
    file are grouped by kernel, property and dtype the same way. A failed verdict without any
    failing case record still appears, with its own message and file.

    One root cause, one finding: failures of several properties whose (last) cases share a
    `root_causes` key (the same case and non-finite element, or the same kernel failure
    message) are one entry, the first in (kernel, property, dtype, case) order, naming every
    property it broke in ``properties``; then the entries showing one symptom are merged
    (`_by_symptom`). The per-property verdicts are not grouped.
    """
    found: dict[tuple[str, str, tuple[str, str]], dict[str, Any]] = {}
    causes: dict[tuple[str, str, tuple[str, str]], set[tuple[str, ...]]] = {}
    for record in cases:
        if not is_failure(record):
            continue
        where = ("file", record.failure_file) if record.failure_file else ("dtype", record.dtype)
        key = (record.kernel, record.property, where)
        previous = found.get(key)
        found[key] = _failure_entry(
            record.kernel,
            record.property,
            record.dtype,
            record.case,
            failure_message(record),
            record.failure_file,
            1 if previous is None else previous["occurrences"] + 1,
            record,
        )
        causes[key] = root_causes(record)
    seen = {(k[0], k[1]) for k in found}
    for verdict in verdicts:
        if verdict.status != "failed" or (verdict.kernel, verdict.property) in seen:
            continue
        message = verdict.message
        found[(verdict.kernel, verdict.property, ("verdict", ""))] = _failure_entry(
            verdict.kernel,
            verdict.property,
            None,
            message.splitlines()[0] if message else "",
            message,
            verdict.failure_file,
            1,
        )
    order = sorted(
        found,
        key=lambda k: (
            found[k]["kernel"],
            found[k]["property"],
            rank(found[k]["dtype"], DTYPE_NAMES),
            found[k]["case"],
        ),
    )
    return _by_symptom(_grouped([(found[k], causes.get(k, set())) for k in order]))


def _by_symptom(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge the findings that show one symptom, in their given order.

    One symptom: the same kernel and tensor, failing the same way (a wrong non-finite value, or
    an error past the bound) at the same severity, and of the same kind: a failure a
    declaration explains is never merged into a defect (nor a defect into it). A run judges
    many unrelated cases, and one defect fails many of them, in every dtype; a reader wants it
    once, with its smallest case.
    The merged entry keeps the smallest-T case (its message, file and replay), lists every
    property and dtype (``dtypes``) and sums the occurrences. Findings without a deciding
    tensor (a kernel failure, a harness error) are left as they are.
    """
    merged: dict[tuple[str, str, bool, str, str], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for entry in entries:
        if "tensor" not in entry:
            out.append(entry)
            continue
        key = (
            str(entry["kernel"]),
            base_tensor(str(entry["tensor"])),
            math.isfinite(entry["score"]),
            str(entry["severity"]),
            str(entry.get("kind", "defect")),
        )
        group = merged.get(key)
        if group is None:
            group = merged[key] = dict(entry, dtypes=[entry["dtype"]] if entry["dtype"] else [])
            out.append(group)
            continue
        group["occurrences"] += entry["occurrences"]
        group["properties"] += [p for p in entry["properties"] if p not in group["properties"]]
        if entry["dtype"] and entry["dtype"] not in group["dtypes"]:
            group["dtypes"].append(entry["dtype"])
        if entry["T"] < group["T"]:
            for field in ("property", "dtype", "case", "message", "failure_file", "replay"):
                group[field] = entry[field]
            group.update(T=entry["T"], score=entry["score"], tensor=entry["tensor"])
    return out


def worst_cases(cases: Iterable[CaseRecord], n: int = WORST_CASES) -> list[CaseRecord]:
    """Return the ``n`` records with the largest deciding score (`CaseRecord.worst_score`).

    Records without a comparison, and those the property did not apply to, are left out; ties
    keep the order the cases finished in.
    """
    scored = [
        (-worst_first(record.worst_score), index, record)
        for index, record in enumerate(cases)
        if record.comparisons and record.status != "not_applicable"
    ]
    scored.sort(key=lambda item: (item[0], item[1]))
    return [record for _, _, record in scored[:n]]


def totals(cases: Sequence[CaseRecord], verdicts: Iterable[PropertyVerdict] = ()) -> dict[str, Any]:
    """Count the cases by outcome; ``ok`` when none failed and no verdict failed.

    ``failed``: a property was violated; ``errors``: the harness failed on the case;
    ``not_applicable``: the property did not apply; ``undecided``: undefined, out of contract,
    ill-conditioned or not run; ``passed``: held (within rounding included); ``largest_T`` and
    ``largest_head_dim``: the largest sizes of the cases judged (what a check's size reach got
    to).
    """
    errors = sum(1 for r in cases if r.error)
    failed = sum(1 for r in cases if is_failure(r) and not r.error)
    not_applicable = sum(1 for r in cases if r.status == "not_applicable" and not r.error)
    undecided = sum(1 for r in cases if r.status in UNDECIDED and not r.error)
    passed = sum(1 for r in cases if r.status in ("held", "within_rounding") and not r.error)
    verdict_failed = any(v.status == "failed" for v in verdicts)
    judged = [r for r in cases if r.status != "not_applicable" and not r.error]
    return {
        "cases": len(cases),
        "passed": passed,
        "failed": failed,
        "not_applicable": not_applicable,
        "undecided": undecided,
        "errors": errors,
        "ok": failed == 0 and errors == 0 and not verdict_failed,
        "largest_T": max((r.T for r in judged), default=0),
        "largest_head_dim": max((max(r.K, r.V) for r in judged), default=0),
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
    cases: Sequence[CaseRecord],
    verdicts: Sequence[PropertyVerdict] = (),
) -> dict[str, Any]:
    """Return the run document (schema `SCHEMA_VERSION`) for these records.

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
    all_verdicts = property_verdicts(cases, verdicts)
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
            "cases": [record.to_json() for record in cases],
            "verdicts": [verdict.to_json() for verdict in all_verdicts],
            "distributions": distributions(cases),
            "failures": failures(cases, all_verdicts),
            "worst_cases": [record.to_json() for record in worst_cases(cases)],
            "totals": totals(cases, all_verdicts),
        }
    )
    return document


class DecodedRun(dict[str, Any]):
    """A run document that decodes each section of case records once (`cases_of`).

    A render reads the cases in every table, map and plot; wrapping the document once
    (`linattn_verify.reporting.render_report` does) makes those reads share one decoding.
    """

    def __init__(self, document: Mapping[str, Any]) -> None:
        super().__init__(document)
        self._records: dict[str, list[CaseRecord]] = {}

    def records(self, section: str) -> list[CaseRecord]:
        """The decoded records of ``section`` (decoded on the first call)."""
        if section not in self._records:
            self._records[section] = [CaseRecord.from_json(c) for c in self.get(section) or ()]
        return self._records[section]


def cases_of(document: Mapping[str, Any], section: str = "cases") -> list[CaseRecord]:
    """Read the case records of a run document back (``section``: ``cases``, ``worst_cases``)."""
    if isinstance(document, DecodedRun):
        return list(document.records(section))
    return [CaseRecord.from_json(c) for c in document.get(section) or ()]


def verdicts_of(document: Mapping[str, Any]) -> list[PropertyVerdict]:
    """Read the verdicts of a run document back."""
    return [PropertyVerdict.from_json(v) for v in document.get("verdicts") or ()]
