# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Render a run document as one self-contained HTML page: inline CSS, plots as data URIs.

The page loads nothing from the network and runs no script. Every text that comes from a run
(kernel names, case lines, messages, paths) goes through `html.escape`.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from linattn_verify.reporting import content
from linattn_verify.reporting.content import Table
from linattn_verify.reporting.verdict_map import BANDS, STATUS_LEGEND, VerdictMap, verdict_maps

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.headline { font-size: 1.1em; font-weight: 600; padding: .6em 1em; border-radius: 4px; }
.passed { background: #e6f4ea; border-left: 6px solid #2ca02c; }
.verdict-failed { background: #fdecea; border-left: 6px solid #d62728; }
.warning { background: #fff4e5; border-left: 6px solid #ff7f0e; padding: .5em 1em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr.fail td { background: #fdecea; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 12px; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 12px; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }
details { margin: .6em 0; } summary { cursor: pointer; font-weight: 600; }
ul.glance { margin: .6em 0 1em; padding-left: 1.4em; font-size: 1.02em; }
table.map td.cell { text-align: center; min-width: 4.2em; font-variant-numeric: tabular-nums; }
table.map td.cell small { display: block; font-size: 10px; color: #333; }
.ample { background: #b7e4c7; } .good { background: #d8f3dc; } .close { background: #fff3b0; }
.suspect { background: #ffc078; } .failed { background: #ff8787; font-weight: 700; }
.ill_conditioned { background: #d0bfff; } .undefined { background: #a5d8ff; }
.out_of_contract { background: #e9ecef; } .not_applicable { background: #f8f9fa; color: #999; }
.legend span { display: inline-block; padding: 1px 8px; margin: 2px 4px 2px 0; font-size: 11px;
               border: 1px solid #ddd; }
"""
"""The page's stylesheet; ``report`` pages and comparison pages share it."""


def esc(value: Any) -> str:
    """Return ``value`` as text escaped for HTML content and attribute values."""
    return html.escape(str(value), quote=True)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text in {"inf", "-inf", "nan"}
    return True


def table(t: Table, *, level: int = 2) -> str:
    """Return ``t`` as an HTML table under a heading."""
    out = [f"<h{level}>{esc(t.title)}</h{level}>"]
    if t.note:
        out.append(f'<p class="note">{esc(t.note)}</p>')
    if not t.rows:
        out.append("<p><em>None.</em></p>")
        return "\n".join(out)
    out.append("<table>")
    out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.headers) + "</tr>")
    for n, row in enumerate(t.rows):
        status = t.status[n] if n < len(t.status) else ""
        attr = ' class="fail"' if status == "fail" else ""
        cells = "".join(
            f'<td class="num">{esc(c)}</td>' if _numeric(c) else f"<td>{esc(c)}</td>" for c in row
        )
        out.append(f"<tr{attr}>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


def figure(name: str, png: bytes) -> str:
    """Return a figure embedding ``png`` as a data URI, with its caption."""
    data = base64.b64encode(png).decode("ascii")
    caption = content.PLOT_CAPTIONS.get(name, name)
    return (
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def failures_section(failures: Sequence[Mapping[str, Any]]) -> str:
    """Return the findings' details, each with its minimal case, message and replay command."""
    out = ["<h2>Finding details</h2>"]
    if not failures:
        out.append("<p><em>None.</em></p>")
    for n, failure in enumerate(failures[: content.FAILURES_SHOWN], start=1):
        out.append(
            f'<details class="finding" open><summary>{n}. '
            f"{esc(content.failure_title(failure))}</summary>"
        )
        if failure.get("case"):
            out.append(f"<p>Case: <code>{esc(failure['case'])}</code></p>")
        if failure.get("replay"):
            out.append(f'<p>Replay:</p><pre class="replay">{esc(failure["replay"])}</pre>')
        else:
            out.append(f"<p>{esc(content.NO_REPLAY)}</p>")
        out.append(
            f"<details><summary>Message</summary><pre>"
            f"{esc(failure.get('message') or '(no message)')}</pre></details>"
        )
        out.append("</details>")
    if len(failures) > content.FAILURES_SHOWN:
        more = len(failures) - content.FAILURES_SHOWN
        out.append(f"<p><em>{more} more failures are listed in run.json.</em></p>")
    return "\n".join(out)


def page(title: str, body: Sequence[str]) -> str:
    """Return a complete HTML document around ``body`` (already escaped HTML fragments)."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def verdict_map(vmap: VerdictMap) -> str:
    """Return one family's verdict map: rows kernel and dtype, a coloured cell per tensor."""
    out = [
        f"<h3>{esc(vmap.family)}</h3>",
        '<table class="map"><tr><th>kernel</th><th>dtype</th>'
        + "".join(f"<th>{esc(t)}</th>" for t in vmap.tensors)
        + "</tr>",
    ]
    for kernel, dtype, cells in vmap.rows:
        row = [f"<td>{esc(kernel)}</td><td>{esc(dtype)}</td>"]
        for tensor, cell in zip(vmap.tensors, cells, strict=True):
            badge = ", ".join(
                f"{n} {k.replace('_', '-')}" for k, n in sorted(cell.undecided.items())
            )
            tip = f"{kernel} {dtype} {tensor}: {cell.kind.replace('_', ' ')}"
            if cell.r is not None:
                tip += f"; worst r {cell.text()} over {cell.cases} cases"
            extra = f"<small>{esc(badge)}</small>" if badge and cell.r is not None else ""
            row.append(
                f'<td class="cell {esc(cell.kind)}" data-kind="{esc(cell.kind)}" '
                f'title="{esc(tip)}">{esc(cell.text())}{extra}</td>'
            )
        out.append("<tr>" + "".join(row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def map_legend() -> str:
    """The colours of the verdict map."""
    items = [(name, text) for name, _, text in BANDS] + list(STATUS_LEGEND.items())
    spans = "".join(
        f'<span class="{esc(kind)}">{esc(kind.replace("_", " "))}: {esc(text)}</span>'
        for kind, text in items
    )
    return f'<p class="legend">{spans}</p>'


def render_html(document: Mapping[str, Any], plots: Mapping[str, bytes] | None = None) -> str:
    """Return the self-contained HTML report of a run document.

    The page answers first (verdict, findings, the verdict map), then shows the evidence
    (kernels side by side, plots), then the tables.

    Args:
        document: A validated run document.
        plots: PNG bytes by file name (from `linattn_verify.reporting.plots.render_plots`).
            Default: `None` (no plots).

    Returns:
        The HTML text.
    """
    ok = document["totals"]["ok"]
    body = [
        "<h1>linattn-verify accuracy report</h1>",
        f'<p class="headline {"passed" if ok else "verdict-failed"}" id="verdict">'
        f"{esc(content.headline(document))}</p>",
    ]
    warning = content.incomplete_warning(document)
    if warning:
        body.append(f'<p class="warning">{esc(warning)}</p>')
    maps = verdict_maps(document)
    glance = content.glance(document, maps)
    if glance:
        body.append('<ul class="glance">' + "".join(f"<li>{esc(g)}</li>" for g in glance) + "</ul>")
    if document["failures"]:
        body.append(table(content.findings_table(document)))
    if maps:
        body += [
            '<h2 id="map">Verdict map</h2>',
            '<p class="note">Worst r = |error| / bound of each tensor over the cases, by kernel '
            "and dtype; a case fails past 2. Hover a cell for its counts; a small line counts "
            "the cases that decided nothing.</p>",
            *(verdict_map(m) for m in maps),
            map_legend(),
        ]
    if document["failures"]:
        body.append(failures_section(document["failures"]))
    pairs = content.side_by_side_tables(document)
    if pairs:
        body.append('<h2 id="side-by-side">Kernels side by side</h2>')
        for summary, per_case in pairs:
            body += [table(summary, level=3), "<details><summary>Per case</summary>"]
            body += [table(per_case, level=4), "</details>"]
    body.append('<h2 id="plots">Plots</h2>')
    body += [figure(name, png) for name, png in (plots or {}).items()]
    if not plots:
        body.append("<p><em>No scored cases to plot.</em></p>")
    body += [
        table(content.distributions_table(document)),
        table(content.verdicts_table(document)),
        table(content.worst_cases_table(document)),
        table(content.kernels_table(document)),
        table(content.recipes_table(document)),
        table(content.environment_table(document)),
    ]
    return page("linattn-verify accuracy report", body)
