# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recipe diagnosis: the smallest change to a kernel's declared recipe that explains a failure.

A bound failure means the kernel's error exceeds the bound of the precision recipe it declares
(docs/error-model.md §7). Either the kernel is wrong, or it rounds more than it declares: a cast
to fp16 the declaration leaves out, tensor-core accumulation, tf32 operands. `diagnose` tells the
two apart by rerunning the failed property with the recipe changed, in order of increasing
change, and reports the first change under which no bound comparison fails:

0. the declared recipe itself: if the failure does not come back, the kernel is nondeterministic;
1. one field at a time, ordered by the unit roundoff of the roundings the change adds or widens
   (`_Step.size`), smallest first: ``accumulation`` ieee -> mma; ``form`` -> unknown (`None`);
   ``decay_scan`` -> each other scan (with decay); ``naive_elu1`` (elu1 features); ``division``
   rn -> full, and (normalized) -> ``reciprocal`` in fp32, then in the input dtype (16-bit
   inputs); ``dot_precision`` ieee -> tf32x3 -> tf32 and ``dots_on_path`` + 1, + 2 (fp32
   inputs, dots on the path); ``casts_on_path`` + 1 ... + `MAX_EXTRA_CASTS` (or, with no
   intermediate dtype, 1 ... `MAX_EXTRA_CASTS` casts to the input dtype, or to float16 and to
   bfloat16 for fp32 inputs); ``eps_dtype`` -> float16, bfloat16 (normalized, eps > 0);
2. every loosening at its loosest at once (``decay_scan`` and ``eps_dtype`` are alternatives,
   not loosenings, and stay as declared); if that explains the failure, each change is then
   brought back toward the declaration as far as the failure stays explained, and the rest are
   named; if not, no recipe explains the error: the kernel, not its declaration, is wrong.

A change "explains" the failure when the rerun has no failed bound comparison (against the oracle
or between two runs) and otherwise fails exactly as the original result did (the same bitwise
comparisons, the same reason): a rerun in which the kernel raised explains nothing. The kernel's
output does not depend on its recipe; every rerun runs the kernel again only because a property
is opaque: it builds its bounds inside, from ``kernel.precision_recipe``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.kernel import Kernel
from linattn_verify.recipe import UNIT_ROUNDOFF, PrecisionRecipe
from linattn_verify.results import Comparison, PropertyResult
from linattn_verify.strategies import ProblemSpec
from linattn_verify.typing import dtype_name, torch_dtype

DIAGNOSIS_SECONDS = 60.0
"""Default wall-clock budget of one diagnosis, in seconds."""

MAX_EXTRA_CASTS = 4
"""The most roundings to the intermediate dtype a diagnosis adds to the declared ones."""

PropertyFn = Callable[[ProblemSpec, Kernel], PropertyResult]

_U32 = UNIT_ROUNDOFF["float32"]
_TF32X3, _TF32 = 2.0**-22, 2.0**-10
_NO_FORM = "no form (leave out `--form`)"
_ACCUMULATIONS = {"ieee": "fp32", "mma": "tensor-core (mma)"}
_SCANS = {
    "chunk_local": "chunk-local cumulative sums",
    "global": "whole-sequence cumulative sums",
    "per_step": "products of per-step factors exp(g)",
}


@dataclass(frozen=True)
class _Step:
    """One change to the declared recipe.

    Attributes:
        axis: What it changes; steps of one axis form a ladder, smallest first.
        changes: The recipe fields it sets.
        size: The unit roundoff it adds to one rounding it touches (the order of stage 1).
        what: What the kernel would do, in words (``"3 roundings to float16 on the path"``).
        declared: What the recipe declares instead, in words.
        how: How to declare it: a ``linattn-verify check`` flag, or a recipe field.
        loosening: Whether it widens the bound (else it is an alternative declaration, tried
            alone only).
    """

    axis: str
    changes: Mapping[str, Any]
    size: float
    what: str
    declared: str
    how: str
    loosening: bool = True

    @property
    def label(self) -> str:
        """The change as recipe fields, for the list of what was tried."""
        return ", ".join(f"{k}={v!r}" for k, v in self.changes.items())


