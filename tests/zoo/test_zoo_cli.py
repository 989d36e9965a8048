# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo through the command line: ``linattn-verify check`` rejects every broken kernel
and accepts the correct twins, as a user would run it on a file of their own.

Broken kernels run with ``--fail-fast`` (the check ends at the first failing property, after
shrinking) and check's default budget (60 s); twins must hold every property for a short
budget. CI runs the first broken kernel of each bug class; ``pytest -m slow`` runs them all.
Kernels wrong only at large sizes (``ZooEntry.size_only``: K > 64, T > 512, a race past
T = 64) run without the size caps: the size reach must find them, and their twins must hold at
every size the reach gets to. The table printed at the end gives each kernel's time to the
first failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, main
from linattn_verify.core.loading import import_file

TARGETS = Path(__file__).with_name("cli_targets.py")
TWIN_BUDGET = 3.0  # the first round runs whatever the budget (every property tried once);
# test_zoo.py searches each twin with the catalogue for 25 examples, `-m slow` every broken one
SIZE_TWIN_BUDGET = 60.0  # check's default: 24 s of reach passes T = 512 on a loaded CI machine
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

# One twin of a size-only kernel per distinct twin kernel: checked at large sizes too.
SIZE_TWINS = sorted(
    {e.twin.name: e.broken.name.removeprefix("zoo/") for e in targets.ZOO if e.size_only}.values()
)

# CI's tier: the first broken kernel of each bug class (in the zoo's order, capped sizes) through
# the command line; the rest, and the twins at large sizes, run with `pytest -m slow`. Every
# broken kernel is caught in-process by test_zoo.py in both tiers.
FIRST_OF_CLASS = set(
    {
        e.bug_class: e.broken.name.removeprefix("zoo/")
        for e in reversed(targets.ZOO)
        if not e.size_only
    }.values()
) - {"wrong_under_compile"}
"""(The compile class's one kernel takes 74 s through the command line, a dynamo trace per case:
CI catches it in-process, test_zoo.py, in 18 s.)"""
BROKEN = [
    name if name in FIRST_OF_CLASS else pytest.param(name, marks=pytest.mark.slow) for name in NAMES
]


def _check(
    target: str, flags: list[str], budget: float | None, report: Path, *, capped: bool = True
) -> tuple[int, Any]:
    # run.json is all these tests read: the Markdown/HTML report and its plots (3 s a check, 61
    # checks) are left out; tests/reporting renders reports.
    budgeted = ["--report", str(report), "--no-render"]
    budgeted += [] if budget is None else ["--budget", str(budget)]
    search = SEARCH if capped else ["--seed", "0"]
    code = main(["check", f"{TARGETS}:{target}", *flags, *search, *budgeted])
    return code, json.loads((report / "run.json").read_text())


@pytest.mark.parametrize("name", BROKEN)
def test_check_rejects_broken_zoo_kernel(
    name: str, tmp_path: Path, zoo_cli_log: dict[str, float]
) -> None:
    flags = [*targets.flags(name), "--fail-fast"]
    # Every broken kernel within check's default budget (60 s); the size-only ones without caps.
    size_only = name in targets.SIZE_ONLY
    code, document = _check(name, flags, None, tmp_path, capped=not size_only)
    verdicts = document["verdicts"]
    failed = [v for v in verdicts if v["status"] == "failed"]
    assert code == EXIT_FAILED, f"zoo/{name} passed `check` {' '.join(flags)}"
    assert failed
    first = min(v["first_failure_seconds"] for v in failed)
    zoo_cli_log[name] = first
    print(f"zoo/{name}: {failed[0]['property']} failed after {first:.1f} s")


def _twin_key(name: str) -> tuple[str, bool]:
    (entry,) = [e for e in targets.ZOO if e.broken.name == f"zoo/{name}"]
    return entry.twin.name, targets.CONFIGS[name]["normalize"]


CI_TWIN_KEYS = {_twin_key(name) for name in FIRST_OF_CLASS}
TWIN_PARAMS = [
    name if _twin_key(name) in CI_TWIN_KEYS else pytest.param(name, marks=pytest.mark.slow)
    for name in TWINS
]
"""In CI the twins of the broken kernels CI checks (one per family of twins and bug class), the
others with `-m slow`; test_zoo.py searches every twin in-process in both tiers."""


@pytest.mark.parametrize("name", TWIN_PARAMS)
def test_check_accepts_correct_twin(name: str, tmp_path: Path) -> None:
    code, document = _check(f"twin_{name}", targets.flags(name), TWIN_BUDGET, tmp_path)
    failed = [v["message"] for v in document["verdicts"] if v["status"] == "failed"]
    assert code == EXIT_OK, failed


@pytest.mark.slow
@pytest.mark.parametrize("name", SIZE_TWINS)
def test_check_accepts_correct_twin_at_large_sizes(name: str, tmp_path: Path) -> None:
    flags = targets.flags(name)
    code, document = _check(f"twin_{name}", flags, SIZE_TWIN_BUDGET, tmp_path, capped=False)
    failed = [v["message"] for v in document["verdicts"] if v["status"] == "failed"]
    assert code == EXIT_OK, failed
    # The reach got past the boundaries the size-only kernels break (K > 64 and T > 512).
    assert document["totals"]["largest_T"] > 512
    assert document["totals"]["largest_head_dim"] > 64


def test_zoo_targets_cover_the_zoo() -> None:
    assert len(NAMES) == len(targets.ZOO)
    for name in NAMES:
        assert callable(getattr(targets, name))
        assert callable(getattr(targets, f"twin_{name}"))
