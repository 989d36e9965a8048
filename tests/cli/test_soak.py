# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify soak`: counts accumulate across invocations, failures are kept once per case and
replay, a state file that is not ours is a usage error, SIGTERM stops cleanly."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.failures import replay
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import FULL, get_kernel, registered_properties
from linattn_verify.results import PropertyResult
from linattn_verify.soak import (
    SoakSettings,
    Stopper,
    failures_dir_of,
    locked,
    read_state,
    soak,
    visit_seed,
)

_correct = float32_reference("recurrent")


def _off_by_one(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """The float32 recurrent reference with 1 added to every output: wrong on any input."""
    o, state = _correct(*args, **kwargs)
    return o + 1, state


BAD = Kernel("torch/off_by_one", _off_by_one, FULL, RECIPES["recurrent"], form="recurrent")
SMALL = SoakSettings(chunk_examples=3, max_seq_len=8, max_head_dim=4)


def _document(state: Path) -> dict[str, Any]:
    """The state's JSON document, as ``soak --export`` writes it (read from the store)."""
    read = read_state(state)
    assert read is not None, f"no state at {state}"
    return read.to_json()


def _soak(state: Path, *flags: str) -> int:
    return main(
        [
            "soak",
            "--kernels",
            "torch/recurrent",
            "--properties",
            "outputs_match_oracle",
            "--chunk-examples",
            "2",
            "--max-seq-len",
            "8",
            "--max-head-dim",
            "4",
            "--state",
            str(state),
            *flags,
        ]
    )


def test_counts_accumulate_across_invocations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "soak.sqlite"
    assert _soak(state, "--max-visits", "2") == EXIT_OK
    first = _document(state)
    (pair,) = first["pairs"]
    assert (pair["kernel"], pair["property"], pair["visits"]) == (
        "torch/recurrent",
        "outputs_match_oracle",
        2,
    )
    assert pair["examples"] >= 2
    assert pair["failures"] == []
    shown = capsys.readouterr()
    # A bar (stderr) counting the examples and failures; no line per visit without -v.
    assert f"{pair['examples']} examples" in shown.err
    assert "no failures" in shown.err
    assert "visit " not in shown.out + shown.err

    assert _soak(state, "--max-visits", "1", "-v") == EXIT_OK
    assert "visit    3" in capsys.readouterr().err, "with -v, a progress line per visit"
    second = _document(state)
    (pair2,) = second["pairs"]
    assert pair2["visits"] == 3
    assert pair2["examples"] > pair["examples"]
    assert pair2["seconds"] >= pair["seconds"]
    assert [i["visits"] for i in second["invocations"]] == [2, 1]
    assert [i["stopped"] for i in second["invocations"]] == ["max_visits", "max_visits"]
    assert second["invocations"][-1]["versions"]["torch"] != "not installed"
    assert second["wall_seconds"] >= first["wall_seconds"]
    # Every visit of a pair searched with a seed of its own, whichever invocation it ran in.
    seeds = {visit_seed(0, "torch/recurrent", "outputs_match_oracle", n) for n in (1, 2, 3)}
    assert len(seeds) == 3
    capsys.readouterr()

    assert main(["soak", "--summary", "--state", str(state)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "torch/recurrent" in out
    assert "outputs_match_oracle" in out
    assert f"{pair2['examples']} examples over 1 (kernel, property) pairs, 2 invocations" in out
    assert "No failures." in out

    # The export is the state file of before: what the store holds, as JSON.
    exported = tmp_path / "export.json"
    assert main(["soak", "--export", str(exported), "--state", str(state)]) == EXIT_OK
    assert json.loads(exported.read_text()) == second


def test_the_budget_bounds_an_invocation(tmp_path: Path) -> None:
    state = tmp_path / "soak.sqlite"
    assert _soak(state, "--budget", "0") == EXIT_OK
    document = _document(state)
    assert document["pairs"] == []
    assert document["invocations"][0]["stopped"] == "budget"


def test_a_budgeted_soak_counts_examples_against_its_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "soak.sqlite"
    assert _soak(state, "--budget", "600", "--max-visits", "2") == EXIT_OK
    shown = capsys.readouterr()
    examples = _document(state)["pairs"][0]["examples"]
    # Against the budget's seconds the bar has no total of examples: it counts them.
    assert f"{examples} examples" in shown.err
    assert f"{examples}/" not in shown.err
    assert "visit " not in shown.out + shown.err


def test_a_broken_kernel_records_its_failure_once_with_a_replayable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_path = tmp_path / "soak.sqlite"
    properties = {"outputs_match_oracle": registered_properties()["outputs_match_oracle"]}
    lines: list[str] = []
    visits: list[tuple[bool, int, float]] = []
    settings = SoakSettings(chunk_examples=3, max_seq_len=8, max_head_dim=4, max_visits=2)
    state = soak(
        [BAD],
        properties,
        state_path,
        settings,
        say=lines.append,
        visited=lambda outcome, seconds: visits.append((outcome.failed, outcome.examples, seconds)),
    )
    assert not state.ok
    (pair,) = state.pairs
    assert pair.visits == 2, "a pair that failed is still visited"
    # A progress bar's news: each visit's outcome, as it ends, with the seconds so far.
    assert [failed for failed, _, _ in visits] == [True, True]
    assert sum(examples for _, examples, _ in visits) == pair.examples
    assert visits[0][2] <= visits[1][2]
    # Both visits shrink to the same minimal case: it is recorded once, its file kept once.
    (failure,) = pair.failures
    assert failure.visit == 1
    assert failure.seed == visit_seed(0, BAD.name, "outputs_match_oracle", 1)
    assert failure.case.startswith("ProblemSpec(")
    assert "Replay: linattn-verify replay" in failure.message
    assert "FAILED (new case #1" in lines[0]
    assert "FAILED again" in lines[1]
    assert failure.failure_file is not None
    assert Path(failure.failure_file).is_file()
    assert Path(failure.failure_file).parent.parent == failures_dir_of(state_path)
    assert [p.name for p in failures_dir_of(state_path).iterdir()] == [
        Path(failure.failure_file).parent.name
    ]
    result = replay(failure.failure_file, properties=properties, kernels={BAD.name: BAD})
    assert not result.ok

    # The state on disk says the same; the summary lists the failure with its replay command.
    assert read_state(state_path) == state
    assert main(["soak", "--summary", "--state", str(state_path)]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "FAILED (1 case)" in out
    assert f"Replay: linattn-verify replay {failure.failure_file}" in out


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        '{"format": "linattn-verify-run", "version": 2}',
        "[1, 2, 3]",
        '{"format": "linattn-verify-soak", "version": 99, "seed": 0, "pairs": [], '
        '"invocations": []}',
        '{"format": "linattn-verify-soak", "version": 1, "seed": 0, "pairs": {}, '
        '"invocations": []}',
        '{"format": "linattn-verify-soak", "version": 1, "seed": 0, "pairs": [{"kernel": "k", '
        '"property": "p", "visits": "many"}], "invocations": []}',
    ],
)
@pytest.mark.parametrize("summary", [False, True])
def test_a_state_file_that_is_not_ours_is_a_usage_error(
    content: str, summary: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "soak.json"
    state.write_text(content)
    code = main(["soak", "--summary", "--state", str(state)]) if summary else _soak(state)
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert str(state) in err
    assert state.read_text() == content, "the file is left as it was"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--properties", "no_such_property"], "no_such_property"),
        (["--kernels", "nobody/*"], "no kernel matches"),
    ],
)
def test_bad_selections_are_usage_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _soak(tmp_path / "soak.sqlite", *flags) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [], "no state, no lock: nothing written"


def test_summary_of_a_missing_state_and_a_contradicting_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "soak.sqlite"
    assert main(["soak", "--summary", "--state", str(state)]) == EXIT_USAGE
    assert str(state) in capsys.readouterr().err
    assert _soak(state, "--budget", "0", "--seed", "7") == EXIT_OK
    assert _document(state)["seed"] == 7
    assert _soak(state, "--budget", "0", "--seed", "8") == EXIT_USAGE
    assert "seed 7" in capsys.readouterr().err


def test_a_second_soak_on_the_same_state_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "soak.sqlite"
    with locked(state):
        assert _soak(state, "--budget", "0") == EXIT_USAGE
    assert "another soak is running" in capsys.readouterr().err
    assert _soak(state, "--budget", "0") == EXIT_OK


def test_sigterm_abandons_the_visit_and_saves_the_state(tmp_path: Path) -> None:
    state_path = tmp_path / "soak.sqlite"
    oracle = registered_properties()["outputs_match_oracle"]
    calls = []

    def terminated_in_second_visit(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
        calls.append(spec)
        if len(calls) == SMALL.chunk_examples + 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return oracle(spec, kernel)

    before = signal.getsignal(signal.SIGTERM)
    with Stopper().installed() as stopper:
        state = soak(
            [get_kernel("torch/recurrent")],
            {"outputs_match_oracle": terminated_in_second_visit},
            state_path,
            SMALL,
            stopper=stopper,
        )
    assert signal.getsignal(signal.SIGTERM) is before, "the handlers are restored"
    (pair,) = state.pairs
    assert pair.visits == 1, "the visit under way is abandoned"
    assert pair.examples == SMALL.chunk_examples
    (invocation,) = state.invocations
    assert (invocation.stopped, invocation.visits) == ("SIGTERM", 1)
    assert read_state(state_path) == state


def test_a_harness_error_is_recorded_once_and_the_soak_goes_on(tmp_path: Path) -> None:
    def broken_property(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
        raise RuntimeError("the property itself is broken")

    settings = replace(SMALL, max_visits=2)
    state = soak(
        [get_kernel("torch/recurrent")],
        {"broken": broken_property},
        tmp_path / "s.sqlite",
        settings,
    )
    (pair,) = state.pairs
    assert pair.visits == 2
    assert pair.examples >= 2, "the cases tried before the error count"
    (failure,) = pair.failures
    assert failure.error
    assert "RuntimeError: the property itself is broken" in failure.message
    assert failure.case.startswith("ProblemSpec(")
    assert failure.replay is None


def test_the_soak_bar_counts_the_failing_visits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from linattn_verify import registry

    monkeypatch.setitem(registry._REGISTERED, BAD.name, BAD)
    flags = ["--kernels", BAD.name, "--properties", "outputs_match_oracle", "--max-visits", "2"]
    flags += ["--chunk-examples", "2", "--max-seq-len", "8", "--max-head-dim", "4"]
    assert main(["soak", *flags, "--state", str(tmp_path / "soak.sqlite")]) == EXIT_FAILED
    shown = capsys.readouterr()
    assert "2 failed" in shown.err
    assert "FAILED (new case #1" not in shown.out + shown.err, "visit lines only with -v"
    # The closing table still names the failure and its replay.
    assert "Replay: linattn-verify replay" in shown.out