def _field(name: str, value: Any) -> str:
    return f"`{name}={value!r}` in the recipe"


def _casts(n: int) -> str:
    return f"{n} rounding{'s' if n != 1 else ''}"


def _intermediate_ladders(declared: PrecisionRecipe, dtype: torch.dtype) -> list[list[_Step]]:
    """More roundings to the intermediate dtype (or some, when none is declared)."""
    name = dtype_name(dtype)
    if declared.intermediate_dtype is not None:
        low = name if declared.intermediate_dtype == "input" else declared.intermediate_dtype
        u, c = declared.u_low(dtype), declared.casts_on_path
        ladder = [
            _Step(
                "casts",
                {"casts_on_path": c + n},
                n * u,
                f"{_casts(c + n)} to {low} on the path",
                str(c),
                f"`--casts {c + n}`",
            )
            for n in range(1, MAX_EXTRA_CASTS + 1)
        ]
        return [ladder]
    # With none declared: the input dtype for 16-bit inputs; fp32 kernels may round to either.
    targets = ["input"] if name in ("float16", "bfloat16") else ["float16", "bfloat16"]
    ladders = []
    for target in targets:
        low = name if target == "input" else target
        ladders.append(
            [
                _Step(
                    f"intermediate:{target}",
                    {"intermediate_dtype": target, "casts_on_path": n},
                    n * UNIT_ROUNDOFF[low],
                    f"{_casts(n)} to {low} on the path",
                    "none",
                    f"`--intermediate-dtype {target} --casts {n}`",
                )
                for n in range(1, MAX_EXTRA_CASTS + 1)
            ]
        )
    return ladders


def _dot_ladders(declared: PrecisionRecipe, dtype: torch.dtype) -> list[list[_Step]]:
    """tf32 operands, and more products on the path: only fp32 operands are rounded so."""
    if dtype != torch.float32 or declared.dots_on_path == 0:
        return []
    dots, u_op = declared.dots_on_path, declared.u_op
    order = ("ieee", "tf32x3", "tf32")
    units = {"ieee": 0.0, "tf32x3": _TF32X3, "tf32": _TF32}
    precision = [
        _Step(
            "dot_precision",
            {"dot_precision": p},
            dots * 2 * (units[p] - u_op),
            f"`tl.dot` operands in {p}",
            declared.dot_precision,
            f"`--dot-precision {p}`",
        )
        for p in order[order.index(declared.dot_precision) + 1 :]
    ]
    more = [
        _Step(
            "dots_on_path",
            {"dots_on_path": dots + n},
            n * 2 * u_op,
            f"{dots + n} `tl.dot` products on the path",
            str(dots),
            _field("dots_on_path", dots + n),
        )
        for n in (1, 2)
        if u_op > 0
    ]
    return [ladder for ladder in (precision, more) if ladder]


def _set(
    name: str, value: Any, size: float, what: str, declared: Any, *, alternative: bool = False
) -> _Step:
    """A step setting one recipe field, declared as that field in the recipe."""
    axis = f"{name}:{value}" if alternative else name
    return _Step(
        axis, {name: value}, size, what, str(declared), _field(name, value), not alternative
    )


def _reciprocal_ladder(declared: PrecisionRecipe, dtype: torch.dtype) -> list[_Step]:
    """Division as 1/Z then a multiply: in fp32, then (16-bit inputs) in the input dtype."""
    where = ["float32"] + (["input"] if dtype_name(dtype) in ("float16", "bfloat16") else [])
    return [
        _Step(
            "reciprocal",
            {"division": "reciprocal", "division_dtype": w},
            replace(declared, division="reciprocal", division_dtype=w).u_div(dtype),
            f"a reciprocal 1/Z then a multiply, in {dtype_name(dtype) if w == 'input' else w}",
            f"{declared.division} division in {declared.division_dtype}",
            f"`--division reciprocal --division-dtype {w}`",
        )
        for w in where
    ]


