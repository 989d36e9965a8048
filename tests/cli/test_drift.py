# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn-verify drift`: the report files, exit 1 for a kernel past its bound, the budget stop,
usage errors (exit 2, the argument named)."""

from __future__ import annotations

import json
import struct
import textwrap
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.drift_report import SCHEMA, drift_markdown, drift_plot

SMALL = ["--heads", "1", "--head-dim", "16", "--value-dim", "16"]

TARGETS = textwrap.dedent(
    """
    from linattn_verify.linear_attn.reference_kernels import float32_chunk_reference

    _chunk = float32_chunk_reference()


    def chunk(q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False,
              cu_seqlens=None):
        return _chunk(q, k, v, g, scale=scale, initial_state=initial_state,
                      output_final_state=output_final_state, cu_seqlens=cu_seqlens)


    def chunk_bf16_state(q, k, v, g=None, *, scale=None, initial_state=None,
                         output_final_state=False, cu_seqlens=None):
        # Planted: the state is read in bf16, but the flags declare an fp32 chunk recipe.
        return _chunk(q, k, v, g, scale=scale, initial_state=initial_state,
                      output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                      state_dtype="bfloat16")
    """
)
DECLARED = ["--decay", "scalar", "--form", "chunk", "--chunk-size", "8"]


@pytest.fixture
def targets(tmp_path: Path) -> Path:
    path = tmp_path / "drift_targets.py"
    path.write_text(TARGETS)
    return path


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _document(out: Path) -> dict[str, Any]:
    return json.loads((out / "drift.json").read_text())  # type: ignore[no-any-return]


def test_reference_kernel_reaches_max_T_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "drift"
    flags = ["--max-T", "256", "--dtypes", "fp32,bf16", "--state-dtypes", "fp32,bf16"]
    assert main(["drift", "torch/chunk", *flags, *SMALL, "--out", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "reached T = 256" in printed
    assert "FAILED" not in printed
    doc = _document(out)
    assert doc["schema"] == SCHEMA
    assert doc["kernel"] == "torch/chunk"
    assert doc["stopped"] == "max_T"
    assert doc["reached_T"] == 256
    assert doc["ok"]
    assert len(doc["points"]) == 3 * 4
    assert {(s["dtype"], s["state_dtype"]) for s in doc["series"]} == {
        (d, s) for d in ("float32", "bfloat16") for s in ("float32", "bfloat16")
    }
    for point in doc["points"]:
        for tensor in ("o", "final_state"):
            t = point["tensors"][tensor]
            assert 0 < t["max_err"] <= t["max_bound"]
            assert t["max_r"] <= 1.0
    # Each variant's recipe is recorded: the bf16 state is declared as one cast on the path.
    assert "casts_on_path=1" in doc["recipes"]["float32/bfloat16"]
    assert "casts_on_path=0" in doc["recipes"]["float32/float32"]
    png = (out / "drift.png").read_bytes()
    width, height = _png_size(png)
    assert width > 500
    assert height > 250
    assert len(png) > 20_000
    md = (out / "drift.md").read_text()
    assert "| fp32 in, bf16 state | o | 256 |" in md


def test_the_json_round_trips_into_the_same_plot_and_table(tmp_path: Path) -> None:
    out = tmp_path / "drift"
    assert main(["drift", "torch/delta.chunk", "--max-T", "128", *SMALL, "--out", str(out)]) == 0
    doc = _document(out)
    again = json.loads(json.dumps(doc))
    assert again == doc
    assert drift_plot(again) == (out / "drift.png").read_bytes()
    assert drift_markdown(again) == (out / "drift.md").read_text()


def test_a_target_past_its_declared_bound_fails(
    tmp_path: Path, targets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    common = ["--max-T", "256", *SMALL, *DECLARED]
    assert main(["drift", f"{targets}:chunk", *common, "--out", str(good)]) == EXIT_OK
    assert main(["drift", f"{targets}:chunk_bf16_state", *common, "--out", str(bad)]) == (
        EXIT_FAILED
    )
    printed = capsys.readouterr().out
    assert "FAILED" in printed
    assert "exceeded its declared bound" in printed
    doc = _document(bad)
    assert not doc["ok"]
    assert any(f["tensor"] == "o" and f["max_r"] > 2 for f in doc["failures"])


def test_the_budget_stop_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "drift"
    flags = ["--max-T", "65536", "--budget", "0.001", *SMALL, "--out", str(out)]
    assert main(["drift", "torch/chunk", *flags]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "reached T = 64" in printed
    assert "stopped before T=128" in printed
    doc = _document(out)
    assert doc["stopped"] == "budget"
    assert doc["reached_T"] == 64


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["torch/recurrent", "--state-dtypes", "fp32,bf16"], "--state-dtypes"),
        (["torch/chunk", "--max-T", "64", "--start-T", "128"], "--max-T"),
        (["torch/nope"], "torch/nope"),
        (["torch/chunk", "--normalized"], "--normalized"),
    ],
)
def test_usage_errors_exit_2_naming_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert main(["drift", *argv, "--out", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert named in err
    assert "Traceback" not in err
    assert not (tmp_path / "drift.json").exists()


def test_a_gate_the_target_does_not_declare_is_a_usage_error(
    tmp_path: Path, targets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["drift", f"{targets}:chunk", "--gate", "scalar", "--form", "chunk"]
    assert main([*argv, "--out", str(tmp_path)]) == EXIT_USAGE
    assert "--gate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--dtypes", "fp8"), ("--max-T", "100"), ("--start-T", "-4"), ("--budget", "0")],
)
def test_malformed_values_are_argparse_errors(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["drift", "torch/chunk", flag, value])
    assert exit_info.value.code == EXIT_USAGE
    assert flag in capsys.readouterr().err
