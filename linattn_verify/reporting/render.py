# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Write a run's report files: ``report.md``, ``report.html`` and ``plots/*.png``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting._v1 import as_current
from linattn_verify.reporting.content import PLOT_CAPTIONS
from linattn_verify.reporting.html import render_html
from linattn_verify.reporting.markdown import render_markdown
from linattn_verify.reporting.plots import render_plots
from linattn_verify.reporting.summary import DecodedRun

PLOTS_DIR = "plots"


@dataclass(frozen=True)
class ReportFiles:
    """Where `render_report` wrote the report.

    Attributes:
        markdown: ``report.md`` (its plots are PNG files beside it).
        html: ``report.html`` (self-contained).
        plots: The PNG files.
    """

    markdown: Path
    html: Path
    plots: tuple[Path, ...]


def render_report(document: Mapping[str, Any], directory: str | os.PathLike[str]) -> ReportFiles:
    """Render a run document as Markdown and HTML (with plots) into ``directory``.

    Args:
        document: A run document (`linattn_verify.reporting.load_run`); it is validated (and a
            version 1 document upgraded).
        directory: Where to write; created if missing.

    Returns:
        The files written.

    Raises:
        InvalidArgument: if ``document`` is not a valid run document or ``directory`` no path.
    """
    if not isinstance(directory, str | os.PathLike):
        raise InvalidArgument(f"Expected a path but got directory={directory!r}.")
    # Every table, map and plot reads the cases: decoded once for all of them.
    document = DecodedRun(as_current(document))
    folder = Path(directory)
    plots_dir = folder / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    plots = render_plots(document)
    for stale in PLOT_CAPTIONS.keys() - plots.keys():
        (plots_dir / stale).unlink(missing_ok=True)
    written = []
    for name, png in plots.items():
        path = plots_dir / name
        path.write_bytes(png)
        written.append(path)
    markdown = folder / "report.md"
    markdown.write_text(render_markdown(document, [f"{PLOTS_DIR}/{name}" for name in plots]))
    page = folder / "report.html"
    page.write_text(render_html(document, plots))
    return ReportFiles(markdown=markdown, html=page, plots=tuple(written))