def _ladders(
    declared: PrecisionRecipe, spec: ProblemSpec, kernel: Kernel, dtype: torch.dtype
) -> dict[str, list[_Step]]:
    """Every change a diagnosis tries, by axis, each ladder smallest first."""
    d = declared
    accumulations = ("float64", "ieee", "mma")
    # Sums in the input dtype already round at least as much as any other accumulation.
    wider = accumulations.index(d.accumulation) + 1 if d.accumulation in accumulations else 3
    axes = [
        [
            _set("accumulation", a, _U32, f"{_ACCUMULATIONS[a]} accumulation", d.accumulation)
            for a in accumulations[wider:]
        ]
    ]
    if d.form is not None:
        # check has no flag value for an unknown form: it is the default.
        unknown = "the rounding counts of an unknown form (all three forms' counts)"
        axes.append([replace(_set("form", None, _U32, unknown, d.form), how=_NO_FORM)])
    if spec.decay != "none" or kernel.implied_decay is not None:
        axes += [
            [
                _set(
                    "decay_scan",
                    scan,
                    _U32,
                    f"decay weights from {words}",
                    d.decay_scan,
                    alternative=True,
                )
            ]
            for scan, words in _SCANS.items()
            if scan != d.decay_scan
        ]
    if spec.feature_map == "elu1" and not d.naive_elu1:
        naive = "elu1 evaluated as (exp(x) - 1) + 1"
        axes.append([_set("naive_elu1", True, 2 * _U32, naive, "elu1 without that cancellation")])
    if d.division == "rn":
        full = "a full-range fp32 division (div.full.f32, 2 ulp)"
        axes.append([_set("division", "full", 3 * _U32, full, d.division)])
    if spec.normalize and d.division != "reciprocal":
        axes.append(_reciprocal_ladder(d, dtype))
    axes += _dot_ladders(d, dtype)
    axes += _intermediate_ladders(d, dtype)
    if spec.normalize and spec.eps > 0:
        axes += [
            [
                _set(
                    "eps_dtype",
                    low,
                    UNIT_ROUNDOFF[low],
                    f"eps added in {low}",
                    d.eps_dtype,
                    alternative=True,
                )
            ]
            for low in ("float16", "bfloat16")
            if low != d.eps_dtype
        ]
    return {ladder[0].axis: ladder for ladder in axes if ladder}


def _bound_failures(result: PropertyResult) -> list[Comparison]:
    return [c for c in result.comparisons if not c.ok and c.kind in ("oracle", "pair")]


def _other_failures(result: PropertyResult) -> tuple[frozenset[tuple[str, str]], str | None]:
    """What a result fails on besides its bound comparisons."""
    others = frozenset(
        (c.tensor, c.reference) for c in result.comparisons if not c.ok and c.kind == "bitwise"
    )
    return others, result.reason


class _Search:
    """The reruns of one diagnosis, against one deadline."""

    def __init__(
        self,
        prop: PropertyFn,
        spec: ProblemSpec,
        kernel: Kernel,
        result: PropertyResult,
        deadline: float,
    ) -> None:
        self.prop, self.spec, self.kernel = prop, spec, kernel
        self.others = _other_failures(result)
        self.dtype = torch_dtype(spec.dtype)
        self.deadline = deadline
        self.tried: list[list[_Step]] = []

    @property
    def out_of_time(self) -> bool:
        return time.perf_counter() >= self.deadline

    def explains(self, steps: Sequence[_Step]) -> bool:
        """Rerun the property with ``steps`` applied to the recipe of the case's dtype."""
        self.tried.append(list(steps))
        changes = {k: v for step in steps for k, v in step.changes.items()}
        original, dtype = self.kernel, self.dtype

        def recipe(of: torch.dtype) -> PrecisionRecipe:
            declared = original.precision_recipe(of)
            return replace(declared, **changes) if of == dtype else declared

        rerun = self.prop(self.spec, replace(original, recipe=recipe))
        return not _bound_failures(rerun) and _other_failures(rerun) == self.others


