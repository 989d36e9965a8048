# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify run` and `list`: the main job writes its records and summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linattn_verify.cli import EXIT_OK, EXIT_USAGE, main


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


def test_run_gives_the_same_verdicts_over_two_workers(tmp_path: Path) -> None:
    def records(workers: int) -> list[tuple[str, str, str, str, list[float]]]:
        out = tmp_path / f"workers-{workers}"
        flags = ["--kernels", "torch/*", "--dtypes", "float32,bfloat16", "--examples", "3"]
        flags += ["--max-seq-len", "10", "--workers", str(workers), "--out", str(out)]
        assert main(["run", *flags]) == EXIT_OK
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
