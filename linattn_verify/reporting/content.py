# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a report says, independent of its format: a headline and tables of plain text.

`markdown` and `html` render the same `Table` objects, each escaping every cell for its own
format, so no kernel-supplied text reaches either page unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from linattn_verify.observe import format_headroom
from linattn_verify.reporting._values import format_finding_score, format_score, score
from linattn_verify.reporting.side_by_side import side_by_side
from linattn_verify.reporting.summary import UNDECIDED, cases_of, verdicts_of
from linattn_verify.reporting.verdict_map import VerdictMap, nearest
from linattn_verify.results import FAIL_THRESHOLD

PLOT_CAPTIONS = {
    "error_vs_T.png": "Worst r = err/B of each case against T, per form (columns) and dtype "
    "(rows), with the running maximum. r <= 1 is guaranteed for a correct kernel; r > 2 fails.",
    "rho_vs_T.png": "Error growth: ρ = err/(u·M), the error in effective roundings, against T. "
    "The error model predicts ρ of about √c, with c the rounding count, which grows with T; "
    "the dotted guide is ∝ √T.",
    "histograms.png": "Histograms of each case's worst r, per dtype, one curve per form.",
    "forms.png": "Parallel, chunked and recurrent side by side: max r per tensor over the cases.",
    "side_by_side.png": "Kernels of one family on the same cases: each grey line is one case "
    "across the kernels that took it (its error relative to the tensor's largest value, the "
    "worst tensor), the black bar each kernel's median; lower is more accurate.",
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


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def distributions_table(document: Mapping[str, Any]) -> Table:
    """Score distributions per kernel, dtype and tensor: r first, then ulps and bias, then ρ."""
    rows, status = [], []
    for d in document["distributions"]:
        r, element = d["r"], d["element"]
        ulps, bias = d.get("ulps") or {}, d.get("bias") or {}
        worst = score(r["max"])
        rows.append(
            [
                d["kernel"],
                _text(d["form"]),
                d["dtype"],
                d["tensor"],
                str(d["cases"]),
                format_score(worst),
                headroom_text(worst),
                format_score(r["median"]),
                format_score(element["p999_r"]),
                _share(ulps.get("correctly_rounded")),
                _share(ulps.get("faithfully_rounded")),
                format_score(ulps.get("max")),
                format_score(bias.get("mean")),
                _share(bias.get("biased_share")),
                format_score(d["eta"]),
                format_score(element["median_rho"]),
            ]
        )
        status.append("fail" if worst is None or not worst <= FAIL_THRESHOLD else "ok")
    return Table(
        "Score distributions",
        [
            "kernel",
            "form",
            "dtype",
            "tensor",
            "cases",
            "worst r",
            "headroom",
            "median r",
            "elem. p99.9 r",
            "correctly rounded",
            "faithfully rounded",
            "worst ulps",
            "bias",
            "biased cases",
            "max η",
            "median ρ",
        ],
        rows,
        note="r = |error| / bound per element; a case fails past 2, and a correct kernel stays "
        "below 1. worst r, median r: over the cases of each case's largest r; headroom = 2 / "
        "worst r. Ulps (16-bit outputs): mean shares of elements correctly and faithfully "
        "rounded to the output dtype, and the largest error in ulps. bias = Σ(x̂ - x) / ΣB, "
        "the signed mean error in units of the bound (mean over the cases); biased cases: "
        "share with |Σ(x̂ - x)| / sqrt(Σ(x̂ - x)²) > 4, which unbiased rounding almost never "
        "reaches. median ρ = |error| / (u·M), in roundings: it grows on tiny values, where M "
        "is tiny, so it is shown last.",
        status=status,
    )


def headroom_text(r: float | None) -> str:
    """``2 / r`` as text: how many times the error may grow before the case fails."""
    if r is None or r != r:
        return "-"
    if r > FAIL_THRESHOLD:
        return "failed"
    return format_headroom(r)


def _headroom_words(r: float | None) -> str:
    text = headroom_text(r)
    return "FAILED" if text == "failed" else f"headroom {text}"


def glance(document: Mapping[str, Any], maps: Sequence[VerdictMap]) -> list[str]:
    """The first screen's sentences: what failed, what is nearest its bound, what is undecided.

    ``maps`` are the document's `verdict_maps` (the page shows them too: computed once).
    """
    lines = []
    found = document["failures"]
    if found:
        kernels = sorted({str(f["kernel"]) for f in found})
        lines.append(
            f"{len(found)} finding{'s' if len(found) > 1 else ''} in {len(kernels)} "
            f"kernel{'s' if len(kernels) > 1 else ''}: {', '.join(kernels)} (details below, "
            "each with its replay command)."
        )
    elif document["totals"]["cases"]:
        lines.append("No findings: no case failed.")
    near = nearest(maps, passing=bool(found))
    if near:
        worst = "; ".join(
            f"{kernel} {dtype} {tensor}: r = {format_score(cell.r)} ({_headroom_words(cell.r)})"
            for kernel, dtype, tensor, cell in near
        )
        among = " among the passing" if found else ""
        lines.append(f"Nearest the fail line (r = 2){among}: {worst}.")
    totals = document["totals"]
    if totals["undecided"]:
        kinds: dict[str, int] = {}
        for record in cases_of(document):
            if record.status in UNDECIDED:
                kinds[record.status] = kinds.get(record.status, 0) + 1
        parts = ", ".join(f"{n} {k.replace('_', '-')}" for k, n in sorted(kinds.items()))
        lines.append(
            f"{totals['undecided']} cases decided nothing ({parts}): see the verdict map's legend."
        )
    return lines


def findings_table(document: Mapping[str, Any]) -> Table:
    """One row per finding: kernel, what broke, dtype, severity, the deciding tensor and score."""
    rows = []
    for n, f in enumerate(document["failures"][:FAILURES_SHOWN], start=1):
        properties = f.get("properties") or [f["property"]]
        rows.append(
            [
                str(n),
                str(f["kernel"]),
                ", ".join(str(p) for p in properties),
                _text(f.get("dtypes") or f.get("dtype")),
                _text(f.get("severity"))
                + (" (declaration)" if f.get("kind") == "declaration" else ""),
                _text(f.get("tensor")),
                format_finding_score(f),
                str(f.get("occurrences", 1)),
                str(f.get("replay") or "-"),
            ]
        )
    return Table(
        "Findings",
        ["#", "kernel", "properties", "dtype", "severity", "tensor", "score", "cases", "replay"],
        rows,
        note="Failures grouped by root cause; each replay command re-runs its minimal case "
        "(details below the map). Severity: realistic (ordinary magnitudes: the kernel is wrong "
        "on inputs it will see), extreme-range (near underflow or the dtype's largest value), "
        "kernel failure (it raised or broke the calling convention); (declaration): a change to "
        "the declared recipe explains it, so check the declaration before the kernel.",
        status=["fail"] * len(rows),
    )


MARKS = {"suspect": " !", "failed": " FAILED"}
"""Text marks of map cells for formats without colour (Markdown, the terminal)."""


def map_table(vmap: VerdictMap) -> Table:
    """A verdict map as plain text: worst r per cell, marked past 1 and past 2 (failed)."""
    rows = []
    for kernel, dtype, cells in vmap.rows:
        texts = []
        for cell in cells:
            text = cell.text() + (MARKS.get(cell.kind, "") if cell.r is not None else "")
            if cell.undecided and cell.r is not None:
                text += (
                    " ("
                    + ", ".join(
                        f"{n} {k.replace('_', '-')}" for k, n in sorted(cell.undecided.items())
                    )
                    + ")"
                )
            texts.append(text)
        rows.append([kernel, dtype, *texts])
    return Table(
        f"Verdict map: {vmap.family}",
        ["kernel", "dtype", *vmap.tensors],
        rows,
        note="Worst r = |error| / bound per tensor over the cases; ! marks 1 < r <= 2 (past "
        "the guaranteed bound), FAILED r > 2. In parentheses: cases that decided nothing.",
        status=[
            "fail" if any(c.kind == "failed" for c in cells) else "ok" for _, _, cells in vmap.rows
        ],
    )


def side_by_side_tables(document: Mapping[str, Any]) -> list[tuple[Table, Table]]:
    """Per family and dtype: the kernels' summary over shared cases, and the cases themselves."""
    out = []
    for group in side_by_side(document):
        summary = Table(
            f"{group.family} · {group.dtype}: {len(group.cases)} shared cases",
            [
                "kernel",
                "shared cases",
                "median rel. error",
                "worst rel. error",
                "most accurate on",
                "median r",
                "worst r",
            ],
            [
                [
                    s.kernel,
                    str(s.cases),
                    format_score(s.median_error),
                    format_score(s.worst_error),
                    f"{s.most_accurate} of {s.cases}",
                    format_score(s.median),
                    format_score(s.worst),
                ]
                for s in group.summaries
            ],
            note=f"Judged by {group.property}. rel. error = max |x̂ - x| / max |x| of each tensor, "
            "the worst over the case's tensors: it ranks the kernels (most accurate: the lowest "
            "on the case). r = error / the kernel's own bound: a kernel declaring a looser "
            "recipe has a larger bound, so a smaller r does not mean a smaller error.",
            status=["ok" if s.worst <= FAIL_THRESHOLD else "fail" for s in group.summaries],
        )
        per_case = Table(
            "Per case: rel. error (r)",
            ["T", "K", "V", *group.kernels, "case"],
            [
                [
                    str(c.T),
                    str(c.K),
                    str(c.V),
                    *(
                        f"{format_score(c.errors.get(k))} ({format_score(c.scores[k])})"
                        if k in c.scores
                        else "-"
                        for k in group.kernels
                    ),
                    c.case,
                ]
                for c in group.cases
            ],
            note="- : the kernel does not take the case.",
        )
        out.append((summary, per_case))
    return out


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
    dtypes = failure.get("dtypes") or ([failure["dtype"]] if failure.get("dtype") else [])
    if dtypes:
        parts.append(", ".join(str(d) for d in dtypes))
    times = int(failure.get("occurrences", 1))
    shown = "the smallest shown" if failure.get("dtypes") else "the last shown"
    suffix = f" ({times} failing cases, {shown})" if times > 1 else ""
    return " · ".join(parts) + suffix


FAILURES_SHOWN = 20
"""Failures a report page details; run.json lists them all."""

NO_REPLAY = "No reproduction file was saved for this failure; the case line above reproduces it."
