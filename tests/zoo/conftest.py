# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo's fixtures: the kernels of `bugs.py` as test parameters, and the zoo tables.

`pytest_generate_tests` hands the zoo to the tests as the parameters ``zoo_entry`` (a broken
kernel with its twin), ``small_size_entry`` (those wrong at the sizes the zoo's search draws,
not only beyond them) and ``zoo_twin`` (each twin once, with its extra properties); the
``zoo`` fixture is the whole table. The tests record what caught each broken kernel in
``zoo_log`` and ``zoo_cli_log``, printed at the end of the run.

Under ``--import-mode=importlib`` a conftest cannot import a sibling module, so `bugs.py` and
`vector_bugs.py` are loaded by path (`linattn_verify.core.loading.import_file`), as `cli_targets.py`
loads them.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.core.loading import import_file

bugs = import_file(Path(__file__).with_name("bugs.py"), "_linattn_zoo_bugs")
vector_bugs = import_file(Path(__file__).with_name("vector_bugs.py"), "_linattn_zoo_vector_bugs")
ZOO = bugs.ZOO + vector_bugs.VECTOR_ZOO
TWINS = bugs.twins_of(ZOO)

CAUGHT: dict[str, dict[str, Any]] = {}
"""Per broken kernel: which properties failed first and after how long (the zoo table)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "zoo_entry" in metafunc.fixturenames:
        ids = [e.broken.name.removeprefix("zoo/") for e in ZOO]
        metafunc.parametrize("zoo_entry", ZOO, ids=ids)
    if "small_size_entry" in metafunc.fixturenames:
        small = [e for e in ZOO if not e.size_only]
        ids = [e.broken.name.removeprefix("zoo/") for e in small]
        metafunc.parametrize("small_size_entry", small, ids=ids)
    if "zoo_twin" in metafunc.fixturenames:
        params = []
        for twin, extra in TWINS:
            name = twin.name.removeprefix("zoo-twin/")
            params.append(pytest.param((twin, ()), id=name))
            if extra:
                # The costly extras (a dynamo trace per case: 60 s for the chunk twin) with
                # `-m slow`; CI searches the twin with the catalogue and the broken kernel's test
                # runs the twin on the case it fails, extras included.
                slow = pytest.mark.slow
                params.append(pytest.param((twin, extra), id=f"{name}+extra", marks=slow))
        metafunc.parametrize("zoo_twin", params)


@pytest.fixture(scope="session")
def zoo_log() -> dict[str, dict[str, Any]]:
    """Where the tests record what caught each broken kernel (printed at the end)."""
    return CAUGHT


CLI_FIRST_FAILURES: dict[str, float] = {}
"""Per broken kernel: seconds to the first failure of ``linattn-verify check`` (test_zoo_cli)."""


@pytest.fixture(scope="session")
def zoo_cli_log() -> dict[str, float]:
    return CLI_FIRST_FAILURES


@pytest.fixture(scope="session")
def zoo() -> tuple[bugs.ZooEntry, ...]:
    return ZOO


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CLI_FIRST_FAILURES:
        times = sorted(CLI_FIRST_FAILURES.values())
        terminalreporter.section("bug zoo through linattn-verify check")
        for name, seconds in sorted(CLI_FIRST_FAILURES.items(), key=lambda item: item[1]):
            terminalreporter.write_line(f"zoo/{name:40} first failure after {seconds:6.1f} s")
        terminalreporter.write_line(
            f"median time to first failure {statistics.median(times):.1f} s over {len(times)} "
            f"broken kernels (max {times[-1]:.1f} s)"
        )
    if not CAUGHT:
        return
    write = terminalreporter.write_line
    terminalreporter.section("bug zoo")
    write(f"{'zoo kernel':40} {'bug class':18} {'first fail':>11}  caught by")
    for entry in ZOO:
        row = CAUGHT.get(entry.broken.name)
        if row is None:
            continue
        caught = ", ".join(row["properties"]) or "NOT CAUGHT"
        when = f"{row['seconds']:.1f}s/#{row['examples']}" if row["properties"] else "-"
        write(f"{entry.broken.name:40} {entry.bug_class:18} {when:>11}  {caught}")
    for name, row in CAUGHT.items():
        # Failures the twin shared on the same case are the harness's, not the bug's.
        for shared in row.get("shared", []):
            write(f"harness false positive (twin failed too) in {name}: {shared}")
