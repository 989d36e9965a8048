# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Version 1 run documents are read, upgraded to version 2, and compared with version 2 runs.

``data/run-v1.json`` is a real version 1 document: twelve cases of the committed sample
(``reports/sample``, the Triton kernels under the interpreter, fp32 and bf16), summarized by the
version 1 code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.reporting import (
    SCHEMA_V1,
    SCHEMA_VERSION,
    cases_of,
    compare_runs,
    load_run,
    validate,
    verdicts_of,
)
from linattn_verify.reporting._v1 import NO_DETAIL
from linattn_verify.reporting.summary import build_document, distributions
from linattn_verify.results import CaseRecord

V1 = Path(__file__).parent / "data" / "run-v1.json"


@pytest.fixture
def v1_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(V1.read_text())
    validate(document, version=SCHEMA_V1)
    return document


def run_dir(tmp_path: Path, name: str, document: dict[str, Any]) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "run.json").write_text(json.dumps(document))
    return directory


def test_a_v1_document_is_upgraded_on_load(tmp_path: Path, v1_document: dict[str, Any]) -> None:
    loaded = load_run(run_dir(tmp_path, "old", v1_document))
    validate(loaded)
    assert loaded["schema"] == SCHEMA_VERSION
    for key in ("command", "status", "started", "environment", "kernels", "distributions"):
        assert loaded[key] == v1_document[key], key
    records = cases_of(loaded)
    assert len(records) == len(v1_document["cases"])
    for old, new in zip(v1_document["cases"], records, strict=True):
        assert (new.kernel, new.form, new.property, new.dtype) == (
            old["kernel"],
            old["form"],
            old["property"],
            old["dtype"],
        )
        assert (new.T, new.K, new.V, new.case) == (old["T"], old["K"], old["V"], old["case"])
        assert new.status == ("held" if old["ok"] else "failed")
        assert [c.tensor for c in new.comparisons] == list(old["tensors"])
        for c in new.comparisons:
            scores = old["tensors"][c.tensor]
            assert c.reference == "oracle"
            assert c.subject == old["kernel"]
            assert c.scores.r == scores["max_r"]
            assert c.scores.rho == scores.get("max_rho")
            assert c.scores.p999_r == scores.get("p999_r")
            assert c.scores.median_rho == scores.get("median_rho")
            assert c.scores.eta == scores.get("max_eta")
            assert c.deciding == max(scores["max_r"], scores.get("max_eta") or 0.0)
        # The deciding comparison is the one version 1 named.
        assert new.worst is not None
        assert (new.worst.tensor, new.worst_score) == (old["worst_tensor"], old["worst_r"])
    # The upgraded comparisons carry the scores the version 1 distributions were built from.
    assert distributions(records) == v1_document["distributions"]
    assert [(r.kernel, r.case) for r in cases_of(loaded, "worst_cases")] == [
        (c["kernel"], c["case"]) for c in v1_document["worst_cases"]
    ]
    for old_verdict, verdict in zip(v1_document["verdicts"], verdicts_of(loaded), strict=True):
        assert (verdict.kernel, verdict.property, verdict.status) == (
            old_verdict["kernel"],
            old_verdict["property"],
            old_verdict["status"],
        )
        assert verdict.not_applicable == old_verdict["skipped"]
    totals = v1_document["totals"]
    assert loaded["totals"] == {
        **{k: v for k, v in totals.items() if k != "skipped"},
        "not_applicable": totals["skipped"],
        "undecided": 0,
    }


