# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run a test directory with 1 and 2 pytest-xdist workers and compare every test's verdict.

    python benchmarks/xdist_equivalence.py [PATH ...] [--workers 1 2]

Default path: ``tests/properties``. Each run is ``CI=true python -m pytest PATH -n N
--hypothesis-profile=ci`` (derandomized, so both runs draw the same examples) with a JUnit
report; the summary (commands, wall times, outcome counts, tests whose outcome differs) goes to
``benchmarks/xdist_equivalence.json``, which ``results.py`` puts in RESULTS.md. Exit status 1
when any verdict differs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "benchmarks" / "xdist_equivalence.json"
OUTER_ONLY = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST")


def junit_outcomes(path: Path) -> dict[str, str]:
    """Return ``{test id: passed | failed | error | skipped}`` from a JUnit XML report."""
    names = {"failure": "failed", "error": "error", "skipped": "skipped"}
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        ends = [names[child.tag] for child in case if child.tag in names]
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = ends[0] if ends else "passed"
    return outcomes


def run(paths: list[str], workers: int, scratch: Path) -> dict[str, Any]:
    """Run ``paths`` with ``workers`` workers; return the command, wall time and outcomes."""
    report = scratch / f"workers-{workers}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *paths,
        "-n",
        str(workers),
        "--hypothesis-profile=ci",
        f"--junitxml={report}",
        f"--linattn-failures={scratch / 'failures'}",
        "-q",
    ]
    env = {k: v for k, v in os.environ.items() if k not in OUTER_ONLY} | {"CI": "true"}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if not report.exists():
        raise SystemExit(f"no JUnit report from {command}:\n{done.stdout}\n{done.stderr}")
    outcomes = junit_outcomes(report)
    shown = ["CI=true", "python", *command[1:]]
    return {
        "command": " ".join(a for a in shown if not a.startswith(("--junitxml", "--linattn-f"))),
        "exit_status": done.returncode,
        "seconds": round(seconds, 1),
        "counts": dict(collections.Counter(outcomes.values())),
        "outcomes": outcomes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["tests/properties"])
    parser.add_argument("--workers", nargs=2, type=int, default=[1, 2], metavar="N")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        runs = [run(args.paths, n, Path(scratch)) for n in args.workers]
    first, second = (r["outcomes"] for r in runs)
    differ = {
        test: [first.get(test), second.get(test)]
        for test in sorted(first.keys() | second.keys())
        if first.get(test) != second.get(test)
    }
    summary = {
        "paths": args.paths,
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "runs": [{k: v for k, v in r.items() if k != "outcomes"} for r in runs],
        "tests": len(first.keys() | second.keys()),
        "differ": differ,
    }
    SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "differ"}, indent=2))
    print(f"{len(differ)} tests differ" + (f": {differ}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
