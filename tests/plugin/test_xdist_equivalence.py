# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Sharding the property suite over pytest-xdist workers changes no verdict.

A small real subset of the property tests (oracle agreement and causality on the torch
reference kernels, 12 tests under the derandomized ``ci`` profile) runs in fresh processes with
one worker and with two; each test must end the same way in both runs. The bigger measured run
(all of ``tests/properties``) is in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SUBSET = [
    "tests/properties/test_oracle.py",
    "tests/properties/test_causality.py",
    "-k",
    "torch/ and not nasty",
]
"""Property tests cheap enough for CI (about 15 s of CPU per run), on every torch form."""

# Variables the outer run sets in its own workers; inherited, they would make the nested
# controller believe it is a worker.
OUTER_ONLY = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST")


def junit_outcomes(path: Path) -> dict[str, str]:
    """Return ``{test id: passed | failed | error | skipped}`` from a JUnit XML report."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        ends = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(
            ends[0] if ends else "", "passed"
        )
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return outcomes


def run_subset(workers: int, tmp_path: Path) -> dict[str, str]:
    report = tmp_path / f"workers-{workers}.xml"
    env = {k: v for k, v in os.environ.items() if k not in OUTER_ONLY}
    env["CI"] = "true"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *SUBSET,
        "-n",
        str(workers),
        "--hypothesis-profile=ci",
        f"--junitxml={report}",
        f"--linattn-failures={tmp_path / 'failures'}",
        "-q",
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert report.exists(), f"no JUnit report from {command}:\n{done.stdout}\n{done.stderr}"
    return junit_outcomes(report)


@pytest.mark.slow
def test_one_and_two_workers_give_the_same_verdicts(tmp_path: Path) -> None:
    one = run_subset(1, tmp_path)
    two = run_subset(2, tmp_path)
    assert len(one) == 12, one
    differ = {test: (one.get(test), two.get(test)) for test in one.keys() | two.keys()}
    differ = {test: pair for test, pair in differ.items() if pair[0] != pair[1]}
    assert not differ, f"verdicts differ between -n 1 and -n 2 (test: (one, two)): {differ}"
