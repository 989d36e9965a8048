# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify run` and `list`: the main job writes its records and summary."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from linattn_verify import registry
from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

CASE_LINE = re.compile(r"^  (ok  |FAIL) (\S+) +(\S+) +T=\d+ ", re.MULTILINE)
"""A per-case line (`linattn_verify.running.progress_line`): status, kernel, dtype, T."""

SMALL = ["--dtypes", "float32", "--examples", "2", "--max-seq-len", "8", "--no-backward"]


def test_run_writes_records_and_summary(tmp_path: Path) -> None:
    code = main(
        [
            "run",
            "--kernels",
            "triton/chunk,triton/recurrent",
            "--dtypes",
            "float32",
            "--examples",
            "2",
            "--max-seq-len",
            "12",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == EXIT_OK
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["kernel"] for r in records} == {"triton/chunk", "triton/recurrent"}
    assert all(r["status"] == "held" for r in records)
    for r in records:
        (o,) = [c for c in r["comparisons"] if c["tensor"] == "o"]
        assert o["reference"] == "oracle"
        assert o["deciding"] <= 2
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["totals"]["cases"] == len(records)
    assert document["totals"]["passed"] == len(records)


def test_run_on_vector_gates_draws_only_vector_gates(tmp_path: Path) -> None:
    flags = ["--dtypes", "float32", "--examples", "8", "--max-seq-len", "8", "--seed", "3"]
    code = main(
        ["run", "--kernels", "torch/chunk", "--gates", "vector", *flags, "--out", str(tmp_path)]
    )
    assert code == EXIT_OK
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    cases = [r["case"] for r in records]
    assert len(cases) == 8
    # Every gated case has a vector gate; the others have no decay at all.
    assert all("gate='vector'" in c or "decay='none'" in c for c in cases)
    assert any("gate='vector'" in c for c in cases)
    arguments = json.loads((tmp_path / "run.json").read_text())["arguments"]
    assert arguments["gates"] == ["vector"]


def test_run_rejects_gates_no_chosen_kernel_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--kernels", "torch/*", "--gates", "matrix"])
    assert info.value.code == EXIT_USAGE
    pytest.importorskip("fla", reason="fla-core is not installed")
    # FLA's linear_attn kernels take no decay: no vector-gate case exists for them.
    assert main(["run", "--kernels", "fla/linear_attn.chunk", "--gates", "vector"]) == EXIT_USAGE
    assert "takes --gates vector" in capsys.readouterr().err


def test_run_rejects_a_kernel_glob_matching_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--kernels", "quadratic/*"]) == EXIT_USAGE
    assert "--kernels quadratic/*" in capsys.readouterr().err


def test_run_refuses_a_ray_address_without_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before any search or file: --workers 1 runs in this process, a cluster takes N > 1.
    out = tmp_path / "out"
    flags = ["--kernels", "torch/chunk", "--ray-address", "127.0.0.1:6379", "--out", str(out)]
    assert main(["run", *flags]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--ray-address 127.0.0.1:6379" in err
    assert "--workers" in err
    assert not out.exists()


@pytest.mark.slow  # Ray's start-up and 30 cases on CI's 2 cores: the slow tier's
def test_run_gives_the_same_verdicts_over_two_workers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def records(workers: int) -> list[tuple[str, str, str, str, list[float]]]:
        out = tmp_path / f"workers-{workers}"
        flags = ["--kernels", "torch/*", "--dtypes", "float32,bfloat16", "--examples", "3"]
        flags += ["--max-seq-len", "10", "--workers", str(workers), "--out", str(out)]
        assert main(["run", *flags]) == EXIT_OK
        # Neither this process nor a Ray worker (capfd sees their output too) prints a case
        # line; the driver's bar counts every case the workers ran.
        shown = capfd.readouterr()
        assert not CASE_LINE.search(shown.out + shown.err)
        assert f"{5 * 3 * 2}/{5 * 3 * 2} cases" in shown.err
        lines = (out / "results.jsonl").read_text().splitlines()
        found = [json.loads(line) for line in lines]
        return sorted(
            (
                r["kernel"],
                r["dtype"],
                r["case"],
                r["status"],
                [c["deciding"] for c in r["comparisons"]],
            )
            for r in found
        )

    one, two = records(1), records(2)
    # torch/* is both families: three linear-attention forms and the two delta-rule references.
    assert len(one) == 5 * 3 * 2
    assert {r[0] for r in one} >= {"torch/delta.recurrent", "torch/delta.chunk"}
    assert one == two


def test_list_names_every_builtin_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == EXIT_OK
    out = capsys.readouterr().out
    for name in ("triton/parallel", "triton/chunk", "triton/recurrent", "torch/chunk"):
        assert f"{name}:" in out


def test_run_shows_a_bar_and_a_short_summary_not_a_line_per_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--kernels", "torch/chunk,torch/recurrent", *SMALL, "--out", str(tmp_path)]
    assert main(["run", *flags]) == EXIT_OK
    shown = capsys.readouterr()
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert not CASE_LINE.search(shown.out + shown.err), "per-case lines only with -v"
    # The bar (stderr) ends at the cases really run, whatever the plan was.
    assert f"{len(records)}/{len(records)} cases" in shown.err
    assert "no failures" in shown.err
    out = shown.out.splitlines()
    assert f"PASSED: {len(records)} cases, {len(records)} passed, 0 failed in " in shown.out
    # One line per kernel and dtype, leading with the worst r, its headroom and the tensor.
    rows = [line for line in out if line.startswith("  torch/")]
    assert [row.split()[:2] for row in sorted(rows)] == [
        ["torch/chunk", "float32"],
        ["torch/recurrent", "float32"],
    ]
    scores: list[float] = []
    for row in rows:
        kernel = row.split()[0]
        decided = [
            c
            for r in records
            if r["kernel"] == kernel
            for c in r["comparisons"]
            if c["reference"] == "oracle"
        ]
        worst = max(decided, key=lambda c: c["deciding"])
        match = re.search(r" r (\S+) +headroom (\S+)x +(\S+) ", row)
        assert match, row
        assert float(match[1]) == pytest.approx(worst["deciding"], rel=1e-2)
        assert float(match[2]) == pytest.approx(2 / worst["deciding"], rel=0.1)
        assert match[3] == worst["tensor"]
        scores.append(float(match[1]))
    assert scores == sorted(scores, reverse=True), "worst first"
    # rho (which explodes on tiny values) is not on the terminal; the report path closes it.
    assert "rho" not in shown.out
    assert "ρ" not in shown.out
    assert out[-1] == f"report: {tmp_path / 'report.md'}, {tmp_path / 'report.html'}"
    # Two header lines, a blank, the verdict, the legend, the rows, the report: nothing else.
    assert len(out) == 2 + 1 + 1 + 1 + len(rows) + 1


def test_run_verbose_prints_a_line_per_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--kernels", "torch/chunk,torch/recurrent", *SMALL, "--out", str(tmp_path), "-v"]
    assert main(["run", *flags]) == EXIT_OK
    shown = capsys.readouterr()
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    lines = CASE_LINE.findall(shown.err)
    assert sorted((s, k, d) for s, k, d in lines) == sorted(
        ("ok  ", r["kernel"], r["dtype"]) for r in records
    )


def _off_by_one(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    o, state = registry.get_kernel("torch/recurrent").fn(*args, **kwargs)
    return o + 1, state


def test_run_summary_of_a_failing_kernel_leads_with_it_and_its_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = replace(registry.get_kernel("torch/recurrent"), name="bug/off_by_one", fn=_off_by_one)
    monkeypatch.setitem(registry._REGISTERED, broken.name, broken)
    flags = ["--kernels", "bug/off_by_one,torch/chunk", *SMALL, "--out", str(tmp_path)]
    assert main(["run", *flags]) == EXIT_FAILED
    shown = capsys.readouterr()
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    failed = [r for r in records if r["status"] == "failed"]
    assert failed
    assert {r["kernel"] for r in failed} == {"bug/off_by_one"}
    assert f"{len(failed)} failed" in shown.err, "the bar counts the failures"
    out = shown.out.splitlines()
    assert any(line.startswith(f"FAILED: {len(records)} cases, ") for line in out)
    rows = [line for line in out if line.startswith(("  bug/", "  torch/"))]
    # The failing kernel first; its headroom below 1x says by how much it is past the line.
    assert rows[0].split()[0] == "bug/off_by_one"
    assert f"{len(failed)} FAILED" in rows[0]
    headroom = float(re.search(r"headroom (\S+)x", rows[0])[1])  # type: ignore[index]
    assert headroom < 1
    # Each finding: one line, then its replay command.
    findings = [i for i, line in enumerate(out) if re.match(r"FAILED \d+\. bug/off_by_one ", line)]
    assert findings
    for i in findings:
        assert out[i + 1].strip().startswith("linattn-verify replay ")
        saved = Path(out[i + 1].split("replay ", 1)[1].strip())
        assert saved.is_file()
