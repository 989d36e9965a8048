# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a report says at a glance: the verdict map's cells, kernels side by side, the bias."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from linattn_verify.compare.oracle import signed_bias
from linattn_verify.reporting import load_run
from linattn_verify.reporting.content import glance, headroom_text
from linattn_verify.reporting.side_by_side import side_by_side
from linattn_verify.reporting.summary import distributions
from linattn_verify.reporting.verdict_map import BANDS, band, nearest, verdict_maps
from linattn_verify.results import FAIL_THRESHOLD, CaseRecord, Scores
from tests.reporting.conftest import comparison, record


def document_of(write_run: Any, records: list[CaseRecord]) -> dict[str, Any]:
    return load_run(write_run("doc", records, render=False))


@pytest.mark.parametrize("r", [0.0, 0.05, 0.1, 0.3, 0.5, 0.99, 1.0, 1.5, 2.0])
def test_a_score_within_the_fail_line_gets_the_band_of_its_headroom(r: float) -> None:
    name = band(r)
    limits = {n: limit for n, limit, _ in BANDS}
    assert r <= limits[name]
    lower = [limit for n, limit, _ in BANDS if limit < limits[name]]
    assert all(r > limit for limit in lower)


@pytest.mark.parametrize("r", [2.0001, 40.0, math.inf, math.nan])
def test_a_score_past_the_fail_line_or_non_finite_is_failed(r: float) -> None:
    assert band(r) == "failed"
    assert headroom_text(r) in ("failed", "-")


def test_each_cell_is_the_worst_r_of_its_tensor_or_says_why_there_is_none(write_run: Any) -> None:
    records = [
        record("k/a", "chunk", 8, "float32", [comparison("o", "k/a", 0.03)]),
        record("k/a", "chunk", 9, "float32", [comparison("o", "k/a", 0.7)]),
        record("k/a", "chunk", 9, "float32", [comparison("dq", "k/a", 0.2)], seed=1),
        # Held, but the bound on dq certified nothing: counted in dq's cell.
        record(
            "k/a",
            "chunk",
            5,
            "float32",
            [comparison("dq", "k/a", 0.01)],
            status="ill_conditioned",
            reason="dq: the bound reaches 3x the largest |value|",
            seed=2,
        ),
        record("k/b", "chunk", 8, "float32", [comparison("o", "k/b", 5.0)]),
        # The kernel raised: no comparison, yet the case failed.
        record("k/c", "chunk", 8, "float32", [], status="failed", reason="RuntimeError: boom"),
        record("k/d", "chunk", 8, "float32", [], status="undefined", reason="o: 0/0"),
    ]
    (vmap,) = verdict_maps(document_of(write_run, records))
    assert vmap.family == "linear_attn"
    assert vmap.tensors == ("o", "dq")
    cells = {
        (kernel, tensor): cell
        for kernel, _, row in vmap.rows
        for tensor, cell in zip(vmap.tensors, row, strict=True)
    }
    assert cells["k/a", "o"].r == 0.7
    assert cells["k/a", "o"].kind == band(0.7)
    assert cells["k/a", "o"].cases == 2
    assert cells["k/a", "dq"].r == 0.2
    assert cells["k/a", "dq"].undecided == {"ill_conditioned": 1}
    assert not cells["k/a", "o"].undecided
    assert cells["k/b", "o"].kind == "failed"
    assert cells["k/b", "o"].headroom == pytest.approx(FAIL_THRESHOLD / 5.0)
    assert cells["k/b", "dq"].kind == "not_applicable"
    assert cells["k/c", "o"].kind == "failed"
    assert cells["k/c", "o"].r is None
    assert cells["k/d", "o"].kind == "undefined"
    assert cells["k/d", "o"].text() == "undefined"
    # Nearest the fail line first, and the glance names it.
    document = document_of(write_run, records)
    kernel, _, tensor, cell = nearest(verdict_maps(document))[0]
    assert (kernel, tensor, cell.r) == ("k/b", "o", 5.0)
    # The findings name the failed cell; the glance names the passing ones nearest the line.
    said = glance(document, verdict_maps(document))
    near = "Nearest the fail line (r = 2) among the passing: k/a float32 o: r = 0.7"
    assert any(line.startswith(near) for line in said), said


