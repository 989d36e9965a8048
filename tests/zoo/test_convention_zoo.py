# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Declared conventions hide no defect: broken kernels in other conventions, declared truthfully.

A declaration (``--layout heads-first``, ``--state-layout vk``, ``--normalizer in-dot``,
``--query-feature-map softmax --feature-map exp``, ``--value-gate`` in both families, o
returned alone) must not become a place where defects hide: each kernel of
`convention_bugs.py` has one defect and is checked through the command line with its truthful
declaration; ``check`` must fail it. The correct twins of these conventions are corpus entries
(tests/corpus), which must hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linattn_verify.cli import EXIT_FAILED, main

BUGS = Path(__file__).with_name("convention_bugs.py")
SEARCH = ["--max-seq-len", "16", "--max-head-dim", "6", "--seed", "0", "--budget", "20"]

CASES = {
    "heads_first_exclusive": [
        "--layout", "heads-first", "--state-layout", "vk", "--decay", "scalar",
        "--form", "recurrent", "--dtypes", "fp32",
    ],
    "delta_initial_state_unread_transposed": [
        "--family", "delta", "--gates", "none", "--layout", "heads-first", "--state-layout", "vk",
        "--form", "recurrent", "--dtypes", "fp32",
    ],
    "efficient_softmax_over_tokens": [
        "--layout", "heads-first", "--query-feature-map", "softmax", "--feature-map", "exp",
        "--normalized", "--eps", "1e-06", "--scale", "one", "--dtypes", "fp32",
    ],
    "value_gate_after_update": [
        "--family", "delta", "--gates", "none,scalar", "--value-gate", "--no-backward",
        "--form", "recurrent", "--dtypes", "fp32",
    ],
    "gla_value_gate_after_update": [
        "--decay", "vector", "--value-gate", "--no-backward", "--form", "recurrent",
        "--dtypes", "fp32",
    ],
    "eps_in_dot_stale_key_sum": [
        "--layout", "heads-first", "--normalized", "--normalizer", "in-dot", "--eps", "1e-06",
        "--scale", "one", "--form", "recurrent", "--dtypes", "fp32",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_defect_in_a_declared_convention_is_caught(name: str, tmp_path: Path) -> None:
    flags = [*CASES[name], *SEARCH, "--fail-fast", "--report", str(tmp_path), "--no-render"]
    code = main(["check", f"{BUGS}:{name}", *flags])
    run = json.loads((tmp_path / "run.json").read_text())
    failed = [v for v in run["verdicts"] if v["status"] == "failed"]
    assert code == EXIT_FAILED, [v["property"] for v in run["verdicts"]]
    assert failed
