# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The report's plots, drawn with matplotlib's Agg canvas (no display, no pyplot state) as PNG.

- ``error_vs_T.png``: each case's worst r against T, one panel per dtype (rows) and form
  (columns), with the running maximum: the headroom left under the bound as T grows.
- ``rho_vs_T.png``: the same for ρ = err/(u·M), the error growth itself in effective roundings,
  with a √T guide (docs/error-model.md §7: ρ is about √c, and c grows with T).
- ``histograms.png``: the distribution of each case's worst r per dtype, one curve per form.
- ``forms.png``: parallel, chunked and recurrent side by side, per dtype and tensor.
- ``side_by_side.png``: kernels of one family on the same cases (`reporting.side_by_side`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from linattn_verify.reporting.side_by_side import SideBySide, side_by_side
from linattn_verify.reporting.summary import TENSOR_ORDER, cases_of, oracle_comparisons
from linattn_verify.results import CaseRecord, worst_of
from linattn_verify.typing import DTYPE_NAMES, FORMS

FORM_COLORS = {"parallel": "#1f77b4", "chunk": "#ff7f0e", "recurrent": "#2ca02c"}
KERNEL_COLORS = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
R_FLOOR, RHO_FLOOR, ERROR_FLOOR, CEILING = 1e-4, 1e-2, 1e-12, 1e8
"""Scores are drawn clamped to [floor, CEILING], as triangles where clamped: an exact result
(score 0) has no logarithm, a failure can score inf."""
RHO_SATURATED = 2.0**22
"""ρ at or above this means err ~ M: on a case that passes (r <= 2) only values in the underflow
range do that, where ρ (which has no underflow term, unlike the bound) carries no information.
The ρ plot leaves such cases out and says how many."""
DPI = 80


@dataclass(frozen=True)
class _Point:
    kernel: str
    form: str
    dtype: str
    T: int
    r: float
    rho: float
    tensors: Mapping[str, float]


def _label(text: str, limit: int = 40) -> str:
    # Kernel-supplied text: a '$' would start matplotlib mathtext.
    short = text if len(text) <= limit else text[: limit - 1] + "…"
    return short.replace("$", r"\$")


def _raw(value: float) -> float:
    return math.inf if math.isnan(value) else value


def _clamp(value: float, floor: float = R_FLOOR) -> float:
    return min(max(value, floor), CEILING)


def _points(cases: Sequence[CaseRecord]) -> list[_Point]:
    """One point per case compared with the oracle: its worst oracle comparison's score.

    Pairwise and bitwise comparisons are left out: their scores are not r = err/B.
    """
    points = []
    for record in cases:
        compared = oracle_comparisons(record)
        worst = worst_of(compared)
        if record.status == "not_applicable" or worst is None:
            continue
        points.append(
            _Point(
                kernel=record.kernel,
                form=record.form or "unknown",
                dtype=record.dtype,
                T=record.T,
                r=_raw(worst.deciding),
                rho=max(
                    (_raw(c.scores.rho) for c in compared if c.scores.rho is not None), default=0.0
                ),
                tensors={c.tensor: _raw(c.scores.r) for c in compared},
            )
        )
    return points


def _ordered(values: set[str], order: Sequence[str]) -> list[str]:
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def _png(figure: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    # No "Software" entry: the PNG bytes then depend on the data only, not on the versions.
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _grid(
    rows: int, cols: int, width: float, height: float, *, bottom: float = 0.5
) -> tuple[Any, list[list[Any]]]:
    """A figure of ``rows`` x ``cols`` panels of ``width`` x ``height`` inches.

    The margins are fixed (in inches; ``bottom`` leaves room for x labels and a legend):
    matplotlib's automatic layouts cost more than the drawing itself.
    """
    from matplotlib.figure import Figure

    left, right, top, gap_w, gap_h = 0.85, 0.2, 0.55, 0.65, 0.5
    total_w = left + right + cols * width + (cols - 1) * gap_w
    total_h = top + bottom + rows * height + (rows - 1) * gap_h
    figure = Figure(figsize=(total_w, total_h))
    axes = figure.subplots(
        rows,
        cols,
        squeeze=False,
        gridspec_kw={
            "left": left / total_w,
            "right": 1 - right / total_w,
            "bottom": bottom / total_h,
            "top": 1 - top / total_h,
            "wspace": gap_w / width,
            "hspace": gap_h / height,
        },
    )
    return figure, [list(row) for row in axes]


def _versus_T(points: list[_Point], *, rho: bool) -> bytes:
    dtypes = _ordered({p.dtype for p in points}, DTYPE_NAMES)
    forms = _ordered({p.form for p in points}, FORMS)
    kernels = sorted({p.kernel for p in points})
    colors = _kernel_colors(points)
    floor = RHO_FLOOR if rho else R_FLOOR
    legend_rows = math.ceil(len(kernels) / 4)
    figure, axes = _grid(len(dtypes), len(forms), 2.8, 2.0, bottom=0.5 + 0.22 * legend_rows)
    for i, dtype in enumerate(dtypes):
        for j, form in enumerate(forms):
            ax = axes[i][j]
            panel = [p for p in points if p.dtype == dtype and p.form == form]
            hidden = 0
            for kernel in kernels:
                mine = sorted((p.T, p.rho if rho else p.r) for p in panel if p.kernel == kernel)
                if rho:
                    hidden += sum(y >= RHO_SATURATED for _, y in mine)
                    mine = [(t, y) for t, y in mine if y < RHO_SATURATED]
                if mine:
                    _series(ax, mine, colors[kernel], _label(kernel), floor)
            if hidden:
                ax.text(
                    0.98,
                    0.03,
                    f"{hidden} case{'s' if hidden > 1 else ''} with underflowing values not shown",
                    transform=ax.transAxes,
                    ha="right",
                    fontsize=6,
                    color="0.3",
                )
            if rho and panel and dtype in ("float32", "float64"):
                _sqrt_guide(ax, [(p.T, p.rho) for p in panel if p.rho < RHO_SATURATED])
            elif not rho and panel:
                ax.axhline(1.0, color="0.4", linestyle=":", linewidth=0.8)
                ax.axhline(2.0, color="#d62728", linestyle="--", linewidth=0.8)
            _log_axis(ax)
            ax.set_title(f"{form} · {dtype}", fontsize=9)
            ax.tick_params(which="both", labelsize=7)
            if i == len(dtypes) - 1:
                ax.set_xlabel("T", fontsize=8)
            if j == 0:
                ax.set_ylabel("max ρ = err/(u·M)" if rho else "worst r = err/B", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes:
        for ax in row:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                if label not in labels:
                    handles.append(handle)
                    labels.append(label)
    if handles:
        figure.legend(handles, labels, loc="lower center", ncols=4, fontsize=8, frameon=False)
    clamped = f"▼ below {floor:g} (exact or nearly), ▲ above {CEILING:g}"
    title = (
        f"Error growth: max ρ vs T (dotted: ∝ √T, fp32); {clamped}"
        if rho
        else f"Worst r vs T (dotted: bound r = 1; dashed: FAIL r = 2); {clamped}"
    )
    figure.suptitle(title, fontsize=10)
    return _png(figure)


def _series(ax: Any, pairs: list[tuple[int, float]], color: str, label: str, floor: float) -> None:
    """Scatter (T, score) pairs with their running maximum; clamped points as triangles."""
    ts = [t for t, _ in pairs]
    ys = [_clamp(y, floor) for _, y in pairs]
    for marker in ("o", "v", "^"):
        chosen = [
            (t, c)
            for t, c, (_, y) in zip(ts, ys, pairs, strict=True)
            if marker == ("v" if y < floor else "^" if y > CEILING else "o")
        ]
        if chosen:
            ax.scatter(
                [t for t, _ in chosen],
                [c for _, c in chosen],
                s=12 if marker == "o" else 16,
                marker=marker,
                color=color,
                alpha=0.6,
                label=label if marker == "o" else None,
            )
    running = [max(ys[: n + 1]) for n in range(len(ys))]
    ax.step(ts, running, where="post", color=color, linewidth=1.0)


def _log_axis(ax: Any, which: str = "y") -> None:
    """Use a log scale with short labels (0.5, 2, 1e+04 rather than 2×10^0).

    Minor ticks are labelled only when the axis spans little more than a decade: at 2 and 5, or
    all of them under half a decade.
    """
    from matplotlib.ticker import FuncFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")

    def minor(value: float, position: Any) -> str:
        low, high = sorted(axis.get_view_interval())
        decades = math.log10(high / low) if low > 0 else math.inf
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
        if decades < 0.5 or (decades < 1.3 and mantissa in (2, 5)):
            return f"{value:.2g}"
        return ""

    axis.set_major_formatter(FuncFormatter(lambda value, position: f"{value:.3g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def _kernel_colors(points: list[_Point]) -> dict[str, str]:
    """The first kernel of each form gets the form's colour (as in the other plots)."""
    colors: dict[str, str] = {}
    spare = iter(KERNEL_COLORS * (1 + len(points) // len(KERNEL_COLORS)))
    for kernel, form in sorted({(p.kernel, p.form) for p in points}):
        if kernel in colors:
            continue
        taken = form in FORM_COLORS and FORM_COLORS[form] not in colors.values()
        colors[kernel] = FORM_COLORS[form] if taken else next(spare)
    return colors


def _sqrt_guide(ax: Any, pairs: list[tuple[int, float]]) -> None:
    if not pairs:  # every score in the panel saturated (or none): nothing to anchor a guide to
        return
    ts = sorted(t for t, _ in pairs)
    ys = sorted(y for _, y in pairs)
    t_mid, y_mid = max(ts[len(ts) // 2], 1), ys[len(ys) // 2]
    grid = sorted({max(t, 1) for t in ts})
    ax.plot(grid, [y_mid * math.sqrt(t / t_mid) for t in grid], ":", color="0.4", linewidth=0.9)


def _histograms(points: list[_Point]) -> bytes:
    dtypes = _ordered({p.dtype for p in points}, DTYPE_NAMES)
    forms = _ordered({p.form for p in points}, FORMS)
    figure, axes = _grid(1, len(dtypes), 2.8, 2.2)
    low = math.floor(math.log10(min(_clamp(p.r) for p in points)))
    high = math.ceil(math.log10(max(2.0, max(_clamp(p.r) for p in points)))) + 0.001
    edges = [10 ** (low + n * (high - low) / 30) for n in range(31)]
    for j, dtype in enumerate(dtypes):
        ax = axes[0][j]
        present = [f for f in forms if any(p.dtype == dtype and p.form == f for p in points)]
        # Bars of the forms side by side in each bin, so that equal counts stay visible.
        ax.hist(
            [[_clamp(p.r) for p in points if p.dtype == dtype and p.form == f] for f in present],
            bins=edges,
            histtype="bar",
            color=[FORM_COLORS.get(f, "0.3") for f in present],
            label=[_label(f) for f in present],
        )
        ax.axvline(1.0, color="0.4", linestyle=":", linewidth=0.8)
        ax.axvline(2.0, color="#d62728", linestyle="--", linewidth=0.8)
        _log_axis(ax, "x")
        ax.set_title(dtype, fontsize=9)
        ax.set_xlabel("worst r of a case", fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        if j == 0:
            ax.set_ylabel("cases", fontsize=8)
            ax.legend(fontsize=7)
    figure.suptitle("Score histograms (dotted: r = 1; dashed: FAIL, r = 2)", fontsize=10)
    return _png(figure)


def _forms(points: list[_Point]) -> bytes:
    dtypes = _ordered({p.dtype for p in points}, DTYPE_NAMES)
    forms = _ordered({p.form for p in points}, FORMS)
    tensors = _ordered({t for p in points for t in p.tensors}, TENSOR_ORDER)
    figure, axes = _grid(len(dtypes), 1, max(4.0, 0.45 * len(tensors) * len(forms)), 1.8)
    width = 0.8 / len(forms)
    for i, dtype in enumerate(dtypes):
        ax = axes[i][0]
        for f, form in enumerate(forms):
            data, positions = [], []
            for t, tensor in enumerate(tensors):
                values = [
                    _clamp(p.tensors[tensor])
                    for p in points
                    if p.dtype == dtype and p.form == form and tensor in p.tensors
                ]
                if values:
                    data.append(values)
                    positions.append(t - 0.4 + width * (f + 0.5))
            if not data:
                continue
            color = FORM_COLORS.get(form, "0.3")
            parts = ax.boxplot(
                data,
                positions=positions,
                widths=width * 0.85,
                patch_artist=True,
                showfliers=True,
                flierprops={"markersize": 2, "markeredgecolor": color},
                medianprops={"color": "black"},
            )
            for box in parts["boxes"]:
                box.set_facecolor(color)
                box.set_alpha(0.7)
            ax.plot([], [], "s", color=color, label=_label(form))
        ax.set_xticks(range(len(tensors)), [_label(t) for t in tensors], fontsize=8)
        ax.set_xlim(-0.6, len(tensors) - 0.4)
        _log_axis(ax)
        ax.axhline(2.0, color="#d62728", linestyle="--", linewidth=0.8)
        ax.set_ylabel(f"{dtype}: max r", fontsize=8)
        ax.tick_params(axis="y", which="both", labelsize=7)
        if i == 0:
            ax.legend(fontsize=7, ncols=len(forms))
    figure.suptitle("The forms side by side: max r per tensor over the cases", fontsize=10)
    return _png(figure)


def _side_by_side(groups: Sequence[SideBySide]) -> bytes:
    """One panel per family and dtype: each shared case a line across the kernels that ran it."""
    widest = max(len(g.kernels) for g in groups)
    figure, axes = _grid(len(groups), 1, max(4.0, 1.3 * widest), 2.0, bottom=1.1)
    for ax, group in zip((row[0] for row in axes), groups, strict=True):
        place = {k: i for i, k in enumerate(group.kernels)}
        for case in group.cases:
            ran = [k for k in group.kernels if k in case.scores]
            ax.plot(
                [place[k] for k in ran],
                [_clamp(_raw(case.accuracy(k)), ERROR_FLOOR) for k in ran],
                "-o",
                color="0.55",
                alpha=0.5,
                markersize=3,
                linewidth=0.8,
            )
        for summary in group.summaries:
            x = place[summary.kernel]
            median = summary.median if summary.median_error is None else summary.median_error
            ax.plot(
                [x - 0.25, x + 0.25], [_clamp(median, ERROR_FLOOR)] * 2, color="black", linewidth=2
            )
        ax.set_xticks(
            range(len(group.kernels)),
            [_label(k, 28) for k in group.kernels],
            fontsize=7,
            rotation=20,
            ha="right",
        )
        ax.set_xlim(-0.5, len(group.kernels) - 0.5)
        _log_axis(ax)
        ax.set_ylabel(f"{_label(group.family)} {group.dtype}: rel. error", fontsize=8)
        ax.tick_params(axis="y", which="both", labelsize=7)
    figure.suptitle(
        "Kernels on the same cases: max |error| / max |x| per case (lines), median (bars)",
        fontsize=10,
    )
    return _png(figure)


def render_plots(document: Mapping[str, Any]) -> dict[str, bytes]:
    """Draw the report's plots for a run document.

    Returns:
        PNG bytes by file name (``error_vs_T.png``, ``rho_vs_T.png``, ``histograms.png``,
        ``forms.png``, and ``side_by_side.png`` when kernels shared cases); empty when no case
        was scored.
    """
    points = _points(cases_of(document))
    if not points:
        return {}
    plots = {
        "error_vs_T.png": _versus_T(points, rho=False),
        "rho_vs_T.png": _versus_T(points, rho=True),
        "histograms.png": _histograms(points),
        "forms.png": _forms(points),
    }
    groups = side_by_side(document)
    if groups:
        plots["side_by_side.png"] = _side_by_side(groups)
    return plots