def test_kernels_that_ran_the_same_case_are_set_side_by_side(write_run: Any) -> None:
    same = {"seed": 7}
    records = [
        record("k/a", "chunk", 8, "float32", [comparison("o", "k/a", 0.3)], **same),
        record("k/b", "recurrent", 8, "float32", [comparison("o", "k/b", 0.1)], **same),
        record("k/a", "chunk", 12, "float32", [comparison("o", "k/a", 0.05)], seed=8),
        record("k/b", "recurrent", 12, "float32", [comparison("o", "k/b", 0.4)], seed=8),
        # Only one kernel ran this one: nothing to compare.
        record("k/a", "chunk", 16, "float32", [comparison("o", "k/a", 0.9)], seed=9),
    ]
    # The case text names the kernel in these records: make it the same case on both.
    records = [CaseRecord(**{**r.__dict__, "case": r.case.replace(r.kernel, "k")}) for r in records]
    (group,) = side_by_side(document_of(write_run, records))
    assert group.kernels == ("k/a", "k/b")
    assert [c.T for c in group.cases] == [8, 12]
    summaries = {s.kernel: s for s in group.summaries}
    assert summaries["k/a"].worst == 0.3
    assert summaries["k/b"].worst == 0.4
    assert summaries["k/a"].most_accurate == 1
    assert summaries["k/b"].most_accurate == 1
    assert summaries["k/a"].median == pytest.approx((0.3 + 0.05) / 2)


def test_the_most_accurate_kernel_is_the_one_with_the_smaller_error_not_the_smaller_r(
    write_run: Any,
) -> None:
    def measured(kernel: str, r: float, error: float) -> CaseRecord:
        c = comparison("o", kernel, r)
        scores = Scores(r=r, relative_error=error)
        one = record(kernel, "chunk", 8, "float16", [type(c)(**{**c.__dict__, "scores": scores})])
        return CaseRecord(**{**one.__dict__, "case": "the same case"})

    # k/loose declares a looser recipe: a smaller r for a larger error.
    records = [measured("k/tight", 0.9, 1e-4), measured("k/loose", 0.3, 4e-3)]
    (group,) = side_by_side(document_of(write_run, records))
    summaries = {s.kernel: s for s in group.summaries}
    assert summaries["k/tight"].most_accurate == 1
    assert summaries["k/loose"].most_accurate == 0
    assert summaries["k/loose"].worst_error == 4e-3
    assert summaries["k/loose"].worst == 0.3


def test_no_shared_case_no_side_by_side(write_run: Any) -> None:
    records = [
        record("k/a", "chunk", 8, "float32", [comparison("o", "k/a", 0.3)]),
        record("k/b", "chunk", 8, "float32", [comparison("o", "k/b", 0.3)]),
    ]
    assert side_by_side(document_of(write_run, records)) == []


def test_unbiased_rounding_has_a_small_t_and_truncation_a_large_one() -> None:
    generator = torch.Generator().manual_seed(0)
    exact = torch.randn(4096, dtype=torch.float64, generator=generator) * 3
    nearest_bf16 = exact.to(torch.bfloat16).double()
    # Truncation toward minus infinity: the float just below, when the nearest is above.
    below = torch.where(
        nearest_bf16 > exact,
        torch.nextafter(
            nearest_bf16.to(torch.bfloat16), torch.tensor(-math.inf, dtype=torch.bfloat16)
        ).double(),
        nearest_bf16,
    )
    bound = exact.abs() * 2.0**-8
    everywhere = torch.ones_like(exact, dtype=torch.bool)
    bias, t = signed_bias(nearest_bf16 - exact, bound, everywhere)
    assert bias is not None
    assert t is not None
    assert abs(t) < 4
    assert abs(bias) < 0.05
    bias, t = signed_bias(below - exact, bound, everywhere)
    assert bias is not None
    assert t is not None
    assert t < -0.5 * math.sqrt(exact.numel())
    assert bias < -0.2
    assert signed_bias(exact, bound, torch.zeros_like(everywhere)) == (None, None)


