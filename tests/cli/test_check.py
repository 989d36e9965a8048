# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify check`: exit 0 for a correct kernel, 1 for a broken one, 2 for usage errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.core.family import family_named

KERNELS = textwrap.dedent(
    """
    import os
    import signal

    from linattn_verify.linear_attn.reference_kernels import float32_reference

    _reference = float32_reference("recurrent")


    def correct(q, k, v, g=None, *, scale=None, initial_state=None,
                output_final_state=False, cu_seqlens=None):
        return _reference(q, k, v, g, scale=scale, initial_state=initial_state,
                          output_final_state=output_final_state, cu_seqlens=cu_seqlens)


    def drops_initial_state(q, k, v, g=None, *, scale=None, initial_state=None,
                            output_final_state=False, cu_seqlens=None):
        return correct(q, k, v, g, scale=scale, output_final_state=output_final_state,
                       cu_seqlens=cu_seqlens)


    def crashes_on_long_inputs(q, k, v, g=None, *, scale=None, initial_state=None,
                               output_final_state=False, cu_seqlens=None):
        # What an out-of-bounds access past a short buffer does to a compiled kernel.
        if q.shape[1] > 6:
            os.kill(os.getpid(), signal.SIGSEGV)
        return correct(q, k, v, g, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, cu_seqlens=cu_seqlens)


    def hangs(q, k, v, g=None, *, scale=None, initial_state=None,
              output_final_state=False, cu_seqlens=None):
        # A kernel that never returns past a few tokens (a deadlock on a long grid).
        if q.shape[1] > 3:
            import time
            time.sleep(3600)
        return correct(q, k, v, g, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, cu_seqlens=cu_seqlens)


    def vector_gates_only(q, k, v, g=None, *, scale=None, initial_state=None,
                          output_final_state=False, cu_seqlens=None):
        # FLA's chunk_gla: a gate [B, T, H, K] is required.
        if g is None or g.ndim != 4:
            raise ValueError(f"g must be [B, T, H, K], got {None if g is None else g.shape}")
        return correct(q, k, v, g, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, cu_seqlens=cu_seqlens)


    not_callable = 3
    """
)


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS)
    return path


def _check(target: str, *flags: str, report: Path) -> int:
    return main(
        [
            "check",
            target,
            "--decay",
            "data",
            "--form",
            "recurrent",
            "--budget",
            "8",
            "--max-seq-len",
            "12",
            "--report",
            str(report),
            "--no-render",
            *flags,
        ]
    )


def _verdicts(report: Path) -> list[dict[str, Any]]:
    """The per-property verdicts of a check, in catalogue order, from its run document."""
    verdicts: list[dict[str, Any]] = json.loads((report / "run.json").read_text())["verdicts"]
    return verdicts


def test_correct_kernel_passes(target_file: Path, tmp_path: Path) -> None:
    assert _check(f"{target_file}:correct", report=tmp_path / "ok") == EXIT_OK
    # --no-render (every check here): the results, no Markdown, HTML or plots.
    assert not (tmp_path / "ok" / "report.md").exists()
    assert not (tmp_path / "ok" / "plots").exists()
    verdicts = _verdicts(tmp_path / "ok")
    assert {v["property"] for v in verdicts} == set(family_named("linear_attn").properties())
    assert not [v for v in verdicts if v["status"] == "failed"]
    assert {"outputs_match_oracle", "gradients_match_oracle"} <= {
        v["property"] for v in verdicts if v["status"] == "held"
    }


def test_broken_kernel_fails_with_a_replayable_failure(target_file: Path, tmp_path: Path) -> None:
    report = tmp_path / "bad"
    assert _check(f"{target_file}:drops_initial_state", report=report) == EXIT_FAILED
    failed = [v for v in _verdicts(report) if v["status"] == "failed"]
    assert failed
    assert all(v["failure_file"] and Path(v["failure_file"]).is_file() for v in failed)
    assert all("initial_state" in v["message"] for v in failed)
    # The message is the runner's: the report, then the repro, then the replay line, once.
    for v in failed:
        assert v["message"].count("Replay: linattn-verify replay") == 1


