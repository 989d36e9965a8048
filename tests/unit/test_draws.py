# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A seed draws the same cases in every process, whatever modules each has imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

DRAW = """
import sys
from contextlib import nullcontext
import linattn_verify.running as running
from linattn_verify.registry import get_kernel
from linattn_verify.linear_attn.strategies import kernel_specs
if sys.argv[1] == "unpatched":
    running.seeded_draws = nullcontext
if sys.argv[2] == "loaded":
    # What a process that ran more imports: the catalogue, the delta family, the CLI.
    import linattn_properties, linattn_verify.cli, linattn_verify.delta.bounds  # noqa: F401
    import linattn_verify.reporting  # noqa: F401
strategy = kernel_specs(get_kernel("torch/chunk"), max_seq_len=24, max_head_dim=8)
for case in running.drawn_cases(strategy, 40, 7):
    print(repr(case))
"""


def draws(mode: str, modules: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", DRAW, mode, modules], capture_output=True, text=True, check=True
    ).stdout
    return out.splitlines()


def test_the_same_seed_draws_the_same_cases_whatever_is_imported() -> None:
    few, many = draws("patched", "few"), draws("patched", "loaded")
    assert len(few) == 40
    assert few == many


@pytest.mark.slow
def test_without_it_the_imports_change_the_draws() -> None:
    # The mechanism `seeded_draws` takes out: Hypothesis draws constants of the loaded modules.
    assert draws("unpatched", "few") != draws("unpatched", "loaded")
