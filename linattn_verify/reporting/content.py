# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a report says, independent of its format: a headline and tables of plain text.

`markdown` and `html` render the same `Table` objects, each escaping every cell for its own
format, so no kernel-supplied text reaches either page unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from linattn_verify.reporting._values import format_score
from linattn_verify.reporting.summary import cases_of, verdicts_of

PLOT_CAPTIONS = {
    "error_vs_T.png": "Worst r = err/B of each case against T, per form (columns) and dtype "
    "(rows), with the running maximum. r <= 1 is guaranteed for a correct kernel; r > 2 fails.",
    "rho_vs_T.png": "Error growth: ρ = err/(u·M), the error in effective roundings, against T. "
    "The error model predicts ρ of about √c, with c the rounding count, which grows with T; "
    "the dotted guide is ∝ √T.",
    "histograms.png": "Histograms of each case's worst r, per dtype, one curve per form.",
    "forms.png": "Parallel, chunked and recurrent side by side: max r per tensor over the cases.",
}


@dataclass(frozen=True)
class Table:
    """A titled table of plain-text cells (renderers escape them).

    Attributes:
        title: Section heading.
        headers: Column names.
        rows: Cell text, row by row.
        note: A sentence under the heading. Default: `""`.
        status: Per row, ``"ok"``, ``"fail"`` or ``""`` (for highlighting). Default: none.
    """

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    note: str = ""
    status: Sequence[str] = field(default_factory=tuple)


def headline(document: Mapping[str, Any]) -> str:
    """Return one line: verdict, command, case counts, largest sizes, duration, start time."""
    totals = document["totals"]
    verdict = "PASSED" if totals["ok"] else "FAILED"
    undecided = f", {totals['undecided']} undecided" if totals["undecided"] else ""
    largest = (
        f" · largest T {totals['largest_T']}, head dim {totals['largest_head_dim']}"
        if totals.get("largest_T")
        else ""
    )
    return (
        f"{verdict} · linattn-verify {document['command']} · {totals['cases']} cases: "
        f"{totals['passed']} passed, {totals['failed']} failed, "
        f"{totals['not_applicable']} not applicable{undecided}, {totals['errors']} errors"
        f"{largest} · {document['seconds']:.1f} s · started {document['started']}"
    )


def incomplete_warning(document: Mapping[str, Any]) -> str:
    """Return a warning for an interrupted run, else ``""``."""
    if document.get("status") == "complete":
        return ""
    return (
        "This run did not finish: the report was rebuilt from results.jsonl and covers only "
        "the cases that completed."
    )


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return str(value)


def environment_table(document: Mapping[str, Any]) -> Table:
    """Device, interpreter mode, versions, Hypothesis profile and seed."""
    env = document["environment"]
    rows = [[str(key), _text(value)] for key, value in env.items()]
    return Table("Environment", ["", "value"], rows)


def kernels_table(document: Mapping[str, Any]) -> Table:
    """Each kernel with its family, form and declared capabilities."""
    rows = []
    for kernel in document["kernels"]:
        caps = kernel.get("capabilities") or {}
        described = "; ".join(f"{k}={_text(v)}" for k, v in caps.items())
        # Documents written before the delta family hold linear-attention kernels only.
        family = str(kernel.get("family", "linear_attn"))
        rows.append([kernel["name"], family, _text(kernel.get("form")), described or "-"])
    return Table("Kernels", ["kernel", "family", "form", "declared capabilities"], rows)


def recipes_table(document: Mapping[str, Any]) -> Table:
    """The declared precision recipe of each kernel per dtype (what its error bound assumes)."""
    columns: list[str] = []
    entries = []
    for kernel in document["kernels"]:
        for dtype, recipe in (kernel.get("recipes") or {}).items():
            entries.append((kernel["name"], dtype, recipe))
            columns += [k for k in recipe if k not in columns]
    rows = [[name, dtype, *(_text(r.get(c)) for c in columns)] for name, dtype, r in entries]
    return Table(
        "Precision recipes",
        ["kernel", "dtype", *columns],
        rows,
        note="The rounding the error bound charges for: a different recipe means a different "
        "bound, so r is comparable between runs only for the same recipe.",
    )


