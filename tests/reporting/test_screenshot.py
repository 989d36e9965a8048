# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The HTML report as a person sees it, in headless Chromium driven by Playwright.

What the first screen of a 1280x800 window shows is asserted, not only that a page renders:
the verdict, the findings with a replay command, the verdict map's cells and their colours,
and the plots decoded. The first-screen screenshot stays in the test's temporary directory
(``--basetemp`` chooses where, for a person who wants to look at it).

Skipped without Chromium or Playwright, unless ``LINATTN_REQUIRE_BROWSER=1`` (``.ci/run`` sets
it once it has installed Debian's chromium): then a missing browser is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.reporting.verdict_map import BANDS, STATUS_LEGEND
from linattn_verify.results import CaseRecord

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREEN = {"width": 1280, "height": 800}
# Flags that keep Chromium off this machine's closed network and out of the sandbox it cannot
# have as root.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=127.0.0.1:9",
]


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def page_of() -> Iterator[Any]:
    required = os.environ.get("LINATTN_REQUIRE_BROWSER") == "1"
    executable = browser()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("Playwright is not installed (pip install playwright)")
    if executable is None:
        if required:
            pytest.fail("LINATTN_REQUIRE_BROWSER=1 but no Chromium is installed (apt: chromium)")
        pytest.skip("no headless Chromium installed (apt: chromium)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, headless=True, args=FLAGS)

        def open_page(path: Path) -> Any:
            page = chromium.new_page(viewport=SCREEN)
            page.goto(path.as_uri())
            return page

        yield open_page
        chromium.close()


def first_screen(page: Any, selector: str) -> bool:
    """Whether the element's top edge is inside the first screen."""
    box = page.locator(selector).first.bounding_box()
    return box is not None and box["y"] < SCREEN["height"]


def background(page: Any, selector: str) -> str:
    return str(page.eval_on_selector(selector, "e => getComputedStyle(e).backgroundColor"))


def test_a_failing_report_answers_in_its_first_screen(
    tmp_path: Path,
    page_of: Any,
    write_run: Any,
    passing_records: list[CaseRecord],
    broken_records: list[CaseRecord],
    reference_kernels: list[Any],
) -> None:
    directory = write_run("shot", [*passing_records, *broken_records], reference_kernels)
    page = page_of(directory / "report.html")
    page.screenshot(path=str(tmp_path / "first-screen.png"))
    # Passed or not, and what failed, before any scrolling.
    verdict = page.locator("#verdict")
    assert verdict.inner_text().startswith("FAILED")
    assert first_screen(page, "#verdict")
    glance = page.locator("ul.glance").inner_text()
    assert "1 finding in 1 kernel: bug/scaled" in glance
    assert "Nearest the fail line" in glance
    assert first_screen(page, "ul.glance")
    findings = page.locator("table").first.inner_text()
    assert "bug/scaled" in findings
    assert "outputs_match_oracle" in findings
    assert first_screen(page, "table")
    # The minimal case's replay command is in the findings table, in the first screen, and
    # in the details below the map, as a person can copy it.
    failure_file = broken_records[-1].failure_file
    assert f"linattn-verify replay {failure_file}" in findings
    assert first_screen(page, "table.map")
    replay = page.locator("pre.replay").first
    assert replay.is_visible()
    assert replay.inner_text() == f"linattn-verify replay {failure_file}"
    # The map: one cell per kernel, dtype and tensor, coloured by its kind.
    cells = page.locator("table.map td.cell")
    kinds = [cells.nth(i).get_attribute("data-kind") for i in range(cells.count())]
    rows = page.locator("table.map tr").count() - page.locator("table.map").count()
    columns = page.locator("table.map tr").first.locator("th").count() - 2
    assert len(kinds) == rows * columns > 0
    assert "failed" in kinds
    assert {"ample", "good", "close"} & set(kinds)
    assert set(kinds) <= {name for name, _, _ in BANDS} | set(STATUS_LEGEND)
    failed = background(page, 'table.map td.cell[data-kind="failed"]')
    ample = background(page, 'table.map td.cell:not([data-kind="failed"])')
    red, green, _ = (int(x) for x in failed.removeprefix("rgb(").rstrip(")").split(","))
    assert red > 200, failed  # the failed cell is red
    assert green < 160, failed
    assert failed != ample
    bug_row = page.locator("table.map tr", has_text="bug/scaled").first
    assert bug_row.locator('td[data-kind="failed"]').count() >= 1
    # The plots are decoded images, not broken links.
    images = page.locator("figure img")
    assert images.count() == 4
    for i in range(images.count()):
        width = images.nth(i).evaluate("img => img.complete ? img.naturalWidth : 0")
        assert width > 300
    png = (tmp_path / "first-screen.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 30_000, "a blank screen is a few kB"


def test_a_passing_report_says_so_first(
    page_of: Any, write_run: Any, passing_records: list[CaseRecord], reference_kernels: list[Any]
) -> None:
    directory = write_run("ok", passing_records, reference_kernels)
    page = page_of(directory / "report.html")
    assert page.locator("#verdict").inner_text().startswith("PASSED")
    assert "No findings" in page.locator("ul.glance").inner_text()
    assert page.locator("pre.replay").count() == 0
    assert first_screen(page, "table.map")
    kinds = page.locator("table.map td.cell").evaluate_all(
        "cells => cells.map(c => c.dataset.kind)"
    )
    assert "failed" not in kinds
    # The worst cell of a passing run is named at the top, with its headroom.
    assert "headroom" in page.locator("ul.glance").inner_text()
