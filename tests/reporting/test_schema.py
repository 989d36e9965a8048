# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The run document: its shipped JSON Schema, round trips, and rejection of malformed documents."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import SCHEMA_VERSION, load_run, run_schema, validate


def strict_json(text: str) -> Any:
    def reject(constant: str) -> Any:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


def test_the_shipped_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = run_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == SCHEMA_VERSION
    Draft202012Validator.check_schema(schema)


def test_round_trip_write_load_validate(
    write_run: Any, passing_records: list[dict[str, Any]], reference_kernels: list[Any]
) -> None:
    directory = write_run("run", passing_records, reference_kernels, render=False)
    written = strict_json((directory / "run.json").read_text())
    loaded = load_run(directory)
    validate(loaded)
    assert loaded == written
    assert loaded["status"] == "complete"
    assert loaded["cases"] == strict_json(json.dumps(passing_records))
    assert [k["name"] for k in loaded["kernels"]] == [
        "torch/parallel",
        "torch/chunk",
        "torch/recurrent",
    ]
    assert set(loaded["kernels"][0]["recipes"]) == {"float32", "float16", "bfloat16"}
    env = loaded["environment"]
    assert (env["device"], env["interpreter"], env["hypothesis_profile"], env["seed"]) == (
        "cpu",
        True,
        "test",
        0,
    )
    # Each form and dtype has a distribution per tensor, r from the cases' own maxima.
    groups = {(d["kernel"], d["dtype"], d["tensor"]): d for d in loaded["distributions"]}
    o = groups[("torch/chunk", "float32", "o")]
    chunk_o = [
        r["tensors"]["o"]["max_r"]
        for r in passing_records
        if r["kernel"] == "torch/chunk" and r["dtype"] == "float32"
    ]
    assert o["cases"] == len(chunk_o)
    assert o["r"]["max"] == max(chunk_o)
    assert o["r"]["median"] <= o["r"]["p999"] <= o["r"]["max"] <= 2
    assert o["element"]["p999_r"] is not None
    assert o["element"]["median_rho"] is not None
    assert ("torch/chunk", "float32", "dq") in groups
    verdicts = {(v["kernel"], v["property"]): v["status"] for v in loaded["verdicts"]}
    assert verdicts[("torch/chunk", "outputs_match_oracle")] == "held"
    assert verdicts[("torch/chunk", "gradients_match_oracle")] == "held"
    assert loaded["totals"] == {
        "cases": len(passing_records),
        "passed": len(passing_records),
        "failed": 0,
        "skipped": 0,
        "errors": 0,
        "ok": True,
    }


def test_nonfinite_scores_are_written_as_standard_json(
    write_run: Any, passing_records: list[dict[str, Any]]
) -> None:
    record = copy.deepcopy(passing_records[0])
    record.update(ok=False, worst_r=float("inf"), report="o is NaN")
    record["tensors"]["o"]["max_r"] = float("nan")
    directory = write_run("nonfinite", [record], render=False)
    document = strict_json((directory / "run.json").read_text())
    assert document["cases"][0]["worst_r"] == "inf"
    assert document["cases"][0]["tensors"]["o"]["max_r"] == "nan"
    assert document["distributions"][0]["r"]["max"] == "inf"
    strict_json((directory / "results.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("kernels", 0, "name"), 3, "kernels/0/name"),
        (("totals", "passed"), -1, "totals/passed"),
        (("verdicts", 0, "status"), "maybe", "verdicts/0/status"),
        (("environment", "interpreter"), "yes", "environment/interpreter"),
    ],
)
def test_a_malformed_document_is_rejected_naming_the_field(
    write_run: Any,
    passing_records: list[dict[str, Any]],
    reference_kernels: list[Any],
    path: tuple[Any, ...],
    value: Any,
    where: str,
) -> None:
    directory = write_run("run", passing_records[:3], reference_kernels[:1], render=False)
    document = load_run(directory)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidArgument, match=f"at {where}:"):
        validate(document)


def test_a_missing_field_and_a_foreign_version_are_rejected(
    write_run: Any, passing_records: list[dict[str, Any]]
) -> None:
    document = load_run(write_run("run", passing_records[:2], render=False))
    missing = {k: v for k, v in document.items() if k != "totals"}
    with pytest.raises(InvalidArgument, match="'totals' is a required property"):
        validate(missing)
    with pytest.raises(InvalidArgument, match="linattn-verify/run/v2"):
        validate({**document, "schema": "linattn-verify/run/v2"})
    with pytest.raises(InvalidArgument, match="Expected a run document"):
        validate([document])


def test_load_run_rejects_a_directory_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"neither run\.json nor results\.jsonl"):
        load_run(tmp_path)
    with pytest.raises(InvalidArgument, match="not a directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(InvalidArgument, match="Expected a path"):
        load_run(3)  # type: ignore[arg-type]
