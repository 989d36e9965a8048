# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Open a rendered report in headless Chromium and take a screenshot (skipped without a browser).

The screenshot stays in the test's own temporary directory (pytest keeps the last few runs'
directories: ``--basetemp`` chooses where, for a person who wants to look at it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.results import CaseRecord

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.mark.skipif(browser() is None, reason="no headless Chromium installed (apt: chromium)")
def test_the_html_report_opens_in_headless_chromium(
    tmp_path: Path,
    write_run: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
    reference_kernels: list[Any],
) -> None:
    directory = write_run("shot", [*passing_records, *broken_records], reference_kernels)
    shot = tmp_path / "report.png"
    command = [
        str(browser()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        # The page must render with the network off: everything is embedded.
        "--proxy-server=127.0.0.1:9",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,2600",
        f"--screenshot={shot}",
        (directory / "report.html").as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 50_000, "a blank page is a few kB"