def test_v1_statuses_take_their_new_names(tmp_path: Path, v1_document: dict[str, Any]) -> None:
    document = copy.deepcopy(v1_document)
    first, second = document["verdicts"][:2]
    first.update(status="n/a", skipped=first["examples"])
    second.update(status="not run", examples=0)
    template = document["cases"][0]
    skipped = {**template, "skipped": "needs a decay the kernel does not declare"}
    error = {k: template[k] for k in ("kernel", "form", "dtype", "T", "spec", "case")}
    error.update(ok=False, error="RuntimeError: boom")
    failed = copy.deepcopy(template)
    failed.update(ok=False, report="o is not close to the oracle", worst_r=40.0)
    failed["tensors"]["o"]["max_r"] = 40.0
    document["cases"] += [skipped, error, failed]
    validate(document, version=SCHEMA_V1)
    loaded = load_run(run_dir(tmp_path, "old", document))
    verdicts = verdicts_of(loaded)
    assert (verdicts[0].status, verdicts[0].not_applicable) == ("not_applicable", first["skipped"])
    assert (verdicts[1].status, verdicts[1].examples) == ("not_run", 0)
    *_, na, harness, bad = cases_of(loaded)
    assert (na.status, na.reason, na.error) == ("not_applicable", skipped["skipped"], False)
    assert (harness.status, harness.reason, harness.error) == ("failed", error["error"], True)
    assert (harness.property, harness.comparisons) == ("?", ())
    assert (bad.status, bad.reason, bad.error) == ("failed", failed["report"], False)
    assert bad.worst is not None
    assert (bad.worst.tensor, bad.worst.status, bad.worst.reason) == ("o", "failed", NO_DETAIL)
    assert [c.tensor for c in bad.comparisons if not c.ok] == ["o"]


def test_an_interrupted_v1_run_is_rebuilt_from_its_v1_lines(
    tmp_path: Path, v1_document: dict[str, Any]
) -> None:
    header = {**v1_document, "status": "incomplete", "finished": None, "cases": []}
    header.update(worst_cases=[], distributions=[], failures=[])
    directory = run_dir(tmp_path, "cut", header)
    lines = "".join(json.dumps(case) + "\n" for case in v1_document["cases"])
    (directory / "results.jsonl").write_text(lines)
    loaded = load_run(directory)
    assert loaded["schema"] == SCHEMA_VERSION
    assert loaded["status"] == "incomplete"
    assert len(loaded["cases"]) == len(v1_document["cases"])
    assert loaded["distributions"] == v1_document["distributions"]
    assert [v.status for v in verdicts_of(loaded)] == [v["status"] for v in header["verdicts"]]
    assert loaded["totals"]["passed"] == v1_document["totals"]["passed"]


def grown(records: list[CaseRecord], kernel: str, factor: float) -> list[CaseRecord]:
    """``records`` with ``kernel``'s fp32 ``o`` scores multiplied by ``factor``."""
    out = []
    for record in records:
        if record.kernel == kernel and record.dtype == "float32":
            comparisons = tuple(
                dataclasses.replace(
                    c,
                    deciding=c.deciding * factor,
                    scores=dataclasses.replace(c.scores, r=c.scores.r * factor),
                )
                if c.tensor == "o"
                else c
                for c in record.comparisons
            )
            record = dataclasses.replace(record, comparisons=comparisons)
        out.append(record)
    return out


def test_a_v1_run_compares_against_a_v2_run(tmp_path: Path, v1_document: dict[str, Any]) -> None:
    old = load_run(run_dir(tmp_path, "old", v1_document))
    records = grown(cases_of(old), "triton/chunk", 12.0)
    new = build_document(
        command="run",
        status="complete",
        started=old["started"],
        finished=old["finished"],
        seconds=1.0,
        environment=old["environment"],
        arguments=old["arguments"],
        kernels=old["kernels"],
        cases=records,
    )
    comparison = compare_runs(old, new, before_label="v1", after_label="v2")
    flagged = [(s.kernel, s.dtype, s.tensor, s.notes) for s in comparison.scores if s.regression]
    assert flagged == [("triton/chunk", "float32", "o", ("max r x12",))]
    assert comparison.verdicts == ()
    # compare_runs upgrades a version 1 document given as it is, too.
    again = compare_runs(v1_document, new, before_label="v1", after_label="v2")
    assert again == comparison
