# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""RunWriter: cases appended as they finish, round trips, interrupted runs rebuilt, verdicts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import RunWriter, cases_of, load_run, validate, verdicts_of
from linattn_verify.results import CaseRecord, PropertyVerdict

ENVIRONMENT = {"device": "cpu", "triton_mode": "interpreter"}


def writer(directory: Path, **kwargs: Any) -> RunWriter:
    return RunWriter(directory, environment=ENVIRONMENT, profile="test", seed=1, **kwargs)


def test_each_case_is_on_disk_as_soon_as_it_is_added(
    tmp_path: Path, passing_records: list[CaseRecord]
) -> None:
    run = writer(tmp_path)
    for n, record in enumerate(passing_records[:3], start=1):
        run.add_case(record)
        lines = (tmp_path / "results.jsonl").read_text().splitlines()
        assert len(lines) == n
        assert json.loads(lines[-1]) == record.to_json()
        assert CaseRecord.from_json(json.loads(lines[-1])) == record


def test_records_and_verdicts_round_trip_through_the_writer_and_load_run(
    tmp_path: Path,
    build: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
) -> None:
    not_applicable = dataclasses.replace(
        passing_records[0], status="not_applicable", comparisons=(), reason="no decay declared"
    )
    pair = build.record(
        "torch/chunk",
        "chunk",
        9,
        "float32",
        [build.comparison("o", "split run", 0.4, reference="pair:whole run")],
        prop="chunking_is_invisible",
    )
    records = [
        *passing_records[:4],
        *broken_records,
        not_applicable,
        pair,
        build.harness_error(),
    ]
    verdict = PropertyVerdict(
        kernel="bug/scaled",
        property="outputs_match_oracle",
        status="failed",
        examples=9,
        seconds=1.25,
        message="outputs_match_oracle FAILED for bug/scaled",
        failure_file=broken_records[-1].failure_file,
        first_failure_seconds=0.5,
    )
    run = writer(tmp_path, command="check")
    for record in records:
        run.add_case(record)
    run.add_verdict(verdict)
    written = run.finish(render=False)
    loaded = load_run(tmp_path)
    assert loaded == written
    assert cases_of(loaded) == records
    assert verdict in verdicts_of(loaded)
    lines = run.lines_path.read_text().splitlines()
    assert [CaseRecord.from_json(json.loads(line)) for line in lines] == records


def test_an_interrupted_run_is_rebuilt_from_its_json_lines(
    tmp_path: Path,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
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
    assert cases_of(document) == [*passing_records[:4], *broken_records]
    assert [k["name"] for k in document["kernels"]] == [reference_kernels[1].name]
    assert document["environment"]["seed"] == 1
    assert not document["totals"]["ok"]
    assert [f["kernel"] for f in document["failures"]] == [broken_records[0].kernel]


def test_a_run_without_run_json_is_rebuilt_from_results_alone(
    tmp_path: Path, passing_records: list[CaseRecord]
) -> None:
    chosen = passing_records[:5]
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r.to_json()) + "\n" for r in chosen))
    document = load_run(tmp_path)
    assert document["status"] == "incomplete"
    assert document["environment"]["device"] == "unknown"
    assert {k["name"] for k in document["kernels"]} == {r.kernel for r in chosen}
    with lines.open("a") as f:
        f.write("not json\n" + json.dumps(chosen[0].to_json()) + "\n")
    with pytest.raises(InvalidArgument, match=rf"results.jsonl:{len(chosen) + 1} is not a JSON"):
        load_run(tmp_path)
    lines.write_text(json.dumps({"kernel": "k", "status": "held"}) + "\n")
    with pytest.raises(InvalidArgument, match=r"results.jsonl:1 is not a case record .*missing"):
        load_run(tmp_path)


def test_checks_verdicts_replace_those_derived_from_cases(
    tmp_path: Path, broken_records: list[CaseRecord]
) -> None:
    kernel = broken_records[0].kernel
    run = writer(tmp_path, command="check")
    for record in broken_records:
        run.add_case(record)
    first = PropertyVerdict(kernel, "outputs_match_oracle", "failed", examples=3, message="old")
    searched = dataclasses.replace(
        first,
        examples=7,
        seconds=1.5,
        message="outputs_match_oracle FAILED",
        failure_file=broken_records[-1].failure_file,
    )
    never = PropertyVerdict(kernel, "causality_exact", "not_applicable", 4, not_applicable=4)
    run.add_verdict(first)
    run.add_verdict(searched)  # the same kernel and property: replaces the first
    run.add_verdict(never)
    document = run.finish(render=False)
    verdicts = {v.property: v for v in verdicts_of(document)}
    assert verdicts == {"outputs_match_oracle": searched, "causality_exact": never}
    [failure] = document["failures"]
    assert failure["occurrences"] == len(broken_records)
    assert failure["case"] == broken_records[-1].case
    assert failure["replay"] == f"linattn-verify replay {broken_records[-1].failure_file}"
    assert failure["message"] == broken_records[-1].result.report()
    assert load_run(tmp_path) == document
    with pytest.raises(RuntimeError, match="finished"):
        run.add_case(broken_records[0])


def test_a_harness_error_is_an_error_not_a_failure(tmp_path: Path, build: Any) -> None:
    error = build.harness_error(message="harness error: ValueError: odd")
    run = writer(tmp_path)
    run.add_case(error)
    document = run.finish(render=False)
    assert (document["totals"]["errors"], document["totals"]["failed"]) == (1, 0)
    assert not document["totals"]["ok"]
    [failure] = document["failures"]
    assert failure["message"] == error.reason
    assert failure["replay"] is None


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: RunWriter(3, environment=ENVIRONMENT), "directory=3"),
        (lambda d: RunWriter(d, command="bench", environment=ENVIRONMENT), "command='bench'"),
        (lambda d: RunWriter(d, environment=[1]), "environment"),
        (lambda d: RunWriter(d, environment=ENVIRONMENT, seed="0"), "seed='0'"),
        (lambda d: writer(d).add_case({"kernel": "k", "ok": True}), "CaseRecord.*record="),
        (lambda d: writer(d).add_kernel("torch/chunk"), "Kernel"),
        (lambda d: writer(d).add_verdict({"kernel": "k"}), "PropertyVerdict.*verdict="),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, call: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        call(tmp_path)
