# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Render a run document as Markdown (GitHub flavour), every kernel-supplied text escaped."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from linattn_verify.reporting import content
from linattn_verify.reporting.content import Table
from linattn_verify.reporting.verdict_map import verdict_maps

# Characters that act anywhere in a line; those that act only at its start are handled apart.
_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_BLOCK_START = re.compile(r"^(?:([#>+=-])|(\d+)([.)]))")


def escape(text: str) -> str:
    """Return ``text`` safe inside a Markdown table cell or after other text on a line.

    Markdown punctuation is backslash-escaped, ``&``, ``<`` and ``>`` become entities (Markdown
    passes raw HTML through), and line breaks become spaces (a table row is one line).
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _SPECIAL.sub(r"\\\1", text)
    return " ".join(text.splitlines())


def escape_line(text: str) -> str:
    """Return ``text`` safe as a paragraph of its own: `escape`, and no heading or list marker."""
    return _BLOCK_START.sub(
        lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3),
        escape(text),
    )


def fenced(text: str, language: str = "text") -> str:
    """Return ``text`` in a fenced code block whose fence no run of backticks inside can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def table(t: Table, *, level: int = 2) -> str:
    """Return ``t`` as a Markdown table under a heading (level 2 unless told)."""
    lines = [f"{'#' * level} {escape(t.title)}", ""]
    if t.note:
        lines += [escape_line(t.note), ""]
    if not t.rows:
        return "\n".join([*lines, "_None._", ""])
    lines.append("| " + " | ".join(escape(h) or " " for h in t.headers) + " |")
    lines.append("|" + "|".join("---" for _ in t.headers) + "|")
    lines += ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in t.rows]
    return "\n".join([*lines, ""])


def failures_section(failures: Sequence[Mapping[str, Any]]) -> str:
    """Return the failures, each with its message and replay command."""
    lines = ["## Finding details", ""]
    if not failures:
        return "\n".join([*lines, "_None._", ""])
    for n, failure in enumerate(failures[: content.FAILURES_SHOWN], start=1):
        lines += [f"### {n}. {escape(content.failure_title(failure))}", ""]
        if failure.get("case"):
            lines += [f"Case: {escape(str(failure['case']))}", ""]
        if failure.get("replay"):
            lines += ["Replay:", "", fenced(str(failure["replay"]), "sh"), ""]
        else:
            lines += [escape_line(content.NO_REPLAY), ""]
        lines += [fenced(str(failure.get("message") or "(no message)")), ""]
    if len(failures) > content.FAILURES_SHOWN:
        more = len(failures) - content.FAILURES_SHOWN
        lines += [f"_{more} more failures are listed in run.json._", ""]
    return "\n".join(lines)


def render_markdown(document: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    """Return the Markdown report of a run document.

    Args:
        document: A validated run document.
        plots: File names of the plots, relative to the report (e.g. ``plots/forms.png``).
            Default: `()` (none).

    Returns:
        The Markdown text.
    """
    parts = [
        "# linattn-verify accuracy report",
        "",
        f"**{escape(content.headline(document))}**",
        "",
    ]
    warning = content.incomplete_warning(document)
    if warning:
        parts += [f"> **Warning:** {escape(warning)}", ""]
    maps = verdict_maps(document)
    parts += [f"- {escape_line(line)}" for line in content.glance(document, maps)] + [""]
    if document["failures"]:
        parts.append(table(content.findings_table(document)))
    parts += [table(content.map_table(vmap)) for vmap in maps]
    if document["failures"]:
        parts.append(failures_section(document["failures"]))
    pairs = content.side_by_side_tables(document)
    if pairs:
        parts += ["## Kernels side by side", ""]
        for summary, per_case in pairs:
            parts += [table(summary, level=3), table(per_case, level=4)]
    parts += ["## Plots", ""]
    for path in plots:
        caption = content.PLOT_CAPTIONS.get(path.rsplit("/", 1)[-1], "")
        parts += [f"![{escape(caption)}]({path})", "", escape_line(caption), ""]
    if not plots:
        parts += ["_No scored cases to plot._", ""]
    parts += [
        table(content.distributions_table(document)),
        table(content.verdicts_table(document)),
        table(content.worst_cases_table(document)),
        table(content.kernels_table(document)),
        table(content.recipes_table(document)),
        table(content.environment_table(document)),
    ]
    return "\n".join(parts).rstrip() + "\n"
