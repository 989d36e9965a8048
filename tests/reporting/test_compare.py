# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Comparing two runs: a 10x jump in max r on an unchanged recipe is flagged even while passing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import (
    compare_runs,
    load_run,
    render_comparison_html,
    render_comparison_markdown,
)
from linattn_verify.results import FAIL_THRESHOLD, CaseRecord, Comparison


def times(c: Comparison, factor: float) -> Comparison:
    scores = dataclasses.replace(c.scores, r=c.scores.r * factor)
    return dataclasses.replace(c, deciding=c.deciding * factor, scores=scores)


def inflated(records: list[CaseRecord], kernel: str, factor: float) -> list[CaseRecord]:
    """The records with ``kernel``'s fp32 ``o`` scores multiplied by ``factor``."""
    return [
        dataclasses.replace(
            r,
            comparisons=tuple(times(c, factor) if c.tensor == "o" else c for c in r.comparisons),
        )
        if r.kernel == kernel and r.dtype == "float32"
        else r
        for r in records
    ]


def test_a_tenfold_jump_in_max_r_is_flagged_while_still_passing(
    write_run: Any, passing_records: list[CaseRecord], reference_kernels: list[Any]
) -> None:
    before = load_run(write_run("before", passing_records, reference_kernels, render=False))
    grown = inflated(passing_records, "torch/chunk", 12.0)
    assert all(c.deciding <= FAIL_THRESHOLD for r in grown for c in r.comparisons)
    after = load_run(write_run("after", grown, reference_kernels, render=False))
    assert after["totals"]["ok"], "the new run still passes"
    comparison = compare_runs(before, after, before_label="v1", after_label="v2")
    flagged = [s for s in comparison.scores if s.regression]
    assert [(s.kernel, s.dtype, s.tensor) for s in flagged] == [("torch/chunk", "float32", "o")]
    assert flagged[0].notes == ("max r x12",)
    assert comparison.regressed
    assert comparison.regressions == 1
    markdown = render_comparison_markdown(comparison)
    assert markdown.startswith("# linattn-verify run comparison\n\n**1 REGRESSION FLAGGED")
    assert "| torch/chunk | float32 | o |" in markdown
    assert "| REGRESSION | max r x12 |" in markdown
    page = render_comparison_html(comparison)
    assert '<tr class="fail"><td>torch/chunk</td><td>float32</td><td>o</td>' in page
    # Below 10x, or the same run twice: nothing is flagged.
    mild = load_run(write_run("mild", inflated(passing_records, "torch/chunk", 5.0), render=False))
    assert not compare_runs(before, mild).regressed
    assert not compare_runs(before, before).regressed


def test_a_jump_on_a_changed_recipe_is_reported_but_not_flagged(
    write_run: Any, passing_records: list[CaseRecord], reference_kernels: list[Any]
) -> None:
    before = load_run(write_run("before", passing_records, reference_kernels, render=False))
    grown = inflated(passing_records, "torch/chunk", 12.0)
    after = load_run(write_run("after", grown, reference_kernels, render=False))
    for kernel in after["kernels"]:
        if kernel["name"] == "torch/chunk":
            kernel["recipes"]["float32"]["dot_precision"] = "tf32"
    comparison = compare_runs(before, after)
    assert not comparison.regressed
    [row] = [s for s in comparison.scores if s.notes and s.tensor == "o" and s.dtype == "float32"]
    assert row.recipe_changed
    assert row.notes == ("max r x12 (recipe changed: not flagged)",)


def test_a_property_that_newly_fails_is_a_regression(
    write_run: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
) -> None:
    kernel = broken_records[0].kernel
    ok = [dataclasses.replace(r, kernel=kernel) for r in passing_records if r.form == "chunk"]
    before = load_run(write_run("before", ok, render=False))
    after = load_run(write_run("after", broken_records, render=False))
    comparison = compare_runs(before, after)
    changes = [(v.property, v.before, v.after, v.regression) for v in comparison.verdicts]
    assert ("outputs_match_oracle", "held", "failed", True) in changes
    assert ("gradients_match_oracle", "held", None, False) in changes
    assert "REGRESSION" in render_comparison_markdown(comparison)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("examples", 20), ("max_seq_len", 64), ("seed", 3), ("profile", "ci"), ("command", "check")],
)
def test_runs_of_other_case_settings_are_set_side_by_side_without_flags(
    write_run: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
    reference_kernels: list[Any],
    setting: str,
    value: Any,
) -> None:
    # Another number of examples, longest T, seed, Hypothesis profile or command draws other
    # cases: a 10x jump or a failure found only there says nothing about the kernel changing.
    before = load_run(write_run("before", passing_records, reference_kernels, render=False))
    kernel = broken_records[0].kernel
    grown = inflated(passing_records, "torch/chunk", 12.0) + broken_records
    after = load_run(write_run("after", grown, reference_kernels, render=False))
    like = compare_runs(before, after)
    assert like.regressions >= 2, "the same settings: the jump and the new failure are flagged"
    if setting == "profile":
        after["environment"]["hypothesis_profile"] = value
    elif setting == "command":
        after["command"] = value
    else:
        after["arguments"][setting] = value
    unlike = compare_runs(before, after)
    assert not unlike.regressed
    assert [name for name, _, _ in unlike.unlike] == [setting]
    assert any("settings differ: not flagged" in s.notes for s in unlike.scores)
    assert any(v.kernel == kernel and v.after == "failed" for v in unlike.verdicts)
    markdown = render_comparison_markdown(unlike)
    assert "**Not like with like (" in markdown
    assert "Settings that decide the cases" in markdown
    assert "REGRESSION" not in markdown


def test_compare_runs_rejects_bad_documents(
    write_run: Any, passing_records: list[CaseRecord]
) -> None:
    good = load_run(write_run("ok", passing_records[:2], render=False))
    with pytest.raises(InvalidArgument, match="invalid after document"):
        compare_runs(good, {**good, "totals": {}})
    with pytest.raises(InvalidArgument, match="RunComparison"):
        render_comparison_markdown(good)  # type: ignore[arg-type]
