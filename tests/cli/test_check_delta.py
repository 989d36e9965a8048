# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify check --family delta``: a delta-rule kernel given by ``file.py:function``.

The family's flags declare the kernel (gates, L2 norm, beta range, recipe); a broken kernel is
rejected with a replayable finding, a correct one holds, and flags that do not describe a
delta-rule kernel are usage errors (exit 2) naming the flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.reporting.content import kernels_table

TARGETS = Path(__file__).parents[1] / "zoo" / "delta_cli_targets.py"
EVERYTHING = ["--family", "delta", "--gates", "none,scalar,vector", "--varlen"]
SEARCH = ["--max-seq-len", "24", "--max-head-dim", "8", "--seed", "0", "--no-render"]


def _check(target: str, flags: list[str], report: Path) -> tuple[int, dict]:
    code = main(["check", f"{TARGETS}:{target}", *flags, *SEARCH, "--report", str(report)])
    return code, json.loads((report / "run.json").read_text())


def test_a_correct_chunk_kernel_holds_every_property(tmp_path: Path) -> None:
    flags = [*EVERYTHING, "--form", "chunk", "--chunk-size", "16", "--budget", "8"]
    code, document = _check("twin_chunk", flags, tmp_path)
    assert code == EXIT_OK, document["failures"]
    (kernel,) = document["kernels"]
    assert kernel["family"] == "delta"
    (row,) = kernels_table(document).rows  # the report names every kernel's family
    assert row[:3] == [kernel["name"], "delta", "chunk"]
    statuses = {v["property"]: v["status"] for v in document["verdicts"]}
    assert "zero_beta_keeps_state" in statuses
    assert set(statuses.values()) <= {"held", "not_applicable"}
    assert statuses["gradients_match_oracle"] == "held"


def test_a_state_kept_in_bf16_is_found_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [*EVERYTHING, "--form", "recurrent", "--budget", "20", "--fail-fast"]
    code, document = _check("state_bf16", flags, tmp_path)
    assert code == EXIT_FAILED
    (failure, *_) = document["failures"]
    assert "not close to the float64 oracle" in failure["message"]
    replay = failure["replay"].removeprefix("linattn-verify replay ")
    capsys.readouterr()
    assert main(["replay", replay]) == EXIT_FAILED
    assert "Reproduces" in capsys.readouterr().out


def test_a_delta_kernel_needs_its_form(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", f"{TARGETS}:twin_chunk", "--family", "delta", "--budget", "1"])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--form recurrent or --form chunk" in err


def test_an_unknown_family_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", f"{TARGETS}:twin_chunk", "--family", "nope"])
    assert exc.value.code == EXIT_USAGE
    assert "--family" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--family", "delta", "--form", "chunk", "--normalized"], "--normalized"),
        (["--family", "delta", "--form", "chunk", "--decay", "scalar"], "--decay"),
        (["--gates", "scalar"], "--gates"),
        (["--inverse-dtype", "input"], "--inverse-dtype"),
    ],
)
def test_a_flag_of_the_other_family_is_a_usage_error(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", f"{TARGETS}:twin_chunk", *flags, "--budget", "1"]) == EXIT_USAGE
    assert named in capsys.readouterr().err


CHUNK64 = ["--family", "delta", "--gates", "scalar", "--varlen", "--form", "chunk"]
CHUNK64 += ["--chunk-size", "64", "--seed", "0", "--no-render"]


def test_a_kernel_wrong_only_past_its_first_chunk_of_64_is_found_by_the_size_reach(
    tmp_path: Path,
) -> None:
    # The search draws T <= 32: only the reach crosses a chunk boundary of 64.
    target = f"{TARGETS}:carried_state_undecayed"
    flags = [*CHUNK64, "--budget", "60", "--fail-fast", "--report", str(tmp_path)]
    assert main(["check", target, *flags]) == EXIT_FAILED
    document = json.loads((tmp_path / "run.json").read_text())
    (failed,) = [v for v in document["verdicts"] if v["status"] == "failed"]
    assert "(size reach: " in failed["message"]
    (failure,) = document["failures"]
    assert failure["T"] > 64


@pytest.mark.slow
def test_the_size_reach_takes_a_delta_kernel_past_t_1024_within_the_default_budget(
    tmp_path: Path,
) -> None:
    target = f"{TARGETS}:twin_chunk64"
    assert main(["check", target, *CHUNK64, "--report", str(tmp_path)]) == EXIT_OK
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["totals"]["largest_T"] >= 1024