def diagnose(
    prop: PropertyFn,
    spec: ProblemSpec,
    kernel: Kernel,
    result: PropertyResult,
    *,
    time_limit: float = DIAGNOSIS_SECONDS,
) -> str | None:
    """Find the smallest change to ``kernel``'s declared recipe under which ``result`` would pass.

    See the module docstring for the order of the changes tried. The texts:

    * ``consistent with <what the kernel would do> (declared <what it declares>): if the kernel
      does that, declare <a check flag or a recipe field>``;
    * ``consistent only with several changes at once: <what> (declared <...>), ...: if the kernel
      does all that, declare <...>, ...``;
    * ``no recipe explains this error (tried <changes>): the kernel, not its declaration, is
      wrong here``;
    * ``did not reproduce on a rerun of the same case with the same recipe: the kernel is
      nondeterministic here (a race, or memory it reads before writing?)``;
    * ``not diagnosed within <time_limit> s: no change up to <change> explains it (tried
      <changes>)``;
    * ``not diagnosed: rerunning the property raised <error>`` (a harness error, not the
      kernel's: a kernel that raises fails its property instead).

    Args:
        prop: The property that failed, ``(spec, kernel) -> PropertyResult``.
        spec: The (minimal) failing case.
        kernel: The kernel it failed for.
        result: ``prop(spec, kernel)``, failed.
        time_limit: Stop trying changes after this many seconds (a rerun under way finishes).
            Default: `DIAGNOSIS_SECONDS`.

    Returns:
        The diagnosis, or `None` when there is nothing to diagnose: ``result`` did not fail, or
        failed on no bound comparison (only bit for bit, or the kernel raised).

    Raises:
        InvalidArgument: naming the argument that is not what it should be.
    """
    _check_arguments(prop, spec, kernel, result, time_limit)
    if result.status != "failed" or not _bound_failures(result):
        return None
    search = _Search(prop, spec, kernel, result, time.perf_counter() + time_limit)
    try:
        return _diagnosis(search, time_limit)
    except Exception as exc:  # the property is the caller's; a diagnosis must not hide a failure
        return f"not diagnosed: rerunning the property raised {type(exc).__name__}: {exc}"


def _diagnosis(search: _Search, time_limit: float) -> str:
    rerun = search.prop(search.spec, search.kernel)
    if not _bound_failures(rerun):
        otherwise = (
            "" if rerun.ok or not rerun.reason else f" (it failed otherwise: {rerun.reason})"
        )
        return (
            "did not reproduce on a rerun of the same case with the same recipe: the kernel is "
            f"nondeterministic here (a race, or memory it reads before writing?){otherwise}"
        )
    declared = search.kernel.precision_recipe(search.dtype)
    ladders = _ladders(declared, search.spec, search.kernel, search.dtype)
    singles = sorted((step for ladder in ladders.values() for step in ladder), key=_size)
    for step in singles:
        if search.out_of_time:
            return _timed_out(search, time_limit)
        if search.explains([step]):
            return _consistent([step])
    for combo in _loosest(ladders):
        if search.out_of_time:
            return _timed_out(search, time_limit)
        if search.explains(combo):
            narrowed = _narrowed(search, combo, ladders)
            return _consistent(narrowed, narrowed=not search.out_of_time)
    return (
        f"no recipe explains this error (tried {_tried_words(search.tried)}): the kernel, not "
        "its declaration, is wrong here"
    )


def _size(step: _Step) -> float:
    return step.size


def _loosest(ladders: Mapping[str, list[_Step]]) -> list[list[_Step]]:
    """Every loosening at its loosest, once per intermediate dtype an fp32 kernel may use."""
    lows = [ladder[-1] for axis, ladder in ladders.items() if axis.startswith("intermediate:")]
    common = [
        ladder[-1]
        for axis, ladder in ladders.items()
        if ladder[-1].loosening and not axis.startswith("intermediate:")
    ]
    return [[*common, low] for low in lows] or [common]