def verdicts_table(document: Mapping[str, Any]) -> Table:
    """Per kernel and property: held, failed, not_applicable or not_run, with the examples."""
    rows, status = [], []
    for v in verdicts_of(document):
        rows.append(
            [
                v.kernel,
                v.property,
                v.status,
                str(v.examples),
                str(v.not_applicable),
                f"{v.seconds:.1f}",
            ]
        )
        status.append("ok" if v.ok else "fail")
    return Table(
        "Verdicts",
        ["kernel", "property", "verdict", "examples", "not applicable", "seconds"],
        rows,
        status=status,
    )


def distributions_table(document: Mapping[str, Any]) -> Table:
    """Score distributions per kernel, dtype and tensor."""
    rows = []
    for d in document["distributions"]:
        r, rho, element = d["r"], d["rho"], d["element"]
        rows.append(
            [
                d["kernel"],
                _text(d["form"]),
                d["dtype"],
                d["tensor"],
                str(d["cases"]),
                format_score(r["max"]),
                format_score(r["p999"]),
                format_score(r["median"]),
                format_score(rho["max"]),
                format_score(rho["p999"]),
                format_score(rho["median"]),
                format_score(d["eta"]),
                format_score(element["p999_r"]),
                format_score(element["median_rho"]),
            ]
        )
    return Table(
        "Score distributions",
        [
            "kernel",
            "form",
            "dtype",
            "tensor",
            "cases",
            "max r",
            "p99.9 r",
            "median r",
            "max ρ",
            "p99.9 ρ",
            "median ρ",
            "max η",
            "elem. p99.9 r",
            "elem. median ρ",
        ],
        rows,
        note="r, ρ: max, p99.9 and median over the cases of each case's largest score; "
        "elem.: the element-level p99.9 of r (largest over the cases) and median ρ (median "
        "over the cases). A case fails when r or η exceeds 2.",
    )


def worst_cases_table(document: Mapping[str, Any]) -> Table:
    """The cases with the largest deciding score, naming the tensor that decided each."""
    rows, status = [], []
    for n, record in enumerate(cases_of(document, "worst_cases"), start=1):
        worst = record.worst
        tensor = "-" if worst is None else worst.tensor
        if worst is not None and worst.reference != "oracle":
            tensor += f" ({worst.reference})"
        rows.append(
            [
                str(n),
                record.kernel,
                record.property,
                record.dtype,
                str(record.T),
                tensor,
                format_score(record.worst_score),
                "FAILED" if not record.ok else record.status,
                record.case,
            ]
        )
        status.append("ok" if record.ok else "fail")
    return Table(
        "Worst cases",
        ["#", "kernel", "property", "dtype", "T", "tensor", "score", "result", "case"],
        rows,
        note="Ranked by the deciding score of each case's worst comparison: r (or η) against "
        "the oracle, |a - b| / (B_a + B_b) between two runs (a case fails past 2), the largest "
        "absolute difference bit for bit (past 0).",
        status=status,
    )


def failure_title(failure: Mapping[str, Any]) -> str:
    """Return a failure's heading: kernel, the properties it broke, dtype, occurrences."""
    properties = failure.get("properties") or [failure["property"]]
    parts = [str(failure["kernel"]), ", ".join(str(p) for p in properties)]
    if failure.get("dtype"):
        parts.append(str(failure["dtype"]))
    times = int(failure.get("occurrences", 1))
    suffix = f" ({times} failing cases, the last shown)" if times > 1 else ""
    return " · ".join(parts) + suffix


FAILURES_SHOWN = 20
"""Failures a report page details; run.json lists them all."""

NO_REPLAY = "No reproduction file was saved for this failure; the case line above reproduces it."
