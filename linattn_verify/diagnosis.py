# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recipe diagnosis: the smallest change to a kernel's declared recipe that explains a failure.

A bound failure means the kernel's error exceeds the bound of the precision recipe it declares
(docs/error-model.md §7). Either the kernel is wrong, or it rounds more than it declares: a cast
to fp16 the declaration leaves out, tensor-core accumulation, tf32 operands. `diagnose` tells the
two apart by rerunning the failed property with the recipe changed, in order of increasing
change, and reports the first change under which no bound comparison fails:

0. the declared recipe itself: if the failure does not come back, the kernel is nondeterministic;
1. one change at a time, from the ladders of the kernel's family (`Family.recipe_ladders`:
   `linattn_verify.linear_attn.recipe_ladders`, `linattn_verify.delta.recipe_ladders`), ordered
   by the unit roundoff of the roundings the change adds or widens (`RecipeStep.size`), smallest
   first: wider accumulation, more roundings to a 16-bit intermediate dtype, tf32 operands,
   and each family's own (division, decay scans, feature maps; the triangular inverse's and the
   state's storage);
2. every loosening at its loosest at once (alternative declarations, such as another decay
   scan, are not loosenings and stay as declared); if that explains the failure, each change is
   then brought back toward the declaration as far as the failure stays explained, and the rest are
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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from linattn_verify.core.family import FamilyCase, family_of
from linattn_verify.core.recipe_steps import Ladders, RecipeStep
from linattn_verify.errors import InvalidArgument
from linattn_verify.results import Comparison, PropertyResult
from linattn_verify.results.message import EXPLAINED_BY_RECIPE
from linattn_verify.typing import torch_dtype

DIAGNOSIS_SECONDS = 60.0
"""Default wall-clock budget of one diagnosis, in seconds."""

PropertyFn = Callable[[Any, Any], PropertyResult]
"""A property: ``(case, kernel) -> PropertyResult``, for a case and a kernel of one family."""


NO_RECIPE = "no recipe explains this error"
"""How a diagnosis that found no declaration begins."""

SHAPE_NOTE = "Shape of the error:"
"""How a diagnosis names the shape of the error it recognised (`Family.error_shape`)."""


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
        spec: Any,
        kernel: Any,
        result: PropertyResult,
        ladders: Ladders,
        deadline: float,
    ) -> None:
        self.prop, self.spec, self.kernel = prop, spec, kernel
        self.others = _other_failures(result)
        self.dtype = torch_dtype(spec.dtype)
        self.deadline = deadline
        self.tried: list[list[RecipeStep]] = []
        self.ladders = ladders

    @property
    def out_of_time(self) -> bool:
        return time.perf_counter() >= self.deadline

    def explains(self, steps: Sequence[RecipeStep]) -> bool:
        """Rerun the property with ``steps`` applied to the recipe of the case's dtype."""
        self.tried.append(list(steps))
        changes = {k: v for step in steps for k, v in step.changes.items()}
        original, dtype = self.kernel, self.dtype

        def recipe(of: torch.dtype) -> Any:
            declared = original.precision_recipe(of)
            return replace(declared, **changes) if of == dtype else declared

        rerun = self.prop(self.spec, replace(original, recipe=recipe))
        return not _bound_failures(rerun) and _other_failures(rerun) == self.others


