# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule head-to-head accuracy table, from a run of the harness itself.

    linattn-verify run --kernels 'triton/delta*,fla/delta*,fla/gated_delta*,fla/kda*' \\
        --examples 12 --side-by-side 4 --workers 2 --out benchmarks/delta_accuracy
    python benchmarks/delta_accuracy.py benchmarks/delta_accuracy   # prints the Markdown

`benchmarks/results.py` puts the same section into RESULTS.md when the run directory exists.
Every number comes from the run document: per kernel and dtype the cases, the error relative
to each tensor's scale (max |x̂ - x| / max |x|, worst tensor per case), r against the kernel's
own bound, the ulps of o, the share of cases the bound could not decide (``ill_conditioned``)
and the cases with a wrong non-finite value; then, on the side-by-side cases (the same inputs
for every kernel that takes them), ours against each FLA kernel.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from linattn_verify.reporting import cases_of, load_run
from linattn_verify.reporting.side_by_side import side_by_side
from linattn_verify.results import CaseRecord

OURS = ("triton/delta.chunk", "triton/delta.recurrent")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _share(part: int, whole: int) -> str:
    return "-" if not whole else f"{100 * part / whole:.0f}%"


def _case_error(record: CaseRecord) -> float | None:
    errors = [
        c.scores.relative_error
        for c in record.comparisons
        if c.reference == "oracle" and c.scores.relative_error is not None
    ]
    return max(errors) if errors else None


def _row(kernel: str, dtype: str, records: list[CaseRecord]) -> list[str]:
    judged = [r for r in records if r.status != "not_applicable" and not r.error]
    errors = [e for r in judged if (e := _case_error(r)) is not None]
    scores = [r.worst_score for r in judged if r.comparisons]
    outputs = [c for r in judged for c in r.comparisons if c.reference == "oracle"]
    correct = [
        c.scores.correctly_rounded for c in outputs if c.scores.correctly_rounded is not None
    ]
    ulps = [c.scores.max_ulps for c in outputs if c.scores.max_ulps is not None]
    nonfinite = sum(1 for r in judged if any(c.counts.nonfinite for c in r.comparisons))
    return [
        kernel,
        dtype,
        str(len(judged)),
        _fmt(statistics.median(errors) if errors else None),
        _fmt(max(errors) if errors else None),
        _fmt(statistics.median(scores) if scores else None),
        _fmt(max(scores) if scores else None),
        "-" if not correct else f"{100 * statistics.fmean(correct):.0f}%",
        _fmt(max(ulps) if ulps else None),
        _share(sum(1 for r in judged if r.status == "ill_conditioned"), len(judged)),
        str(nonfinite),
        str(sum(1 for r in judged if r.status == "failed")),
    ]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def section(run_dir: Path) -> list[str]:
    """The Markdown section for the run in ``run_dir`` (empty when there is none)."""
    if not (run_dir / "run.json").is_file():
        return []
    document: dict[str, Any] = load_run(run_dir)
    groups: dict[tuple[str, str], list[CaseRecord]] = {}
    for record in cases_of(document):
        groups.setdefault((record.kernel, record.dtype), []).append(record)
    order = [k["name"] for k in document["kernels"]]
    keys = sorted(
        groups,
        key=lambda k: (
            ("float32", "float16", "bfloat16").index(k[1]),
            order.index(k[0]) if k[0] in order else 99,
        ),
    )
    args = document["arguments"]
    lines = [
        "## Delta rule: our kernels against FLA's, accuracy on the same cases",
        "",
        f"From `linattn-verify run --kernels {','.join(args['kernels'])} --examples "
        f"{args['examples']} --side-by-side {args.get('side_by_side', 0)} --max-seq-len "
        f"{args['max_seq_len']} --seed {args['seed']}` ({document['totals']['cases']} cases, "
        f"{document['seconds']:.0f} s; regenerate with the commands in "
        "`benchmarks/delta_accuracy.py`). Each case is judged by `gradients_match_oracle` (o, "
        "the final state and every gradient) or, for FLA's forward-only fused kernels, "
        "`outputs_match_oracle`. *rel. error* is max |x̂ - x| / max |x| of the worst tensor of "
        "a case: it ranks kernels. *r* is the error over the kernel's own bound: FLA's recipes "
        "declare 16-bit storage, so their bounds are looser and a smaller r there does not mean "
        "a smaller error. *correctly rounded*: mean share of the 16-bit tensors' elements that "
        "are the nearest 16-bit value to the exact one (every judged tensor: the gradients, or o "
        "for the forward-only kernels); *worst ulps*: the largest error in ulps. *ill-cond.*: "
        "cases whose bound spans the tensor's scale. *non-finite*: cases with a NaN or inf where "
        "the exact value is finite and representable.",
        "",
    ]
    lines += _table(
        [
            "kernel",
            "dtype",
            "cases",
            "median rel. error",
            "worst rel. error",
            "median r",
            "worst r",
            "correctly rounded",
            "worst ulps",
            "ill-cond.",
            "non-finite",
            "failed",
        ],
        [_row(kernel, dtype, groups[(kernel, dtype)]) for kernel, dtype in keys],
    )
    pairs = []
    for group in side_by_side(document):
        for ours in (k for k in group.kernels if k in OURS):
            for theirs in (k for k in group.kernels if k.startswith("fla/")):
                both = [c for c in group.cases if ours in c.scores and theirs in c.scores]
                if not both:
                    continue
                wins = sum(1 for c in both if c.accuracy(ours) <= c.accuracy(theirs))
                ratios = [
                    c.accuracy(ours) / c.accuracy(theirs) for c in both if c.accuracy(theirs) > 0
                ]
                pairs.append(
                    [
                        group.dtype,
                        ours,
                        theirs,
                        str(len(both)),
                        f"{wins} of {len(both)}",
                        _fmt(statistics.median(ratios) if ratios else None),
                        _fmt(max(ratios) if ratios else None),
                    ]
                )
    if pairs:
        lines += [
            "",
            "On the side-by-side cases (the same inputs, every kernel that takes them): how often "
            "ours is at least as accurate (rel. error), and our rel. error over FLA's (below 1: "
            "ours is more accurate).",
            "",
        ]
        lines += _table(
            [
                "dtype",
                "ours",
                "FLA",
                "shared cases",
                "ours at least as accurate",
                "median error ratio",
                "worst error ratio",
            ],
            pairs,
        )
    return [*lines, ""]


if __name__ == "__main__":
    print(
        "\n".join(section(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/delta_accuracy")))
    )
