# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A drift measurement as files: ``drift.json``, ``drift.md`` and ``drift.png``.

Everything is rendered from the JSON document (`drift_document`), so a saved ``drift.json`` is
enough to draw the plot and the table again. Non-finite numbers are stored as `None` (the
point's ``finite`` flag says which tensor was not finite).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from linattn_verify.drift import DriftPoint, DriftResult, growth_exponent
from linattn_verify.results import FAIL_THRESHOLD

SCHEMA = "linattn-verify/drift-v1"
"""The ``schema`` of a drift document."""

SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
DPI = 80


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def drift_document(
    result: DriftResult,
    *,
    arguments: dict[str, Any],
    environment: dict[str, Any],
    recipes: dict[str, str],
) -> dict[str, Any]:
    """The JSON document of ``result`` (points, series summaries, failures, where it stopped).

    Args:
        result: What `linattn_verify.drift.measure_drift` returned.
        arguments: The command's arguments, as given.
        environment: `linattn_verify._device.environment`'s.
        recipes: The declared recipe of each variant, by ``"<dtype>/<state dtype>"``.
    """
    points = [_point_json(p) for p in result.points]
    series = []
    for dtype, state in _series_keys(result.points):
        mine = [p for p in result.points if (p.dtype, p.state_dtype) == (dtype, state)]
        last = mine[-1]
        tensors = {
            name: {
                "max_err": _num(t.max_err),
                "max_bound": _num(t.max_bound),
                "rel_err": _num(t.rel_err),
                "rel_bound": _num(t.rel_bound),
                "max_r": _num(max(p.tensors[name].max_r for p in mine)),
                "growth_err": growth_exponent(mine, name),
                "growth_bound": growth_exponent(mine, name, "max_bound"),
            }
            for name, t in last.tensors.items()
        }
        series.append(
            {"dtype": dtype, "state_dtype": state, "largest_T": last.T, "tensors": tensors}
        )
    failures = [
        {
            "dtype": p.dtype,
            "state_dtype": p.state_dtype,
            "T": p.T,
            "tensor": n,
            "max_r": _num(t.max_r),
        }
        for p in result.points
        for n, t in p.tensors.items()
        if t.max_r > FAIL_THRESHOLD or not t.finite
    ]
    return {
        "schema": SCHEMA,
        "command": "drift",
        "kernel": result.kernel,
        "gate": result.gate,
        "recipes": recipes,
        "arguments": arguments,
        "environment": environment,
        "settings": {
            k: list(v) if isinstance(v, tuple) else v for k, v in asdict(result.settings).items()
        },
        "stopped": result.stopped,
        "reason": result.reason,
        "reached_T": result.reached_T,
        "seconds": result.seconds,
        "points": points,
        "series": series,
        "failures": failures,
        "ok": not failures,
    }


def _series_keys(points: list[DriftPoint]) -> list[tuple[str, str]]:
    keys: list[tuple[str, str]] = []
    for p in points:
        if (p.dtype, p.state_dtype) not in keys:
            keys.append((p.dtype, p.state_dtype))
    return keys


def _point_json(p: DriftPoint) -> dict[str, Any]:
    return {
        "dtype": p.dtype,
        "state_dtype": p.state_dtype,
        "T": p.T,
        "kernel_seconds": p.kernel_seconds,
        "oracle_seconds": p.oracle_seconds,
        "failed": p.failed,
        "tensors": {
            name: {k: (_num(v) if isinstance(v, float) else v) for k, v in asdict(t).items()}
            for name, t in p.tensors.items()
        },
    }


def write_drift(out: Path, document: dict[str, Any]) -> dict[str, Path]:
    """Write ``drift.json``, ``drift.md`` and ``drift.png`` under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "drift.json", "md": out / "drift.md", "png": out / "drift.png"}
    paths["json"].write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    paths["md"].write_text(drift_markdown(document))
    paths["png"].write_bytes(drift_plot(document))
    return paths


def _label(row: dict[str, Any]) -> str:
    dtype, state = row["dtype"], row["state_dtype"]
    return f"{SHORT.get(dtype, dtype)} in, {SHORT.get(state, state)} state"


def _sci(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _slope(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The terminal summary: per series and tensor, error, bound and growth at the largest T."""
    lines = [
        f"{'dtype / state':24s} {'tensor':12s} {'T':>6s} {'max err':>9s} {'bound':>9s} "
        f"{'rel err':>9s} {'max r':>7s} {'err ~ T^':>8s} {'B ~ T^':>7s}"
    ]
    for row in document["series"]:
        for name, t in row["tensors"].items():
            r = t["max_r"]
            lines.append(
                f"{_label(row):24s} {name:12s} {row['largest_T']:>6d} {_sci(t['max_err']):>9s} "
                f"{_sci(t['max_bound']):>9s} {_sci(t['rel_err']):>9s} "
                f"{'inf' if r is None else f'{r:.3f}':>7s} {_slope(t['growth_err']):>8s} "
                f"{_slope(t['growth_bound']):>7s}"
            )
    return lines


def _fail_mark(r: float | None) -> str:
    return " FAIL" if r is None or r > FAIL_THRESHOLD else ""


def drift_markdown(document: dict[str, Any]) -> str:
    """A short Markdown report: what was measured, where it stopped, one row per point."""
    s = document["settings"]
    head = [
        f"# Drift of `{document['kernel']}`",
        "",
        f"B={s['batch']} H={s['heads']} K={s['head_dim']} V={s['value_dim']}, gate "
        f"{document['gate']}, seed {s['seed']}; T from {s['start_T']} to {s['max_T']}, budget "
        f"{s['budget']:g} s. Reached T = {document['reached_T']} in {document['seconds']:.0f} s: "
        f"{document['reason']}.",
        "",
        "err = max |x̂ - x| against the float64 oracle, B = max bound of the declared recipe, "
        "rel = relative to max |x|, r = max err/B per element (FAIL above "
        f"{FAIL_THRESHOLD:g}), growth = slope of log err against log T.",
        "",
        "| dtype / state | tensor | T | err | B | rel err | rel B | r |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for p in document["points"]:
        for name, t in p["tensors"].items():
            r = t["max_r"]
            rows.append(
                f"| {_label(p)} | {name} | {p['T']} | {_sci(t['max_err'])} | "
                f"{_sci(t['max_bound'])} | {_sci(t['rel_err'])} | {_sci(t['rel_bound'])} | "
                f"{'inf' if r is None else f'{r:.3f}'}{_fail_mark(r)} |"
            )
    growth = ["", "| dtype / state | tensor | err ~ T^ | B ~ T^ |", "|---|---|---:|---:|"]
    for row in document["series"]:
        for name, t in row["tensors"].items():
            growth.append(
                f"| {_label(row)} | {name} | {_slope(t['growth_err'])} | "
                f"{_slope(t['growth_bound'])} |"
            )
    return "\n".join([*head, *rows, *growth, ""])


def drift_plot(document: dict[str, Any]) -> bytes:
    """Error (solid) and bound (dashed) against T, log-log, one panel per tensor, as PNG.

    One colour per (dtype, state dtype); a red cross marks a point whose r exceeds 2.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tensors = list(dict.fromkeys(n for p in document["points"] for n in p["tensors"]))
    figure = Figure(figsize=(4.6 * max(len(tensors), 1) + 0.6, 4.4))
    axes = figure.subplots(1, max(len(tensors), 1), squeeze=False)[0]
    keys = [(r["dtype"], r["state_dtype"]) for r in document["series"]]
    for ax, name in zip(axes, tensors, strict=False):
        for n, key in enumerate(keys):
            color = SERIES_COLORS[n % len(SERIES_COLORS)]
            mine = [p for p in document["points"] if (p["dtype"], p["state_dtype"]) == key]
            label = _label({"dtype": key[0], "state_dtype": key[1]})
            pairs = [(p["T"], p["tensors"][name]) for p in mine if name in p["tensors"]]
            err = [(T, t["max_err"]) for T, t in pairs if t["max_err"]]
            bound = [(T, t["max_bound"]) for T, t in pairs if t["max_bound"]]
            if err:
                ax.plot(
                    *zip(*err, strict=True),
                    "o-",
                    color=color,
                    ms=3,
                    lw=1.2,
                    label=f"{label}: error",
                )
            if bound:
                ax.plot(
                    *zip(*bound, strict=True), "--", color=color, lw=1.0, label=f"{label}: bound"
                )
            bad = [
                (T, t["max_err"] or math.inf)
                for T, t in pairs
                if t["max_r"] is None or t["max_r"] > FAIL_THRESHOLD
            ]
            if bad:
                ax.plot(*zip(*bad, strict=True), "x", color="#d62728", ms=8, mew=2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name}: max |error| (solid) and bound (dashed)", fontsize=9)
        ax.set_xlabel("T (tokens)", fontsize=8)
        ax.set_ylabel("absolute error", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(which="both", labelsize=7)
        ax.xaxis.set_major_formatter(_token_formatter())
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        figure.legend(
            handles,
            labels,
            loc="lower center",
            ncols=min(4, len(handles)),
            fontsize=7,
            frameon=False,
        )
    rows = math.ceil(len(handles) / 4) if handles else 0
    figure.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=0.16 + 0.045 * rows, wspace=0.25)
    figure.suptitle(
        f"drift of {document['kernel']} (gate {document['gate']}): reached T = "
        f"{document['reached_T']}; {document['reason']}",
        fontsize=9,
    )
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _token_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    def label(value: float, position: Any) -> str:
        n = round(value)
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:d}"

    return FuncFormatter(label)


__all__ = [
    "SCHEMA",
    "drift_document",
    "drift_markdown",
    "drift_plot",
    "summary_lines",
    "write_drift",
]
