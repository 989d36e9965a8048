# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One root cause, one finding: the failures section groups failures that share a root cause."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from linattn_verify.reporting import RunWriter, validate
from linattn_verify.reporting.summary import failures, root_causes
from linattn_verify.results import CaseRecord, Comparison, Counts, PropertyVerdict, Scores, Worst

KERNEL = "bug/ieee"
NAN_ROWS = (
    "bug/ieee: o holds {n} NaN value(s) of {m}, first at index {i}, on rows whose exact "
    "denominator is 0, where it declared zero_denominator='zero' (0 there)"
)


def _record(prop: str, case: str, *, reason: str | None = None, **kw: object) -> CaseRecord:
    comparisons = tuple(kw.pop("comparisons", ()))  # type: ignore[arg-type]
    return CaseRecord(
        kernel=KERNEL,
        form=None,
        property=prop,
        dtype="float32",
        T=2,
        K=1,
        V=1,
        case=case,
        status="failed",
        comparisons=comparisons,
        reason=reason,
        failure_file=f"/f/{prop}.json",
        **kw,  # type: ignore[arg-type]
    )


def _oracle_failure(index: tuple[int, ...], *, nonfinite: int) -> Comparison:
    return Comparison(
        tensor="o",
        subject=KERNEL,
        reference="oracle",
        status="failed",
        deciding=float("inf"),
        scores=Scores(r=0.0),
        worst=Worst(index=index, actual=float("nan"), expected=0.0, allowed=0.0),
        counts=Counts(numel=8, mismatched=1, nonfinite=nonfinite, undefined=2),
    )


def _cases() -> list[CaseRecord]:
    c1, c2 = "ProblemSpec(T=2, seed=0)", "ProblemSpec(T=3, seed=4)"
    return [
        # The same kernel failure on two different minimal cases: one message, numbers aside.
        _record("contract_holds", c1, reason=NAN_ROWS.format(n=2, m=8, i=(0, 1, 0, 0))),
        _record("causal_outputs_exact", c2, reason=NAN_ROWS.format(n=5, m=12, i=(0, 2, 1, 0))),
        # A comparison on c1 non-finite at the element the first failure names.
        _record(
            "outputs_match_oracle", c1, comparisons=[_oracle_failure((0, 1, 0, 0), nonfinite=1)]
        ),
        # A different defect: a score past the bound, no non-finite value.
        _record(
            "state_split_composes", c1, comparisons=[_oracle_failure((0, 0, 0, 0), nonfinite=0)]
        ),
        # The harness's own error is never folded into a kernel's finding.
        _record(
            "denominator_stable",
            c1,
            reason=NAN_ROWS.format(n=2, m=8, i=(0, 1, 0, 0)),
            error=True,
        ),
    ]


def test_failures_sharing_a_root_cause_are_one_finding() -> None:
    found = failures(_cases())
    assert [f["properties"] for f in found] == [
        ["causal_outputs_exact", "contract_holds", "outputs_match_oracle"],
        ["denominator_stable"],
        ["state_split_composes"],
    ]
    grouped = found[0]
    # The first property's entry (message, case, replay) stands for the finding.
    assert grouped["property"] == "causal_outputs_exact"
    assert grouped["case"] == "ProblemSpec(T=3, seed=4)"
    assert grouped["replay"] == "linattn-verify replay /f/causal_outputs_exact.json"
    assert grouped["occurrences"] == 3
    assert found == failures(list(reversed(_cases()))), "the grouping is order-independent"


def test_root_causes_of_a_record() -> None:
    failure, other, oracle, scored, error = _cases()
    message = [key for key in root_causes(failure) if key[0] == "message"]
    assert len(message) == 1
    assert "o holds # NaN value(s) of #, first at index (#)" in message[0][2]
    assert message[0] in root_causes(other), "the same message whatever the case's numbers"
    assert ("nonfinite", KERNEL, failure.case, "o", "(0, 1, 0, 0)") in root_causes(failure)
    assert root_causes(oracle) == {("nonfinite", KERNEL, oracle.case, "o", "(0, 1, 0, 0)")}
    assert root_causes(scored) == set()
    assert root_causes(error) == set()


