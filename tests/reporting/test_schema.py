# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The run document: its shipped JSON Schemas, round trips, and rejection of malformed documents."""

from __future__ import annotations

import copy
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import (
    SCHEMA_V1,
    SCHEMA_VERSION,
    cases_of,
    load_run,
    run_schema,
    validate,
    verdicts_of,
)
from linattn_verify.results import STATUSES, CaseRecord, PropertyVerdict


def strict_json(text: str) -> Any:
    def reject(constant: str) -> Any:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


@pytest.mark.parametrize("version", [SCHEMA_V1, SCHEMA_VERSION])
def test_the_shipped_schemas_are_valid_draft_2020_12_schemas(version: str) -> None:
    schema = run_schema(version)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == version
    Draft202012Validator.check_schema(schema)


def test_the_v2_schema_names_the_result_models_statuses() -> None:
    defs = run_schema()["$defs"]
    assert tuple(defs["case"]["properties"]["status"]["enum"]) == STATUSES
    verdict_statuses = set(defs["verdict"]["properties"]["status"]["enum"])
    assert verdict_statuses == {"held", "failed", "not_applicable", "not_run", "within_rounding"}
    # Every field the model writes is in the schema, which allows no other; every field is
    # required but those documents written before they existed lack: a case's diagnosis, a
    # verdict's count of within-rounding examples.
    assert set(defs["case"]["properties"]) == set(CaseRecord.__dataclass_fields__)
    assert set(defs["case"]["required"]) == set(CaseRecord.__dataclass_fields__) - {"diagnosis"}
    fields = set(PropertyVerdict.__dataclass_fields__)
    assert set(defs["verdict"]["properties"]) == fields
    assert set(defs["verdict"]["required"]) == fields - {"within_rounding"}


def test_round_trip_write_load_validate(
    write_run: Any, passing_records: list[CaseRecord], reference_kernels: list[Any]
) -> None:
    directory = write_run("run", passing_records, reference_kernels, render=False)
    written = strict_json((directory / "run.json").read_text())
    loaded = load_run(directory)
    validate(loaded)
    assert loaded == written
    assert loaded["schema"] == SCHEMA_VERSION
    assert loaded["status"] == "complete"
    assert cases_of(loaded) == passing_records
    assert [k["name"] for k in loaded["kernels"]] == [k.name for k in reference_kernels]
    assert set(loaded["kernels"][0]["recipes"]) == set(reference_kernels[0].capabilities.dtypes)
    env = loaded["environment"]
    assert (env["device"], env["interpreter"], env["hypothesis_profile"], env["seed"]) == (
        "cpu",
        True,
        "test",
        0,
    )
    # Each form and dtype has a distribution per tensor, from the oracle comparisons.
    groups = {(d["kernel"], d["dtype"], d["tensor"]): d for d in loaded["distributions"]}
    chunk_o = [
        c.scores
        for r in passing_records
        if r.kernel == "torch/chunk" and r.dtype == "float32"
        for c in r.comparisons
        if c.tensor == "o"
    ]
    o = groups[("torch/chunk", "float32", "o")]
    assert o["cases"] == len(chunk_o)
    assert o["r"]["max"] == max(s.r for s in chunk_o)
    assert o["rho"]["max"] == max(s.rho for s in chunk_o if s.rho is not None)
    assert o["r"]["median"] == statistics.median(s.r for s in chunk_o)
    assert o["element"]["p999_r"] == max(s.p999_r for s in chunk_o if s.p999_r is not None)
    medians = [s.median_rho for s in chunk_o if s.median_rho is not None]
    assert o["element"]["median_rho"] == statistics.median(medians)
    backward = {
        c.tensor for r in passing_records for c in r.comparisons if r.kernel == "torch/chunk"
    }
    assert {t for k, _, t in groups if k == "torch/chunk"} == backward
    verdicts = {(v.kernel, v.property): v for v in verdicts_of(loaded)}
    assert verdicts == {
        (v.kernel, v.property): v for v in PropertyVerdict.of_cases(passing_records)
    }
    assert {v.status for v in verdicts.values()} == {"held"}
    assert loaded["totals"] == {
        "cases": len(passing_records),
        "passed": len(passing_records),
        "failed": 0,
        "not_applicable": 0,
        "undecided": 0,
        "errors": 0,
        "ok": True,
        "largest_T": max(r.T for r in passing_records),
        "largest_head_dim": max(max(r.K, r.V) for r in passing_records),
    }


def test_worst_cases_are_ranked_by_the_deciding_score(
    write_run: Any, passing_records: list[CaseRecord], broken_records: list[CaseRecord]
) -> None:
    records = [*passing_records, *broken_records]
    document = load_run(write_run("run", records, render=False))
    worst = cases_of(document, "worst_cases")
    ranked = sorted(records, key=lambda r: -r.worst_score)
    assert [r.worst_score for r in worst] == [r.worst_score for r in ranked[: len(worst)]]
    assert set(worst[: len(broken_records)]) == set(broken_records)