def diagnose(
    prop: PropertyFn,
    spec: Any,
    kernel: Any,
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
      wrong here``, followed by ``. Shape of the error: <what o looks like>`` where the family
      recognises it (`Family.error_shape`);
    * ``did not reproduce on a rerun of the same case with the same recipe: the kernel is
      nondeterministic here (a race, or memory it reads before writing?)``;
    * ``not diagnosed within <time_limit> s: no change up to <change> explains it (tried
      <changes>)``;
    * ``not diagnosed: rerunning the property raised <error>`` (a harness error, not the
      kernel's: a kernel that raises fails its property instead);
    * ``<tensors> finite on one side only ...: no declared rounding makes a finite value
      non-finite, so no declaration is offered``, without rerunning anything.

    Args:
        prop: The property that failed, ``(spec, kernel) -> PropertyResult``.
        spec: The (minimal) failing case.
        kernel: The kernel it failed for.
        result: ``prop(spec, kernel)``, failed.
        time_limit: Stop trying changes after this many seconds (a rerun under way finishes).
            Default: `DIAGNOSIS_SECONDS`.

    Returns:
        The diagnosis, or `None` when there is nothing to diagnose: ``result`` did not fail, or
        failed on no bound comparison (only bit for bit, or the kernel raised), or the kernel's
        family has no recipe ladders.

    Raises:
        InvalidArgument: naming the argument that is not what it should be.
    """
    _check_arguments(prop, spec, kernel, result, time_limit)
    failed = _bound_failures(result)
    if result.status != "failed" or not failed:
        return None
    nonfinite = [c.tensor for c in failed if c.counts.nonfinite]
    if nonfinite:
        # A rounding the recipe could declare moves a value by a bounded amount; it does not make
        # a finite value infinite or NaN (or the reverse), so no declaration applies.
        return (
            f"{', '.join(nonfinite)} finite on one side only (the kernel's or the exact value): "
            "no declared rounding makes a finite value non-finite, so no declaration is offered "
            "(an overflow, a division by zero or an uninitialised read in the kernel?)"
        )
    dtype = torch_dtype(spec.dtype)
    declared = kernel.precision_recipe(dtype)
    family = family_of(kernel)
    ladders = family.recipe_ladders(declared, spec, kernel, dtype)
    if ladders is None:
        return None
    search = _Search(prop, spec, kernel, result, ladders, time.perf_counter() + time_limit)
    try:
        text = _diagnosis(search, time_limit)
        shape = family.error_shape(spec, kernel) if text.startswith(NO_RECIPE) else None
    except Exception as exc:  # the property is the caller's; a diagnosis must not hide a failure
        return f"not diagnosed: rerunning the property raised {type(exc).__name__}: {exc}"
    # Where no declaration explains it, what the error looks like says what the defect is.
    return text if shape is None else f"{text}. {SHAPE_NOTE} {shape}"


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
    ladders = search.ladders
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
        f"{NO_RECIPE} (tried {_tried_words(search.tried)}): the kernel, not "
        "its declaration, is wrong here"
    )


def _size(step: RecipeStep) -> float:
    return step.size


def _loosest(ladders: Ladders) -> list[list[RecipeStep]]:
    """Every loosening at its loosest, once per intermediate dtype an fp32 kernel may use."""
    lows = [ladder[-1] for axis, ladder in ladders.items() if axis.startswith("intermediate:")]
    common = [
        ladder[-1]
        for axis, ladder in ladders.items()
        if ladder[-1].loosening and not axis.startswith("intermediate:")
    ]
    return [[*common, low] for low in lows] or [common]


def _narrowed(search: _Search, combo: list[RecipeStep], ladders: Ladders) -> list[RecipeStep]:
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


def _tried_words(tried: Sequence[Sequence[RecipeStep]]) -> str:
    """The single changes tried, by axis (``casts_on_path=3/4/5``), then the combinations."""
    singles: dict[str, list[RecipeStep]] = {}
    for steps in tried:
        if len(steps) == 1:
            singles.setdefault(steps[0].axis, []).append(steps[0])
    parts = [_axis_words(steps) for steps in singles.values()]
    combos = sum(len(steps) > 1 for steps in tried)
    if combos:
        parts.append("every loosening at once" + (f" ({combos} ways)" if combos > 1 else ""))
    return "; ".join(parts)


def _axis_words(steps: Sequence[RecipeStep]) -> str:
    """``casts_on_path=3/4``; ``intermediate_dtype='float16' with casts_on_path=1/2``."""
    fixed = {k: v for k, v in steps[0].changes.items() if all(s.changes[k] == v for s in steps)}
    varied = [k for k in steps[0].changes if k not in fixed]
    head = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
    if not varied:
        return head
    values = "/".join(repr(s.changes[varied[0]]) for s in steps)
    tail = f"{varied[0]}={values}"
    return f"{head} with {tail}" if head else tail


def _consistent(steps: Sequence[RecipeStep], *, narrowed: bool = True) -> str:
    if len(steps) == 1:
        (step,) = steps
        return (
            f"{EXPLAINED_BY_RECIPE} {step.what} (declared {step.declared}): if the kernel does "
            f"that, declare {step.how}"
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
    if not isinstance(spec, FamilyCase):
        raise InvalidArgument(
            f"Expected a case (a ProblemSpec, a DeltaCase) but got spec={spec!r}."
        )
    if not callable(getattr(kernel, "precision_recipe", None)):
        raise InvalidArgument(f"Expected a kernel but got kernel={kernel!r}.")
    if kernel.family != spec.family:
        raise InvalidArgument(
            f"Got a {spec.family} case for kernel {kernel.name!r} of the {kernel.family} family."
        )
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


__all__ = ["DIAGNOSIS_SECONDS", "PropertyFn", "diagnose"]
