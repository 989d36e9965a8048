# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo through the command line: ``linattn-verify check`` rejects every broken kernel
and accepts the correct twins, as a user would run it on a file of their own.

Broken kernels run with ``--fail-fast`` (the check ends at the first failing property, after
shrinking) and the generous budget a user would give; twins must hold every property for a
short budget. The table printed at the end gives each kernel's time to the first failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, main
from linattn_verify.targets import import_file

TARGETS = Path(__file__).with_name("cli_targets.py")
BROKEN_BUDGET = 120.0
TWIN_BUDGET = 10.0
SEARCH = ["--max-seq-len", "24", "--max-head-dim", "8", "--seed", "0"]


targets = import_file(TARGETS, "_linattn_zoo_cli_targets")
NAMES = sorted(targets.CONFIGS)
# One twin per distinct (twin kernel, semantics): the twins shared by several broken kernels.
TWINS = sorted(
    {
        (e.twin.name, targets.CONFIGS[e.broken.name.removeprefix("zoo/")]["normalize"]): (
            e.broken.name.removeprefix("zoo/")
        )
        for e in targets.ZOO
    }.values()
)


def _check(target: str, flags: list[str], budget: float, report: Path) -> tuple[int, Any]:
    budgeted = ["--budget", str(budget), "--report", str(report)]
    code = main(["check", f"{TARGETS}:{target}", *flags, *SEARCH, *budgeted])
    return code, json.loads((report / "run.json").read_text())["verdicts"]


@pytest.mark.parametrize("name", NAMES)
def test_check_rejects_broken_zoo_kernel(
    name: str, tmp_path: Path, zoo_cli_log: dict[str, float]
) -> None:
    flags = [*targets.flags(name), "--fail-fast"]
    code, verdicts = _check(name, flags, BROKEN_BUDGET, tmp_path)
    failed = [v for v in verdicts if v["status"] == "failed"]
    assert code == EXIT_FAILED, f"zoo/{name} passed `check` {' '.join(flags)}"
    assert failed
    first = min(v["first_failure_seconds"] for v in failed)
    zoo_cli_log[name] = first
    print(f"zoo/{name}: {failed[0]['property']} failed after {first:.1f} s")


@pytest.mark.parametrize("name", TWINS)
def test_check_accepts_correct_twin(name: str, tmp_path: Path) -> None:
    code, verdicts = _check(f"twin_{name}", targets.flags(name), TWIN_BUDGET, tmp_path)
    failed = [v["message"] for v in verdicts if v["status"] == "failed"]
    assert code == EXIT_OK, failed


def test_zoo_targets_cover_the_zoo() -> None:
    assert len(NAMES) == len(targets.ZOO)
    for name in NAMES:
        assert callable(getattr(targets, name))
        assert callable(getattr(targets, f"twin_{name}"))
