# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Markdown and HTML reports of passing and failing runs; all kernel-supplied text escaped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import cases_of, load_run, render_report
from linattn_verify.reporting.markdown import escape, escape_line, fenced
from linattn_verify.results import CaseRecord

PLOTS = ("error_vs_T.png", "rho_vs_T.png", "histograms.png", "forms.png")


def images(page: str) -> list[str]:
    return re.findall(r'<img alt="[^"]*" src="([^"]*)"', page)


def test_a_passing_run_renders_markdown_and_a_self_contained_page(
    write_run: Any, passing_records: list[CaseRecord], reference_kernels: list[Any]
) -> None:
    directory = write_run("ok", passing_records, reference_kernels)
    markdown = (directory / "report.md").read_text()
    page = (directory / "report.html").read_text()
    assert markdown.startswith("# linattn-verify accuracy report\n\n**PASSED")
    for name in PLOTS:
        assert f"](plots/{name})" in markdown
        assert (directory / "plots" / name).read_bytes().startswith(b"\x89PNG")
    for record in passing_records:
        for c in record.comparisons:
            cells = (record.kernel, str(record.form), record.dtype, c.tensor)
            assert "| " + " | ".join(escape(cell) for cell in cells) + " |" in markdown
    assert "- No findings: no case failed." in markdown
    assert "## Findings" not in markdown
    # The answer comes before the evidence: verdict, glance, map, then plots, then tables.
    order = ["**PASSED", "Nearest the fail line", "## Verdict map: linear\\_attn", "## Plots"]
    order += ["## Score distributions", "## Environment"]
    places = [markdown.index(heading) for heading in order]
    assert places == sorted(places)
    # Self-contained: the plots are data URIs, nothing is fetched, nothing runs.
    sources = images(page)
    assert len(sources) == len(PLOTS)
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert "<script" not in page
    assert 'class="headline passed"' in page


def test_a_failing_run_shows_its_failures_with_replay_commands(
    write_run: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
    reference_kernels: list[Any],
) -> None:
    directory = write_run("bad", [*passing_records, *broken_records], reference_kernels)
    document = load_run(directory)
    assert not document["totals"]["ok"]
    worst = max(broken_records, key=lambda r: r.worst_score)
    assert worst.worst is not None
    assert cases_of(document, "worst_cases")[0] == worst
    failure_file = broken_records[-1].failure_file
    markdown = (directory / "report.md").read_text()
    page = (directory / "report.html").read_text()
    assert markdown.startswith("# linattn-verify accuracy report\n\n**FAILED")
    assert "### 1. bug/scaled · outputs\\_match\\_oracle · float32 (2 failing cases" in markdown
    # Findings first: their table and replay lines come before the map and the plots.
    assert (
        markdown.index("## Findings")
        < markdown.index("## Verdict map")
        < markdown.index("## Plots")
    )
    assert "1 finding in 1 kernel: bug/scaled" in markdown
    assert f"```sh\nlinattn-verify replay {failure_file}\n```" in markdown
    # The message is the last (minimal) failing case's report.
    assert fenced(broken_records[-1].result.report()) in markdown
    assert "bug/scaled o is not close to the float64 oracle!" in markdown
    assert 'class="headline verdict-failed"' in page
    assert f'<pre class="replay">linattn-verify replay {failure_file}</pre>' in page
    # The worst-cases table names the tensor that decided the case.
    row = f'<tr class="fail"><td class="num">1</td><td>bug/scaled</td><td>{worst.property}</td>'
    assert row in page
    assert f"<td>{worst.worst.tensor}</td>" in page.split(row, 1)[1].split("</tr>", 1)[0]


def test_kernel_supplied_text_is_escaped_everywhere(
    write_run: Any, evil_records: list[CaseRecord], passing_records: list[CaseRecord]
) -> None:
    directory = write_run("evil", [*passing_records[:3], *evil_records])
    markdown = (directory / "report.md").read_text()
    page = (directory / "report.html").read_text()
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;|x" in page
    # Messages sit in fenced code blocks, which Markdown shows verbatim; outside them, nothing
    # is raw.
    assert "<script>alert(1)</script>|x o is not close" in markdown
    outside = re.sub(r"^(`{3,})[a-z]*\n.*?^\1$", "", markdown, flags=re.M | re.S)
    assert "<script" not in outside
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\|x" in outside
    # Every row of every table keeps its column count: the '|' in the name is escaped.
    for block in re.findall(r"(?:^\|.*\|$\n?)+", markdown, flags=re.M):
        rows = block.strip().splitlines()
        widths = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, rows


def test_markdown_escaping_helpers() -> None:
    assert escape("a|b`c*d_e[f]") == "a\\|b\\`c\\*d\\_e\\[f\\]"
    assert escape("<b>&\nnext") == "&lt;b&gt;&amp; next"
    assert escape_line("# not a heading") == "\\# not a heading"
    assert escape_line("1. not a list") == "1\\. not a list"
    assert fenced("a ``` b") == "````text\na ``` b\n````"


def test_plots_are_deterministic(
    tmp_path: Path, write_run: Any, passing_records: list[CaseRecord]
) -> None:
    directory = write_run("ok", passing_records[:9], render=False)
    document = load_run(directory)
    first = render_report(document, tmp_path / "one")
    second = render_report(document, tmp_path / "two")
    for a, b in zip(first.plots, second.plots, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert first.html.read_text() == second.html.read_text()


def test_a_run_without_scores_renders_without_plots(write_run: Any, build: Any) -> None:
    error = build.harness_error(message="harness error: RuntimeError: E")
    directory = write_run("errors", [error])
    document = load_run(directory)
    assert document["totals"]["errors"] == 1
    markdown = (directory / "report.md").read_text()
    assert "_No scored cases to plot._" in markdown
    assert fenced(str(error.reason)) in markdown
    assert not list((directory / "plots").iterdir())


def test_render_report_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="Expected a run document"):
        render_report([], tmp_path)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="directory=None"):
        render_report({}, None)  # type: ignore[arg-type]