@pytest.mark.parametrize(
    "target",
    ["no_colon", "missing_module_xyz:fn", "{file}:not_callable", "{file}:absent", "nope.py:fn"],
)
def test_unloadable_target_is_a_usage_error(
    target: str, target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _check(target.format(file=target_file), report=tmp_path / "r")
    assert code == EXIT_USAGE
    assert "TARGET" in capsys.readouterr().err


def test_a_vector_gate_kernel_is_given_vector_gates_only(target_file: Path, tmp_path: Path) -> None:
    target = f"{target_file}:vector_gates_only"
    vector = ["--decay", "vector", "--decay-required"]
    assert _check(target, *vector, report=tmp_path / "vector") == EXIT_OK
    held = {v["property"] for v in _verdicts(tmp_path / "vector") if v["status"] == "held"}
    assert {"outputs_match_oracle", "gradients_match_oracle", "causal_gradients_exact"} <= held
    # Declared as taking a scalar gate, the same kernel fails: the flags are what is searched.
    scalar = ["--decay", "scalar", "--fail-fast"]
    assert _check(target, *scalar, report=tmp_path / "scalar") == EXIT_FAILED


def test_decay_required_without_decay_is_a_usage_error(
    target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _check(
        f"{target_file}:correct", "--decay", "none", "--decay-required", report=tmp_path / "r"
    )
    assert code == EXIT_USAGE
    assert "decay_required" in capsys.readouterr().err


@pytest.mark.parametrize("budget", ["0", "-1", "inf", "nan", "soon"])
def test_every_budget_but_a_positive_number_of_seconds_is_refused_alike(
    target_file: Path, budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", f"{target_file}:correct", "--budget", budget])
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"argument --budget: expected a number of seconds > 0 but got '{budget}'" in err


@pytest.mark.parametrize("command", ["check", "run", "drift"])
def test_dtypes_take_one_spelling_everywhere(
    command: str, target_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The short names and the torch names, mixed, in every command that takes dtypes; parsed
    # to the torch names. A name of neither kind is refused naming both spellings.
    from linattn_verify.cli import build_parser

    target = [f"{target_file}:correct"] if command != "run" else []
    if command == "drift":
        target = ["torch/chunk"]
    args = build_parser().parse_args([command, *target, "--dtypes", "fp32,bfloat16,fp32"])
    assert args.dtypes == ("float32", "bfloat16")
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([command, *target, "--dtypes", "f32"])
    assert info.value.code == EXIT_USAGE
    assert "float32 (fp32), float16 (fp16), bfloat16 (bf16)" in capsys.readouterr().err


def test_single_dtype_flags_take_the_short_names_too(target_file: Path) -> None:
    from linattn_verify.cli import build_parser

    argv = ["check", f"{target_file}:correct", "--intermediate-dtype", "bf16"]
    args = build_parser().parse_args([*argv, "--final-state-dtype", "fp32"])
    assert (args.intermediate_dtype, args.final_state_dtype) == ("bfloat16", "float32")
    args = build_parser().parse_args([*argv, "--division-dtype", "fp32"])
    assert args.division_dtype == "float32"
    delta = ["check", f"{target_file}:correct", "--family", "delta"]
    args = build_parser("delta").parse_args(
        [*delta, "--state-dtype", "fp16", "--inverse-dtype", "bf16"]
    )
    assert (args.state_dtype, args.inverse_dtype) == ("float16", "bfloat16")


def test_a_check_failure_replays_from_its_saved_target(
    target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bad"
    assert _check(f"{target_file}:drops_initial_state", "--fail-fast", report=report) == EXIT_FAILED
    verdicts = _verdicts(report)
    failed = [v for v in verdicts if v["status"] == "failed"]
    assert len(failed) == 1, "--fail-fast stops at the first failing property"
    # The check stopped there: the properties it had not reached did not run (run.json lists
    # the verdicts by property name, not in the order they ran).
    others = {v["status"] for v in verdicts if v["status"] != "failed"}
    assert others <= {"held", "not_applicable", "not_run"}
    assert "not_run" in others
    capsys.readouterr()
    # The kernel is not registered: replay loads it from the target saved with the failure.
    assert main(["replay", failed[0]["failure_file"]]) == EXIT_FAILED
    assert "Reproduces" in capsys.readouterr().out


def test_a_crashing_kernel_fails_a_property_in_isolation(target_file: Path, tmp_path: Path) -> None:
    report = tmp_path / "crash"
    code = _check(f"{target_file}:crashes_on_long_inputs", "--isolation", "process", report=report)
    assert code == EXIT_FAILED
    document = json.loads((report / "run.json").read_text())
    assert document["arguments"]["isolation"] == "process"
    crashed = [v for v in document["verdicts"] if "SIGSEGV" in v["message"]]
    assert crashed, [v["message"] for v in document["verdicts"]]
    assert "T=" in crashed[0]["message"], "the message names the case the kernel crashed on"


def test_check_shows_a_bar_and_prints_progress_lines_only_when_verbose(
    target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{target_file}:correct"
    assert _check(target, "--budget", "3", report=tmp_path / "quiet") == EXIT_OK
    quiet = capsys.readouterr()
    cases = (tmp_path / "quiet" / "results.jsonl").read_text().splitlines()
    # The bar (stderr) counts the examples run against the budget's seconds.
    assert f"{len(cases)} examples" in quiet.err
    assert "no failures" in quiet.err
    for said in (quiet.out, quiet.err):
        assert "round 1:" not in said
        assert "size reach:" not in said
        assert not re.search(r"^  ok   ", said, re.MULTILINE), "no line per case"
    # The closing summary is still there.
    assert " held, 0 failed" in quiet.out

    assert _check(target, "--budget", "3", "-v", report=tmp_path / "loud") == EXIT_OK
    loud = capsys.readouterr()
    assert "round 1:" in loud.err
    assert re.search(r"^  ok   \S+correct ", loud.err, re.MULTILINE), "a line per case"


def test_check_json_keeps_stdout_pure_json_with_the_bar_on_stderr(
    target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{target_file}:drops_initial_state"
    flags = ["--budget", "3", "--json", "-v", "--fail-fast"]
    assert _check(target, *flags, report=tmp_path / "json") == EXIT_FAILED
    shown = capsys.readouterr()
    document = json.loads(shown.out)
    assert document["command"] == "check"
    assert document["totals"]["failed"] >= 1
    # The bar, its failures so far and the verbose lines all went to stderr.
    assert "1 failed" in shown.err
    assert "FAILED after" in shown.err


@pytest.mark.parametrize("kernel", ["correct", "drops_initial_state"])
def test_a_check_without_report_leaves_no_folder_behind(
    kernel: str, target_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its run document lives in a temporary folder, removed at the end; failing cases are kept
    # where replay and the pytest plugin look (.linattn-failures in the working directory).
    import tempfile

    temp, work = tmp_path / "temp", tmp_path / "work"
    temp.mkdir()
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr("linattn_verify.failures._directory", None)  # not the plugin's
    monkeypatch.chdir(work)
    flags = ["--decay", "data", "--form", "recurrent", "--budget", "2", "--max-seq-len", "12"]
    code = main(["check", f"{target_file}:{kernel}", *flags])
    assert code == (EXIT_OK if kernel == "correct" else EXIT_FAILED)
    assert not list(temp.glob("linattn-*")), "a folder of ours left behind"  # torch's may be
    saved = list((work / ".linattn-failures").glob("*.json"))
    assert bool(saved) == (kernel != "correct")


@pytest.mark.parametrize(
    ("device", "says"),
    [("tpu", "--device 'tpu'"), ("cuda:7", "CUDA device"), ("gpu0", "expected 'auto'")],
)
def test_a_device_torch_cannot_use_is_a_usage_error_before_any_search(
    device: str, says: str, target_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _check(f"{target_file}:correct", "--device", device, report=tmp_path / "r")
    assert code == EXIT_USAGE
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r" / "run.json").exists()


# The process variants start a child (4 s on 2 cores): the slow tier's.
ISOLATIONS = ["none", pytest.param("process", marks=pytest.mark.slow)]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_hanging_kernel_fails_and_the_budget_holds(
    isolation: str, target_file: Path, tmp_path: Path
) -> None:
    # Each hung call is cut at the per-call timeout and fails its case; past the budget no
    # case starts, no shrink or diagnosis goes on: the check ends within budget + 15 s (the case
    # running then, at most a few calls of one second; a child process's start-up).
    budget = 5
    started = time.perf_counter()
    code = _check(
        f"{target_file}:hangs",
        "--timeout",
        "1",
        "--isolation",
        isolation,
        "--budget",
        str(budget),
        report=tmp_path / "hang",
    )
    assert time.perf_counter() - started < budget + 15
    assert code == EXIT_FAILED
    failed = [v for v in _verdicts(tmp_path / "hang") if v["status"] == "failed"]
    assert failed
    assert any("timeout" in v["message"].lower() for v in failed)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_ctrl_c_stops_cleanly_writes_what_was_found_and_exits_130(
    isolation: str, target_file: Path, tmp_path: Path
) -> None:
    # SIGINT to the whole process group, as a terminal's Ctrl-C: the parent writes its report,
    # prints no traceback (nor does a child), and exits 130.
    report = tmp_path / "stopped"
    argv = [sys.executable, "-m", "linattn_verify.cli", "check", f"{target_file}:correct"]
    argv += ["--decay", "data", "--form", "recurrent", "--budget", "120", "--no-render", "-v"]
    argv += ["--isolation", isolation, "--report", str(report)]
    # One pipe for both streams, read as it comes: a full stderr pipe would stall the check.
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert child.stdout is not None
    seen = []
    for line in child.stdout:  # once the search is under way
        seen.append(line)
        if line.strip().startswith("ok"):
            break
    os.killpg(child.pid, signal.SIGINT)
    out = "".join(seen) + child.communicate(timeout=60)[0]
    assert child.returncode == 130, out[-2000:]
    assert "Traceback" not in out
    assert "KeyboardInterrupt" not in out
    assert "interrupted (Ctrl-C)" in out
    verdicts = _verdicts(report)
    assert {v["property"] for v in verdicts} == set(family_named("linear_attn").properties())


@pytest.mark.parametrize("version", [(3, 6, 0), (3, 10, 0)], ids=["3.6", "3.10"])
def test_a_triton_outside_the_interpreters_range_is_one_line_and_exit_2(
    target_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    version: tuple[int, int, int],
) -> None:
    # The interpreter's fixes were written for triton 3.7, 3.8 and 3.9; an older or newer one is
    # refused before any search, naming the range, not a traceback.
    from linattn_verify import interpreter
    from linattn_verify.interpreter import _guard

    if not interpreter.select_mode():
        pytest.skip("a CUDA device: kernels are compiled, no interpreter patch is applied")
    monkeypatch.setattr(_guard, "triton_version", lambda: version)
    installed = ".".join(map(str, version))
    assert _check(f"{target_file}:correct", report=tmp_path / "r") == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"linattn-verify check: error: triton {installed} is installed")
    assert "needs triton >=3.7,<3.10" in err[0]
    assert not (tmp_path / "r" / "run.json").exists()
