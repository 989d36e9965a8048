# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Compare two runs (two kernel versions, CPU interpreter against GPU, ...) and flag regressions.

A regression is flagged when, for the same kernel, dtype and tensor,

- max r grew by `REGRESSION_FACTOR` (10x) or more while the declared precision recipe is
  unchanged, even if the kernel still passes (docs/error-model.md §7, "track headroom"); the
  same for max ρ. Scores below a floor (`R_FLOOR`, `RHO_FLOOR`) count as the floor, so noise in
  near-exact results is not flagged. With a changed recipe the bound changed, so a jump is
  reported but not flagged;
- or a property that held (or did not apply) in the baseline failed in the new run.

Only runs of like settings are compared this way: the command and what decides the cases drawn
(`CASE_SETTINGS`: examples, longest T, seed, gates, budget, Hypothesis profile). Where those
differ the cases differ, a 10x jump or a newly found failure says nothing about the kernel
changing, and nothing is flagged: the comparison names the settings that differ instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import html as html_render
from linattn_verify.reporting import markdown as md_render
from linattn_verify.reporting._v1 import as_current
from linattn_verify.reporting._values import format_score, score
from linattn_verify.reporting.content import Table
from linattn_verify.reporting.summary import verdicts_of

REGRESSION_FACTOR = 10.0
R_FLOOR = 1e-3
"""r below this counts as this (correct fp32 kernels sit near 0.03)."""
RHO_FLOOR = 1.0
"""ρ below one effective rounding counts as one."""
ABSENT = "absent"
"""How the comparison names a verdict a run does not have (the property was not tried there)."""

CASE_SETTINGS = ("command", "examples", "max_seq_len", "seed", "gates", "budget", "profile")
"""What decides the cases a run draws (``profile``: the Hypothesis profile). Kernels and dtypes
are not here: a run of fewer of them compares on the ones both have."""


@dataclass(frozen=True)
class ScoreChange:
    """Max r and max ρ of one kernel, dtype and tensor in both runs.

    Attributes:
        kernel: The kernel's name.
        dtype: The input dtype.
        tensor: The tensor (``o``, ``dq``, ...).
        before_r: Max r in the baseline, `None` when absent there.
        after_r: Max r in the new run, `None` when absent there.
        before_rho: Max ρ in the baseline.
        after_rho: Max ρ in the new run.
        recipe_changed: Whether the declared precision recipe for this dtype differs.
        notes: What changed, e.g. ``"max r x12"``.
        regression: Whether this row is flagged.
    """

    kernel: str
    dtype: str
    tensor: str
    before_r: float | None
    after_r: float | None
    before_rho: float | None
    after_rho: float | None
    recipe_changed: bool
    notes: tuple[str, ...]
    regression: bool


@dataclass(frozen=True)
class VerdictChange:
    """A property whose verdict differs between the runs.

    Attributes:
        kernel: The kernel's name.
        property: The property's name.
        before: Its status in the baseline (a `PropertyVerdict` status), `None` when absent.
        after: Its status in the new run, `None` when absent.
        regression: Whether it fails now and did not before.
    """

    kernel: str
    property: str
    before: str | None
    after: str | None
    regression: bool


@dataclass(frozen=True)
class RunComparison:
    """The result of `compare_runs`.

    Attributes:
        before_label: Name of the baseline run.
        after_label: Name of the new run.
        environments: Side by side: (field, baseline value, new value).
        scores: One row per kernel, dtype and tensor in either run.
        verdicts: The properties whose verdict changed.
        unlike: The `CASE_SETTINGS` that differ: (setting, baseline value, new value). Where
            any does, nothing is flagged.
    """

    before_label: str
    after_label: str
    environments: tuple[tuple[str, str, str], ...]
    scores: tuple[ScoreChange, ...]
    verdicts: tuple[VerdictChange, ...]
    unlike: tuple[tuple[str, str, str], ...] = ()

    @property
    def regressions(self) -> int:
        """How many rows (scores and verdicts) are flagged."""
        return sum(s.regression for s in self.scores) + sum(v.regression for v in self.verdicts)

    @property
    def regressed(self) -> bool:
        """Whether any regression was flagged."""
        return self.regressions > 0


def _jump(before: float | None, after: float | None, floor: float) -> float | None:
    if before is None or after is None:
        return None
    if math.isnan(after):
        return math.inf
    return after / max(before, floor) if not math.isnan(before) else None


