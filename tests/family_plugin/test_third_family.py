# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A third family plugs in with its own package and entry points, and no edit of shared code.

`fixed_decay.py` is installed the way a package is found (a distribution's ``entry_points.txt``
on the path) and every command takes it: ``check`` (a broken kernel found, a correct one held),
``replay`` and ``report`` in CI; ``list``, ``run``, ``soak`` and ``drift`` (which says the family
has no driver: exit 2) with ``-m slow``. The commands run in a child process, as a user runs
them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ENTRY_POINTS = """\
[linattn_verify.families]
fixed_decay = fixed_decay:FixedDecayFamily

[linattn_verify.properties.fixed_decay]
fixed_decay = fixed_decay:catalogue

[linattn_verify.kernels]
fixed_decay = fixed_decay:kernels
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a child process that has the plug-in installed."""
    site = tmp_path_factory.mktemp("site")
    info = site / "fixed_decay_family-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fixed-decay-family\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    path = os.pathsep.join([str(site), str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linattn_verify.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_replay_and_report_take_the_third_family(
    installed: dict[str, str], tmp_path: Path
) -> None:
    broken = ["fixed_decay:written_before_decay", "--family", "fixed_decay"]
    out = tmp_path / "broken"
    found = cli(installed, "check", *broken, "--budget", "5", "--fail-fast", "--report", str(out))
    assert found.returncode == 1, found.stderr
    assert "o is not close to the float64 oracle" in found.stdout
    (failure,) = json.loads((out / "run.json").read_text())["failures"]
    replayed = cli(installed, *failure["replay"].removeprefix("linattn-verify ").split())
    assert replayed.returncode == 1
    assert "Reproduces" in replayed.stdout
    correct = ["fixed_decay:recurrent_kernel", "--family", "fixed_decay", "--budget", "3"]
    held = cli(installed, "check", *correct, "--no-render", "--report", str(tmp_path / "ok"))
    assert held.returncode == 0, held.stdout + held.stderr
    assert "1 held, 0 failed" in held.stdout
    rendered = cli(installed, "report", str(out))
    assert rendered.returncode == 0, rendered.stderr
    assert "fixed_decay:written_before_decay" in (out / "report.md").read_text()


def test_a_flag_of_another_family_is_refused_before_the_search(installed: dict[str, str]) -> None:
    refused = cli(installed, "check", "fixed_decay:recurrent_kernel", "--family", "fixed_decay",
                  "--normalized")  # fmt: skip
    assert refused.returncode == 2
    assert "--normalized (--family linear_attn) with --family fixed_decay" in refused.stderr


@pytest.mark.slow
def test_list_run_soak_and_drift_take_the_third_family(
    installed: dict[str, str], tmp_path: Path
) -> None:
    listed = cli(installed, "list")
    assert "fixed_decay: plain linear attention" in listed.stdout
    assert "fixed_decay/recurrent" in listed.stdout
    run = cli(installed, "run", "--kernels", "fixed_decay/*", "--examples", "3",
              "--out", str(tmp_path / "run"))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    document = json.loads((tmp_path / "run" / "run.json").read_text())
    assert {k["family"] for k in document["kernels"]} == {"fixed_decay"}
    state = tmp_path / "soak.json"
    soak = cli(installed, "soak", "--kernels", "fixed_decay/*", "--budget", "5",
               "--state", str(state))  # fmt: skip
    assert soak.returncode == 0, soak.stdout + soak.stderr
    assert "fixed_decay/recurrent outputs_match_oracle" in soak.stdout
    drift = cli(installed, "drift", "fixed_decay/recurrent", "--budget", "5")
    assert drift.returncode == 2
    assert "The fixed_decay family has no drift driver." in drift.stderr