def test_a_reshape_error_is_one_root_cause_at_any_rank() -> None:
    """linear-attention-transformer reshapes v by q's head dim: a 4-d view fails on one case,
    a 5-d one on another (found past the first's trigger); one defect, one finding."""
    said = "bug/ieee raised RuntimeError: shape '{}' is invalid for input of size {}"
    four = _record("contract_holds", "c1", reason=said.format([1, 1, 64, 1], 128))
    five = _record("causal_outputs_exact", "c2", reason=said.format([1, 2, 1, 64, 1], 256))
    assert root_causes(four) == root_causes(five)
    (finding,) = failures([four, five])
    assert finding["properties"] == ["causal_outputs_exact", "contract_holds"]


def test_grouped_findings_fit_the_schema(tmp_path: Path) -> None:
    environment = {"device": "cpu", "torch": "test", "triton": "test", "linattn_verify": "test"}
    writer = RunWriter(tmp_path, command="check", environment=environment, arguments={}, seed=0)
    for record in _cases():
        writer.add_case(record)
    for record in _cases():
        writer.add_verdict(PropertyVerdict(KERNEL, record.property, "failed", examples=1))
    document = writer.finish(render=False)
    validate(document)
    assert len(document["failures"]) == 3
    assert len([v for v in document["verdicts"] if v["status"] == "failed"]) == 5


def _comparison(kind: str, deciding: float) -> Comparison:
    bitwise = kind == "bitwise"
    return Comparison(
        tensor="o",
        subject=KERNEL,
        reference="bitwise:on a rerun" if bitwise else "oracle",
        status="failed",
        deciding=deciding,
        scores=Scores(r=0.0 if bitwise else deciding),
        worst=Worst(index=(0, 0, 0, 0), actual=1.0, expected=0.9375, allowed=0.0),
        counts=Counts(numel=8, mismatched=1),
    )


def test_a_finding_is_shown_by_its_bound_score_and_a_bitwise_one_says_so() -> None:
    from linattn_verify.reporting._values import format_finding_score
    from linattn_verify.reporting.summary import finding_evidence

    # A bit-for-bit |Δ| of 8 beside r = 3 on the same case: the finding's score is r, not the
    # larger absolute difference (which is no ratio to any bound).
    both = finding_evidence(
        _record(
            "dyadic_inputs_exact",
            "c",
            comparisons=[_comparison("bitwise", 8.0), _comparison("oracle", 3.0)],
        )
    )
    assert (both["score"], both["score_kind"]) == (3.0, "bound")
    assert format_finding_score(both) == "r 3"
    alone = finding_evidence(
        _record("dyadic_inputs_exact", "c", comparisons=[_comparison("bitwise", 0.0625)])
    )
    assert alone["score_kind"] == "bitwise"
    assert format_finding_score(alone) == "|Δ| 0.0625 (bit for bit)"


def test_a_failure_the_declaration_explains_is_not_merged_into_a_defect() -> None:
    """Both fail o past its bound at realistic magnitudes; only one has a recipe explanation."""
    declared = _record(
        "outputs_match_oracle",
        "c1",
        comparisons=[_comparison("oracle", 3.0)],
        diagnosis="consistent with 1 rounding to float16 on the path (declared none): ...",
    )
    defect = _record(
        "state_split_composes",
        "c2",
        comparisons=[_comparison("oracle", 9.0)],
        diagnosis="no recipe explains this error (tried ...): the kernel, not its declaration",
    )
    found = failures([declared, defect])
    assert sorted(f["kind"] for f in found) == ["declaration", "defect"]
    # Without the diagnosis they are one symptom, one finding.
    plain = [replace(r, diagnosis=None) for r in (declared, defect)]
    (merged,) = failures(plain)
    assert merged["kind"] == "defect"
