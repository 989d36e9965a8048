# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""FLA's own functions through ``linattn-verify check``, as a user would check them.

FLA's simple_gla and unnormalized linear_attn functions are in the calling convention already,
so no adapter is involved: the flags declare what the function computes and how it rounds (the
16-bit recipes are those of `linattn_verify.linear_attn.adapters.fla`: intermediates rounded to the
input dtype, twice on a chunked simple_gla path, none in the fused recurrent kernel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linattn_verify.cli import EXIT_OK, main

pytest.importorskip("fla", reason="fla-core is not installed")

SEARCH = ["--max-seq-len", "20", "--max-head-dim", "8", "--budget", "12", "--seed", "0"]

TARGETS = {
    "simple_gla-chunk": [
        "fla.ops.simple_gla:chunk_simple_gla", "--decay", "data", "--varlen", "--form", "chunk",
        "--dtypes", "float32,bfloat16", "--even-head-dims", "bfloat16",
        "--intermediate-dtype", "input", "--casts", "2",
    ],
    "linear_attn-fused_recurrent": [
        "fla.ops.linear_attn:fused_recurrent_linear_attn", "--varlen", "--form", "recurrent",
        "--dtypes", "float32,bfloat16",
    ],
}  # fmt: skip


# Importing FLA warns (no flash-attn, deprecated torch.jit APIs, no CUDA): FLA's, not the check's.
@pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::ImportWarning", "ignore::DeprecationWarning"
)
@pytest.mark.parametrize(
    "target",
    [
        # The chunked one, interpreted, takes 22 s: with `-m slow` (FLA's kernels are searched
        # in CI through their adapters, tests/adapters).
        pytest.param(TARGETS["simple_gla-chunk"], id="simple_gla-chunk", marks=pytest.mark.slow),
        pytest.param(TARGETS["linear_attn-fused_recurrent"], id="linear_attn-fused_recurrent"),
    ],
)
def test_fla_function_passes_check(target: list[str], tmp_path: Path) -> None:
    code = main(["check", *target, *SEARCH, "--report", str(tmp_path), "--no-render"])
    verdicts = json.loads((tmp_path / "run.json").read_text())["verdicts"]
    failed = [v["message"] for v in verdicts if v["status"] == "failed"]
    assert code == EXIT_OK, failed
    held = [v["property"] for v in verdicts if v["status"] == "held"]
    assert {"outputs_match_oracle", "gradients_match_oracle", "contract_holds"} <= set(held)
