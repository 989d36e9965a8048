# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Accuracy reports: the run document (versioned JSON schema), Markdown and HTML, comparisons.

`RunWriter` records a run as it goes (`CaseRecord` lines in ``results.jsonl``, `PropertyVerdict`
objects) and writes the summary (``run.json``) and the report (``report.md``, ``report.html``,
``plots/``) at the end; `load_run` reads a run directory back (a version 1 document upgraded),
rebuilding an interrupted one from its JSON lines; `cases_of` and `verdicts_of` read a
document's records back; `render_report` renders a document; `compare_runs` sets two runs side
by side and flags regressions.
"""

from __future__ import annotations

from linattn_verify.reporting._validate import SCHEMA_V1, SCHEMA_VERSION, run_schema, validate
from linattn_verify.reporting.compare import (
    RunComparison,
    compare_runs,
    render_comparison_html,
    render_comparison_markdown,
)
from linattn_verify.reporting.render import ReportFiles, render_report
from linattn_verify.reporting.summary import cases_of, verdicts_of
from linattn_verify.reporting.writer import RunWriter, load_run, run_environment

__all__ = [
    "SCHEMA_V1",
    "SCHEMA_VERSION",
    "ReportFiles",
    "RunComparison",
    "RunWriter",
    "cases_of",
    "compare_runs",
    "load_run",
    "render_comparison_html",
    "render_comparison_markdown",
    "render_report",
    "run_environment",
    "run_schema",
    "validate",
    "verdicts_of",
]