def _narrowed(
    search: _Search, combo: list[_Step], ladders: Mapping[str, list[_Step]]
) -> list[_Step]:
    """Bring each change of a passing ``combo`` back toward the declaration while it passes."""
    for step in list(combo):
        ladder = ladders[step.axis]
        # None: the declared value; then the ladder's smaller steps, smallest first.
        for smaller in [None, *ladder[: ladder.index(step)]]:
            if search.out_of_time:
                return combo
            trial = [s for s in (smaller if s is step else s for s in combo) if s is not None]
            if search.explains(trial):
                combo = trial
                break
    return combo


def _tried_words(tried: Sequence[Sequence[_Step]]) -> str:
    """The single changes tried, by axis (``casts_on_path=3/4/5``), then the combinations."""
    singles: dict[str, list[_Step]] = {}
    for steps in tried:
        if len(steps) == 1:
            singles.setdefault(steps[0].axis, []).append(steps[0])
    parts = [_axis_words(steps) for steps in singles.values()]
    combos = sum(len(steps) > 1 for steps in tried)
    if combos:
        parts.append("every loosening at once" + (f" ({combos} ways)" if combos > 1 else ""))
    return "; ".join(parts)


def _axis_words(steps: Sequence[_Step]) -> str:
    """``casts_on_path=3/4``; ``intermediate_dtype='float16' with casts_on_path=1/2``."""
    fixed = {k: v for k, v in steps[0].changes.items() if all(s.changes[k] == v for s in steps)}
    varied = [k for k in steps[0].changes if k not in fixed]
    head = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
    if not varied:
        return head
    values = "/".join(repr(s.changes[varied[0]]) for s in steps)
    tail = f"{varied[0]}={values}"
    return f"{head} with {tail}" if head else tail


def _consistent(steps: Sequence[_Step], *, narrowed: bool = True) -> str:
    if len(steps) == 1:
        (step,) = steps
        return (
            f"consistent with {step.what} (declared {step.declared}): if the kernel does that, "
            f"declare {step.how}"
        )
    whats = ", ".join(f"{s.what} (declared {s.declared})" for s in steps)
    hows = ", ".join(s.how for s in steps)
    note = "" if narrowed else " (not narrowed down within the time limit)"
    return (
        f"consistent only with several changes at once: {whats}: if the kernel does all that, "
        f"declare {hows}{note}"
    )


def _timed_out(search: _Search, time_limit: float) -> str:
    if not search.tried:
        return f"not diagnosed within {time_limit:g} s: no change was tried after the rerun"
    last = "; ".join(step.label for step in search.tried[-1])
    return (
        f"not diagnosed within {time_limit:g} s: no change up to {last} explains it "
        f"(tried {_tried_words(search.tried)})"
    )


def _check_arguments(prop: Any, spec: Any, kernel: Any, result: Any, time_limit: Any) -> None:
    if not callable(prop):
        raise InvalidArgument(f"Expected a callable but got prop={prop!r}.")
    if not isinstance(spec, ProblemSpec):
        raise InvalidArgument(f"Expected a ProblemSpec but got spec={spec!r}.")
    if not isinstance(kernel, Kernel):
        raise InvalidArgument(f"Expected a Kernel but got kernel={kernel!r}.")
    if not isinstance(result, PropertyResult):
        raise InvalidArgument(f"Expected a PropertyResult but got result={result!r}.")
    if (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or math.isnan(time_limit)
        or time_limit <= 0
    ):
        raise InvalidArgument(
            f"Got time_limit={time_limit!r}, but time_limit must be a number of seconds > 0."
        )


__all__ = ["DIAGNOSIS_SECONDS", "MAX_EXTRA_CASTS", "diagnose"]