def test_distributions_carry_ulps_and_bias_where_measured() -> None:
    scores = Scores(
        r=0.5, correctly_rounded=0.9, faithfully_rounded=1.0, max_ulps=0.8, bias=0.1, bias_t=5.0
    )
    biased = comparison("o", "k/a", 0.5)
    measured = [
        record(
            "k/a", "chunk", 8, "bfloat16", [type(biased)(**{**biased.__dict__, "scores": scores})]
        ),
        record("k/a", "chunk", 9, "bfloat16", [comparison("o", "k/a", 0.2)]),
    ]
    (row,) = distributions(measured)
    assert row["ulps"] == {"correctly_rounded": 0.9, "faithfully_rounded": 1.0, "max": 0.8}
    assert row["bias"] == {"mean": 0.1, "biased_share": 1.0}
    (plain,) = distributions(measured[1:])
    assert "ulps" not in plain
    assert "bias" not in plain


def test_shared_cases_get_their_section_and_plot(write_run: Any) -> None:
    records = [
        record(kernel, "chunk", T, "float32", [comparison("o", kernel, r)], seed=T)
        for kernel, T, r in [("k/a", 8, 0.3), ("k/b", 8, 0.1), ("k/a", 12, 0.05), ("k/b", 12, 0.4)]
    ]
    records = [CaseRecord(**{**r.__dict__, "case": r.case.replace(r.kernel, "k")}) for r in records]
    directory = write_run("shared", records)
    markdown = (directory / "report.md").read_text()
    assert "## Kernels side by side" in markdown
    assert "### linear\\_attn · float32: 2 shared cases" in markdown
    assert "| k/a | 2 | - | - | 1 of 2 | 0.175 | 0.3 |" in markdown
    assert (directory / "plots" / "side_by_side.png").read_bytes().startswith(b"\x89PNG")
    page = (directory / "report.html").read_text()
    assert page.count('<img alt="Kernels of one family on the same cases') == 1


def test_one_symptom_in_many_cases_and_dtypes_is_one_finding(write_run: Any) -> None:
    def broken(T: int, dtype: str, tensor: str, r: float) -> CaseRecord:
        one = record("k/nan", "chunk", T, dtype, [comparison(tensor, "k/nan", r)], seed=T)
        return CaseRecord(**{**one.__dict__, "failure_file": f"/f/{dtype}-{T}.json"})

    records = [
        broken(24, "float32", "final_state", math.inf),
        broken(9, "bfloat16", "final_state", math.inf),
        broken(40, "float16", "final_state", math.inf),
        # Another symptom of the same kernel: a finite error past the bound on o.
        broken(12, "float32", "o", 30.0),
    ]
    found = document_of(write_run, records)["failures"]
    assert len(found) == 2
    nan = next(f for f in found if f["tensor"] == "final_state")
    assert nan["occurrences"] == 3
    assert sorted(nan["dtypes"]) == ["bfloat16", "float16", "float32"]
    assert nan["T"] == 9  # the smallest case is the one shown, with its replay
    assert nan["replay"] == "linattn-verify replay /f/bfloat16-9.json"
    past = next(f for f in found if f["tensor"] == "o")
    assert past["occurrences"] == 1


def test_a_defect_of_o_seen_through_a_combination_of_runs_is_the_same_finding(
    write_run: Any,
) -> None:
    # A kernel whose o_t reads the state before token t fails the oracle on o, and linearity on
    # o(-2·(v1, S1) + 4·(v2, S2)): its rounding does not fit bounds of the declared semantics.
    # One defect of o: one finding, shown by its smallest case, naming both properties.
    def broken(prop: str, T: int, tensor: str, r: float) -> CaseRecord:
        one = record("k/x", "recurrent", T, "float32", [comparison(tensor, "k/x", r)], seed=T)
        return CaseRecord(**{**one.__dict__, "property": prop, "failure_file": f"/f/{prop}.json"})

    records = [
        broken("outputs_match_oracle", 2, "o[t>=1]", 40.0),
        broken("linear_in_values_and_state", 3, "o(-2·(v1, S1) + 4·(v2, S2))", 2.3),
    ]
    (found,) = document_of(write_run, records)["failures"]
    assert found["properties"] == ["linear_in_values_and_state", "outputs_match_oracle"]
    assert found["T"] == 2
    assert found["occurrences"] == 2
