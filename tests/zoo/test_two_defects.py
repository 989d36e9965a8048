# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One defect does not hide another, and one defect is one finding.

`two_defects.two_defects` drops an empty sequence's state (forward) and inflates dk from the
ninth token on (backward). The gradient property's first minimal case is the empty sequence;
its search goes on away from that trigger (`linattn_verify.triggers`) and finds dk too: two
findings, the second naming the gradient property. The convention zoo's
``heads_first_exclusive`` (o_t reads the state before token t is added) has one defect, which
fails four properties in many ways: one finding, with the advice that names the defect.
"""

from __future__ import annotations

from pathlib import Path

from linattn_verify.checking import CheckListener, SearchSettings, check_kernel
from linattn_verify.cli import EXIT_FAILED, main
from linattn_verify.cli.manifest import ManifestEntry
from linattn_verify.core.family import family_of
from linattn_verify.reporting.summary import failures
from linattn_verify.results import CaseRecord

HERE = Path(__file__).parent
SEARCH = ["--max-seq-len", "16", "--max-head-dim", "4", "--seed", "0", "--dtypes", "fp32"]


def test_a_second_defect_is_found_past_the_first(tmp_path: Path) -> None:
    """The search itself (`check_kernel`, two properties to keep it short); the CLI prints the
    same findings (`failures`), as the README's run of this kernel shows."""
    target = f"{HERE / 'two_defects.py'}:two_defects"
    flags = ("--decay", "scalar", "--varlen", "--dtypes", "fp32")
    kernel = ManifestEntry("zoo/two_defects", target, flags).kernel()
    catalogue = family_of(kernel).properties()
    properties = {
        name: catalogue[name] for name in ("outputs_match_oracle", "gradients_match_oracle")
    }
    records: list[CaseRecord] = []

    class Keep(CheckListener):
        def case_finished(self, record: CaseRecord) -> None:
            records.append(record)

    search = SearchSettings(
        budget=12, failures_dir=tmp_path, max_seq_len=16, max_head_dim=4, reach=False
    )
    check_kernel(kernel, properties, search, listener=Keep())
    findings = failures(records)
    by_tensor = {f["tensor"]: f for f in findings}
    assert set(by_tensor) == {"final_state", "dk"}, [f["message"] for f in findings]
    assert "gradients_match_oracle" in by_tensor["dk"]["properties"]
    # The gradient defect's minimal case needs the ninth token and nothing of the first's.
    dk_case = by_tensor["dk"]["case"]
    assert "segments=None" in dk_case
    assert int(dk_case.split("T=")[1].split(",")[0]) >= 9
    assert (tmp_path / "failure-2").is_dir()


def test_a_kernel_reading_the_state_before_its_token_is_one_finding(capsys) -> None:
    target = f"{HERE / 'convention_bugs.py'}:heads_first_exclusive"
    flags = ["--layout", "heads-first", "--state-layout", "vk", "--decay", "scalar"]
    code = main(["check", target, *flags, "--form", "recurrent", *SEARCH, "--budget", "14"])
    out = capsys.readouterr().out
    assert code == EXIT_FAILED
    assert "failed (1 finding)" in out
    assert "consistent, within its bound, with the state read before token t is added" in out
    finding = out.split("Finding 1")[1].split("Within rounding")[0]
    assert "declare" not in finding  # no recipe advice for a wrong algorithm


def test_a_failure_the_declaration_explains_is_kept_apart(capsys) -> None:
    """A correct fp16-throughout kernel declared as computing in fp32: its failures are
    explained by a change to the declaration, and `check` says so apart from defects."""
    target = f"{HERE.parent / 'corpus' / 'linear_attn' / 'einsum_lowp.py'}:einsum_linear_attention"
    flags = ["--form", "parallel", "--no-backward", "--dtypes", "fp16", "--seed", "0"]
    code = main(["check", target, *flags, "--budget", "8", "--fail-fast"])
    out = capsys.readouterr().out
    assert code == EXIT_FAILED
    heading = out.index("Explained by the declaration")
    assert heading < out.index("Finding 1")
    assert "Diagnosis: consistent with" in out[heading:]
    assert "(1 finding, 1 explained by the declaration)" in out