def _maxima(document: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[Any, Any]]:
    return {
        (d["kernel"], d["dtype"], d["tensor"]): (score(d["r"]["max"]), score(d["rho"]["max"]))
        for d in document["distributions"]
    }


def _case_settings(document: Mapping[str, Any]) -> dict[str, str]:
    """The `CASE_SETTINGS` of a run document, as text (``-`` where it has none)."""
    arguments = document.get("arguments") or {}
    values = {name: arguments.get(name, "-") for name in CASE_SETTINGS}
    values["command"] = document.get("command", "-")
    values["profile"] = (document.get("environment") or {}).get("hypothesis_profile", "-")
    return {name: str(value) for name, value in values.items()}


def _recipes(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {k["name"]: k.get("recipes") or {} for k in document["kernels"]}


def _score_change(
    key: tuple[str, str, str],
    before: tuple[Any, Any] | None,
    after: tuple[Any, Any] | None,
    recipe_changed: bool,
) -> ScoreChange:
    b_r, b_rho = before or (None, None)
    a_r, a_rho = after or (None, None)
    notes, regression = [], False
    if before is None:
        notes.append("new in this run")
    elif after is None:
        notes.append("not in this run")
    for what, jump in (
        ("max r", _jump(b_r, a_r, R_FLOOR)),
        ("max ρ", _jump(b_rho, a_rho, RHO_FLOOR)),
    ):
        if jump is not None and jump >= REGRESSION_FACTOR:
            if recipe_changed:
                notes.append(f"{what} x{jump:.3g} (recipe changed: not flagged)")
            else:
                notes.append(f"{what} x{jump:.3g}")
                regression = True
    if recipe_changed and not any("recipe" in n for n in notes):
        notes.append("recipe changed")
    return ScoreChange(
        kernel=key[0],
        dtype=key[1],
        tensor=key[2],
        before_r=b_r,
        after_r=a_r,
        before_rho=b_rho,
        after_rho=a_rho,
        recipe_changed=recipe_changed,
        notes=tuple(notes),
        regression=regression,
    )


def compare_runs(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    before_label: str = "baseline",
    after_label: str = "new",
) -> RunComparison:
    """Compare a new run with a baseline and flag regressions (see the module docstring).

    Args:
        before: The baseline run document (`linattn_verify.reporting.load_run`, which reads a
            version 1 document as version 2).
        after: The new run document.
        before_label: Name of the baseline in the output. Default: `"baseline"`.
        after_label: Name of the new run in the output. Default: `"new"`.

    Returns:
        The `RunComparison`.

    Raises:
        InvalidArgument: if either document is not a valid run document (version 1 documents
            are upgraded first).
    """
    documents = []
    for name, document in (("before", before), ("after", after)):
        try:
            documents.append(as_current(document))
        except InvalidArgument as exc:
            raise InvalidArgument(f"Got an invalid {name} document: {exc}") from None
    before, after = documents
    b_settings, a_settings = _case_settings(before), _case_settings(after)
    unlike = tuple(
        (name, b_settings[name], a_settings[name])
        for name in CASE_SETTINGS
        if b_settings[name] != a_settings[name]
    )
    b_max, a_max = _maxima(before), _maxima(after)
    b_recipes, a_recipes = _recipes(before), _recipes(after)
    scores = []
    for key in sorted(b_max.keys() | a_max.keys()):
        kernel, dtype, _ = key
        changed = b_recipes.get(kernel, {}).get(dtype) != a_recipes.get(kernel, {}).get(dtype)
        both = key in b_max and key in a_max
        row = _score_change(key, b_max.get(key), a_max.get(key), changed and both)
        if unlike and row.regression:
            row = replace(row, regression=False, notes=(*row.notes, "settings differ: not flagged"))
        scores.append(row)
    b_verdicts = {(v.kernel, v.property): v.status for v in verdicts_of(before)}
    a_verdicts = {(v.kernel, v.property): v.status for v in verdicts_of(after)}
    verdicts = []
    for kernel, prop in sorted(b_verdicts.keys() | a_verdicts.keys()):
        b, a = b_verdicts.get((kernel, prop)), a_verdicts.get((kernel, prop))
        if a != b:
            verdicts.append(
                VerdictChange(
                    kernel, prop, before=b, after=a, regression=a == "failed" and not unlike
                )
            )
    fields = ("device", "interpreter", "torch", "triton", "linattn_verify", "seed")
    environments = tuple(
        (
            f,
            str(before["environment"].get(f, "-")),
            str(after["environment"].get(f, "-")),
        )
        for f in (*fields, "hypothesis_profile")
    )
    return RunComparison(
        before_label=before_label,
        after_label=after_label,
        environments=environments,
        scores=tuple(scores),
        verdicts=tuple(verdicts),
        unlike=unlike,
    )


def _headline(comparison: RunComparison) -> str:
    if comparison.unlike:
        differ = ", ".join(f"{name} {b} vs {a}" for name, b, a in comparison.unlike)
        return (
            f"Not like with like ({differ}): the runs drew different cases, so nothing is "
            f"flagged · {comparison.after_label} set beside {comparison.before_label}"
        )
    n = comparison.regressions
    verdict = f"{n} REGRESSION{'S' if n != 1 else ''} FLAGGED" if n else "No regression"
    return f"{verdict} · {comparison.after_label} compared with {comparison.before_label}"


def _ratio(before: float | None, after: float | None, floor: float) -> str:
    jump = _jump(before, after, floor)
    return "-" if jump is None else f"x{jump:.3g}"


def _tables(comparison: RunComparison) -> list[Table]:
    b, a = comparison.before_label, comparison.after_label
    env = Table("Environments", ["", b, a], [list(row) for row in comparison.environments])
    scores = Table(
        "Max scores per kernel, dtype and tensor",
        [
            "kernel",
            "dtype",
            "tensor",
            f"max r {b}",
            f"max r {a}",
            "r ratio",
            f"max ρ {b}",
            f"max ρ {a}",
            "ρ ratio",
            "flag",
            "notes",
        ],
        [
            [
                s.kernel,
                s.dtype,
                s.tensor,
                format_score(s.before_r),
                format_score(s.after_r),
                _ratio(s.before_r, s.after_r, R_FLOOR),
                format_score(s.before_rho),
                format_score(s.after_rho),
                _ratio(s.before_rho, s.after_rho, RHO_FLOOR),
                "REGRESSION" if s.regression else "",
                "; ".join(s.notes),
            ]
            for s in comparison.scores
        ],
        note=f"Flagged: max r or max ρ grew {REGRESSION_FACTOR:g}x or more on an unchanged "
        f"precision recipe (scores below r = {R_FLOOR:g}, ρ = {RHO_FLOOR:g} count as those).",
        status=["fail" if s.regression else "" for s in comparison.scores],
    )
    verdicts = Table(
        "Verdict changes",
        ["kernel", "property", b, a, "flag"],
        [
            [
                v.kernel,
                v.property,
                v.before or ABSENT,
                v.after or ABSENT,
                "REGRESSION" if v.regression else "",
            ]
            for v in comparison.verdicts
        ],
        status=["fail" if v.regression else "" for v in comparison.verdicts],
    )
    tables = [verdicts, scores, env]
    if comparison.unlike:
        differ = Table(
            "Settings that decide the cases, where they differ",
            ["setting", b, a],
            [list(row) for row in comparison.unlike],
        )
        tables.insert(0, differ)
    return tables


def render_comparison_markdown(comparison: RunComparison) -> str:
    """Return the comparison as Markdown (regressions marked ``REGRESSION``)."""
    if not isinstance(comparison, RunComparison):
        raise InvalidArgument(f"Expected a RunComparison but got comparison={comparison!r}.")
    parts = [
        "# linattn-verify run comparison",
        "",
        f"**{md_render.escape(_headline(comparison))}**",
        "",
    ]
    parts += [md_render.table(t) for t in _tables(comparison)]
    return "\n".join(parts).rstrip() + "\n"


def render_comparison_html(comparison: RunComparison) -> str:
    """Return the comparison as a self-contained HTML page (regressions highlighted)."""
    if not isinstance(comparison, RunComparison):
        raise InvalidArgument(f"Expected a RunComparison but got comparison={comparison!r}.")
    status = "verdict-failed" if comparison.regressed else "passed"
    body = [
        "<h1>linattn-verify run comparison</h1>",
        f'<p class="headline {status}">{html_render.esc(_headline(comparison))}</p>',
        *(html_render.table(t) for t in _tables(comparison)),
    ]
    return html_render.page("linattn-verify run comparison", body)