def test_nonfinite_scores_are_written_as_standard_json(
    build: Any, write_run: Any, passing_records: list[CaseRecord]
) -> None:
    nan = build.comparison("o", "torch/chunk", math.nan)
    inf = build.comparison("final_state", "torch/chunk", math.inf)
    record = build.record("torch/chunk", "chunk", 9, "float32", [nan, inf])
    assert record.status == "failed"
    directory = write_run("nonfinite", [record], render=False)
    document = strict_json((directory / "run.json").read_text())
    [comparisons] = [c["comparisons"] for c in document["cases"]]
    assert [c["deciding"] for c in comparisons] == ["nan", "inf"]
    assert comparisons[1]["worst"]["actual"] == "inf"
    assert document["distributions"][0]["r"]["max"] == "inf"
    strict_json((directory / "results.jsonl").read_text().splitlines()[0])
    [read] = cases_of(document)
    assert math.isnan(read.comparisons[0].deciding)
    assert not math.isfinite(read.worst_score)


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("kernels", 0, "name"), 3, "kernels/0/name"),
        (("totals", "passed"), -1, "totals/passed"),
        (("verdicts", 0, "status"), "n/a", "verdicts/0/status"),
        (("environment", "interpreter"), "yes", "environment/interpreter"),
        (("cases", 0, "status"), "skipped", "cases/0/status"),
        (("cases", 0, "error"), "no", "cases/0/error"),
        (("cases", 0, "comparisons", 0, "reference"), "truth", "cases/0/comparisons/0/reference"),
        (("cases", 0, "comparisons", 0, "status"), "n/a", "cases/0/comparisons/0/status"),
        (("cases", 0, "comparisons", 0, "scores", "r"), "big", "cases/0/comparisons/0/scores/r"),
        (("cases", 0, "comparisons", 0, "counts", "numel"), -1, "comparisons/0/counts/numel"),
        (("cases", 0, "comparisons", 0, "worst", "index"), [0.5], "comparisons/0/worst/index/0"),
        (("worst_cases", 0, "T"), "16", "worst_cases/0/T"),
    ],
)
def test_a_malformed_document_is_rejected_naming_the_field(
    write_run: Any,
    passing_records: list[CaseRecord],
    reference_kernels: list[Any],
    path: tuple[Any, ...],
    value: Any,
    where: str,
) -> None:
    directory = write_run("run", passing_records[:3], reference_kernels[:1], render=False)
    document = load_run(directory)
    validate(document)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidArgument, match=f"at [a-z_/0-9]*{where}:"):
        validate(document)


@pytest.mark.parametrize("field", ["status", "comparisons", "case", "error"])
def test_a_case_missing_a_field_or_carrying_an_unknown_one_is_rejected(
    write_run: Any, passing_records: list[CaseRecord], field: str
) -> None:
    document = load_run(write_run("run", passing_records[:2], render=False))
    missing = copy.deepcopy(document)
    del missing["cases"][1][field]
    with pytest.raises(InvalidArgument, match=f"at cases/1: '{field}' is a required property"):
        validate(missing)
    extra = copy.deepcopy(document)
    extra["cases"][1]["ok"] = True  # a version 1 field
    with pytest.raises(InvalidArgument, match="at cases/1: Additional properties"):
        validate(extra)


def test_a_case_may_carry_a_diagnosis_and_older_cases_lack_one(
    write_run: Any, passing_records: list[CaseRecord]
) -> None:
    diagnosed = replace(passing_records[1], diagnosis="consistent with 3 roundings to float16")
    document = load_run(write_run("run", [passing_records[0], diagnosed], render=False))
    validate(document)
    assert document["cases"][1]["diagnosis"] == diagnosed.diagnosis
    assert cases_of(document)[1] == diagnosed
    older = copy.deepcopy(document)
    for case in older["cases"]:
        del case["diagnosis"]
    validate(older)
    assert cases_of(older)[1].diagnosis is None
    wrong = copy.deepcopy(document)
    wrong["cases"][1]["diagnosis"] = ["not", "a", "string"]
    with pytest.raises(InvalidArgument, match="at cases/1/diagnosis:"):
        validate(wrong)


def test_a_missing_field_and_a_foreign_version_are_rejected(
    tmp_path: Path, write_run: Any, passing_records: list[CaseRecord]
) -> None:
    directory = write_run("run", passing_records[:2], render=False)
    document = load_run(directory)
    missing = {k: v for k, v in document.items() if k != "totals"}
    with pytest.raises(InvalidArgument, match="'totals' is a required property"):
        validate(missing)
    with pytest.raises(InvalidArgument, match="linattn-verify/run/v3"):
        validate({**document, "schema": "linattn-verify/run/v3"})
    with pytest.raises(InvalidArgument, match="Expected a run document"):
        validate([document])
    (directory / "run.json").write_text(json.dumps({**document, "schema": "linattn-verify/run/v3"}))
    with pytest.raises(InvalidArgument, match=r"schema='linattn-verify/run/v3', but this version"):
        load_run(directory)


def test_load_run_rejects_a_directory_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"neither run\.json nor results\.jsonl"):
        load_run(tmp_path)
    with pytest.raises(InvalidArgument, match="not a directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(InvalidArgument, match="Expected a path"):
        load_run(3)  # type: ignore[arg-type]
