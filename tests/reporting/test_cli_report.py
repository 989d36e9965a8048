# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify report RUN_DIR [--out DIR] [--compare BASELINE_DIR]`."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.reporting import SCHEMA_VERSION, cases_of, load_run
from linattn_verify.reporting.summary import build_document
from linattn_verify.results import CaseRecord

V1 = Path(__file__).parent / "data" / "run-v1.json"


def times(record: CaseRecord, tensor: str, factor: float) -> CaseRecord:
    """``record`` with the scores of its ``tensor`` comparison multiplied by ``factor``."""
    comparisons = tuple(
        dataclasses.replace(
            c,
            deciding=c.deciding * factor,
            scores=dataclasses.replace(c.scores, r=c.scores.r * factor),
        )
        if c.tensor == tensor
        else c
        for c in record.comparisons
    )
    return dataclasses.replace(record, comparisons=comparisons)


def test_report_rerenders_a_run_into_another_directory(
    tmp_path: Path,
    write_run: Any,
    passing_records: list[CaseRecord],
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = write_run("run", passing_records[:4], render=False)
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == EXIT_OK
    assert (tmp_path / "out" / "report.md").read_text().startswith("# linattn-verify")
    assert (tmp_path / "out" / "report.html").is_file()
    assert "wrote" in capsys.readouterr().out


def test_report_renders_an_interrupted_run(
    write_run: Any, passing_records: list[CaseRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run("cut", passing_records[:3], finish=False)
    assert main(["report", str(run)]) == EXIT_OK
    assert "did not finish" in capsys.readouterr().out
    assert "This run did not finish" in (run / "report.md").read_text()


def test_report_names_a_directory_without_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main(["report", str(missing)]) == EXIT_USAGE
    assert f"RUN_DIR='{missing}'" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == EXIT_USAGE
    assert "neither run.json nor results.jsonl" in capsys.readouterr().err


def test_report_compare_exits_1_on_a_regression(
    write_run: Any, passing_records: list[CaseRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    subset = [r for r in passing_records if r.dtype == "float32"][:4]
    before = write_run("before", subset, render=False)
    assert main(["report", str(before), "--compare", str(before)]) == EXIT_OK
    grown = [times(subset[0], "o", 20.0), *subset[1:]]
    after = write_run("after", grown, render=False)
    assert main(["report", str(after), "--compare", str(before)]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert f"REGRESSION {subset[0].kernel} float32 o: max r x" in out
    assert "REGRESSION" in (after / "comparison.md").read_text()
    assert (after / "comparison.html").is_file()
    assert main(["report", str(after), "--compare", str(after / "nothing")]) == EXIT_USAGE


def test_report_compares_a_v2_run_with_a_v1_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    old.mkdir()
    shutil.copyfile(V1, old / "run.json")
    baseline = load_run(old)
    # The fp32 triton/chunk case with the largest r on o: its growth is the group's.
    target = max(
        (r for r in cases_of(baseline) if (r.kernel, r.dtype) == ("triton/chunk", "float32")),
        key=lambda r: next(c.scores.r for c in r.comparisons if c.tensor == "o"),
    )
    records = [times(r, "o", 20.0) if r == target else r for r in cases_of(baseline)]
    fields = ("command", "status", "started", "finished", "seconds", "environment", "arguments")
    document = build_document(
        **{k: baseline[k] for k in fields}, kernels=baseline["kernels"], cases=records
    )
    new = tmp_path / "new"
    new.mkdir()
    (new / "run.json").write_text(json.dumps(document))
    assert main(["report", str(new), "--compare", str(old)]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "REGRESSION triton/chunk float32 o: max r x20" in out
    assert json.loads((old / "run.json").read_text()) == json.loads(V1.read_text())
    # The baseline renders as well: it is read as version 2.
    assert main(["report", str(old), "--out", str(tmp_path / "old-report")]) == EXIT_OK
    assert (tmp_path / "old-report" / "report.md").read_text().startswith("# linattn-verify")


def test_run_writes_the_run_document_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--kernels", "torch/chunk", "--dtypes", "float32", "--examples", "2"]
    flags += ["--max-seq-len", "8", "--no-backward", "--out", str(tmp_path)]
    assert main(["run", *flags]) == EXIT_OK
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["schema"] == SCHEMA_VERSION
    assert document["command"] == "run"
    assert document["status"] == "complete"
    assert document["arguments"]["kernels"] == ["torch/chunk"]
    assert [k["name"] for k in document["kernels"]] == ["torch/chunk"]
    assert document["totals"]["cases"] == 2
    assert {r.kernel for r in cases_of(document)} == {"torch/chunk"}
    assert (tmp_path / "report.html").is_file()
    assert (tmp_path / "report.md").is_file()
    assert "report: " in capsys.readouterr().out


def test_a_failing_case_of_run_is_saved_for_replay(
    tmp_path: Path, reference_kernels: list[Any]
) -> None:
    from linattn_verify.failures import replay
    from linattn_verify.linear_attn.strategies import ProblemSpec
    from linattn_verify.registry import registered_properties
    from linattn_verify.running import verify_case

    chunk = next(k for k in reference_kernels if k.form == "chunk")

    def wrong(*args: Any, **kwargs: Any) -> Any:
        o, state = chunk.fn(*args, **kwargs)
        return o * 1.01, state

    broken = dataclasses.replace(chunk, name="bug/scaled", fn=wrong)
    case = ProblemSpec(
        B=1, T=9, H=2, K=3, V=4, dtype="float32", feature_map="identity", normalize=False,
        eps=0.0, scale=None, values="normal", decay="none", initial_state=False,
        output_final_state=True, segments=None, seed=7,
    )  # fmt: skip
    record = verify_case(broken, case, backward=False, failures_dir=tmp_path)
    assert isinstance(record, CaseRecord)
    assert not record.ok
    assert record.failure_file is not None
    assert Path(record.failure_file).is_file()
    result = replay(
        record.failure_file, properties=registered_properties(), kernels={broken.name: broken}
    )
    assert not result.ok
