# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""RunWriter: cases appended as they finish, interrupted runs rebuilt, verdicts, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import RunWriter, load_run, validate

ENVIRONMENT = {"device": "cpu", "triton_mode": "interpreter"}


def writer(directory: Path, **kwargs: Any) -> RunWriter:
    return RunWriter(directory, environment=ENVIRONMENT, profile="test", seed=1, **kwargs)


def test_each_case_is_on_disk_as_soon_as_it_is_added(
    tmp_path: Path, passing_records: list[dict[str, Any]]
) -> None:
    run = writer(tmp_path)
    for n, record in enumerate(passing_records[:3], start=1):
        run.add_case(record)
        lines = (tmp_path / "results.jsonl").read_text().splitlines()
        assert len(lines) == n
        assert json.loads(lines[-1])["case"] == record["case"]


def test_an_interrupted_run_is_rebuilt_from_its_json_lines(
    tmp_path: Path,
    passing_records: list[dict[str, Any]],
    broken_records: list[dict[str, Any]],
    reference_kernels: list[Any],
) -> None:
    run = writer(tmp_path)
    run.add_kernel(reference_kernels[1])
    for record in [*passing_records[:4], *broken_records]:
        run.add_case(record)
    # The process dies in the middle of writing the next line.
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write('{"kernel": "torch/ch')
    document = load_run(tmp_path)
    validate(document)
    assert document["status"] == "incomplete"
    assert document["finished"] is None
    assert len(document["cases"]) == 4 + len(broken_records)
    assert [k["name"] for k in document["kernels"]] == ["torch/chunk"]
    assert document["environment"]["seed"] == 1
    assert not document["totals"]["ok"]
    assert document["failures"][0]["kernel"] == "bug/scaled"


def test_a_run_without_run_json_is_rebuilt_from_results_alone(
    tmp_path: Path, passing_records: list[dict[str, Any]]
) -> None:
    (tmp_path / "results.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in passing_records[:5])
    )
    document = load_run(tmp_path)
    assert document["status"] == "incomplete"
    assert document["environment"]["device"] == "unknown"
    assert {k["name"] for k in document["kernels"]} == {"torch/parallel"}
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write("not json\n" + json.dumps(passing_records[0]) + "\n")
    with pytest.raises(InvalidArgument, match=r"results.jsonl:6 is not a JSON line"):
        load_run(tmp_path)


def test_checks_verdicts_replace_those_derived_from_cases(
    tmp_path: Path, broken_records: list[dict[str, Any]]
) -> None:
    run = writer(tmp_path, command="check")
    for record in broken_records:
        run.add_case(record)
    run.add_verdict(
        "outputs_match_oracle",
        kernel="bug/scaled",
        ok=False,
        examples=7,
        seconds=1.5,
        message="outputs_match_oracle FAILED",
        failure_file=broken_records[-1]["failure_file"],
    )
    run.add_verdict("causality_exact", kernel="bug/scaled", ok=True, examples=4, skipped=4)
    document = run.finish(render=False)
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert verdicts["outputs_match_oracle"]["examples"] == 7
    assert verdicts["outputs_match_oracle"]["status"] == "failed"
    assert verdicts["causality_exact"]["status"] == "n/a"
    [failure] = document["failures"]
    assert failure["occurrences"] == len(broken_records)
    assert failure["case"] == broken_records[-1]["case"]
    assert failure["replay"] == f"linattn-verify replay {broken_records[-1]['failure_file']}"
    assert load_run(tmp_path) == document
    with pytest.raises(RuntimeError, match="finished"):
        run.add_case(broken_records[0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: RunWriter(3, environment=ENVIRONMENT), "directory=3"),
        (lambda d: RunWriter(d, command="bench", environment=ENVIRONMENT), "command='bench'"),
        (lambda d: RunWriter(d, environment=[1]), "environment"),
        (lambda d: RunWriter(d, environment=ENVIRONMENT, seed="0"), "seed='0'"),
        (lambda d: writer(d).add_case([1]), "record=\\[1\\]"),
        (lambda d: writer(d).add_case({"kernel": "k", "ok": "yes"}), "bool 'ok'"),
        (lambda d: writer(d).add_kernel("torch/chunk"), "Kernel"),
        (lambda d: writer(d).add_verdict("p", kernel="k", ok=True, examples=-1), "examples=-1"),
        (lambda d: writer(d).add_verdict("", kernel="k", ok=True, examples=1), "property=''"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, call: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        call(tmp_path)
