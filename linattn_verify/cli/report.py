# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify report RUN_DIR``: render a run's report again, or compare two runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from linattn_verify.cli._args import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def add_parser(sub: Any) -> None:
    """Add the ``report`` subcommand."""
    report = sub.add_parser(
        "report",
        help="render a run's report (Markdown, HTML with plots), or compare two runs",
        description="RUN_DIR is a directory written by `run` or `check --report`; an "
        "interrupted run is rebuilt from its results.jsonl. Exit status: 0 when the report was "
        "written, 1 when --compare flags a regression, 2 when a directory holds no run.",
    )
    report.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run to report on")
    report.add_argument(
        "--out", type=Path, default=None, help="where to write the report. Default: RUN_DIR"
    )
    report.add_argument(
        "--compare",
        metavar="BASELINE_DIR",
        type=Path,
        default=None,
        help="also compare RUN_DIR with this earlier run (comparison.md, comparison.html): a "
        "10x jump in max r or max rho on an unchanged precision recipe, or a property that "
        "newly fails, is a regression; runs whose case settings differ (examples, max seq len, "
        "seed, gates, budget, Hypothesis profile) are set side by side, nothing flagged",
    )


def command(args: argparse.Namespace) -> int:
    """``linattn-verify report RUN_DIR``."""
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.reporting import (
        compare_runs,
        load_run,
        render_comparison_html,
        render_comparison_markdown,
        render_report,
    )

    try:
        document = load_run(args.run_dir)
        baseline = None if args.compare is None else load_run(args.compare)
    except InvalidArgument as exc:
        print(f"linattn-verify report: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = args.out or args.run_dir
    files = render_report(document, out)
    if document["status"] != "complete":
        print(f"{args.run_dir} did not finish: reporting the cases in its results.jsonl")
    print(f"wrote {files.markdown} and {files.html}")
    if baseline is None:
        return EXIT_OK
    comparison = compare_runs(
        baseline, document, before_label=str(args.compare), after_label=str(args.run_dir)
    )
    (out / "comparison.md").write_text(render_comparison_markdown(comparison))
    (out / "comparison.html").write_text(render_comparison_html(comparison))
    for row in comparison.scores:
        if row.regression:
            print(f"REGRESSION {row.kernel} {row.dtype} {row.tensor}: {'; '.join(row.notes)}")
    for change in comparison.verdicts:
        if change.regression:
            print(f"REGRESSION {change.kernel} {change.property}: {change.before} -> failed")
    if comparison.unlike:
        differ = ", ".join(f"{name} {b} vs {a}" for name, b, a in comparison.unlike)
        print(
            f"not like with like: {differ} (the runs drew different cases); nothing flagged "
            f"against {args.compare}"
        )
    print(
        f"{comparison.regressions} regressions against {args.compare}; wrote "
        f"{out / 'comparison.md'} and {out / 'comparison.html'}"
    )
    return EXIT_FAILED if comparison.regressed else EXIT_OK
