# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Changes to a declared precision recipe: what a recipe diagnosis tries, for any family.

A family lists, per axis, the changes that could explain a bound failure (`Family.recipe_ladders`,
each ladder smallest first); `linattn_verify.diagnosis` tries them. The ladders every family's
recipes share (accumulation, tf32 and intermediate roundings) are built here; a family adds its
own axes (the linear family's division and decay scans, the delta family's inverse and state
storage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from linattn_verify.core.rounding import UNIT_ROUNDOFF

MAX_EXTRA_CASTS = 4
"""The most roundings to the intermediate dtype a diagnosis adds to the declared ones."""

U32 = UNIT_ROUNDOFF["float32"]
TF32X3, TF32 = 2.0**-22, 2.0**-10
"""Unit roundoffs of a tf32x3 and a tf32 ``tl.dot`` operand."""

_ACCUMULATIONS = {"ieee": "fp32", "mma": "tensor-core (mma)"}
_SIXTEEN_BIT = ("float16", "bfloat16")


@dataclass(frozen=True)
class RecipeStep:
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


Ladders = dict[str, list[RecipeStep]]
"""A family's changes by axis, each ladder smallest first."""


def recipe_field(name: str, value: Any) -> str:
    """How to declare a recipe field that has no ``check`` flag."""
    return f"`{name}={value!r}` in the recipe"


def set_field(
    name: str,
    value: Any,
    size: float,
    what: str,
    declared: Any,
    *,
    how: str | None = None,
    alternative: bool = False,
) -> RecipeStep:
    """A step setting one recipe field (declared by ``how``, else as that field)."""
    axis = f"{name}:{value}" if alternative else name
    return RecipeStep(
        axis,
        {name: value},
        size,
        what,
        str(declared),
        how or recipe_field(name, value),
        not alternative,
    )


def _roundings(n: int) -> str:
    return f"{n} rounding{'s' if n != 1 else ''}"


def accumulation_ladder(declared: str) -> list[RecipeStep]:
    """Wider accumulations than ``declared``: float64 -> ieee fp32 -> tensor-core (mma).

    Sums in the input dtype (``"input"``) already round at least as much as any of them.
    """
    order = ("float64", "ieee", "mma")
    wider = order.index(declared) + 1 if declared in order else len(order)
    return [
        set_field("accumulation", a, U32, f"{_ACCUMULATIONS[a]} accumulation", declared)
        for a in order[wider:]
    ]


def intermediate_ladders(
    intermediate_dtype: str | None, casts_on_path: int, dtype: torch.dtype
) -> list[list[RecipeStep]]:
    """More roundings to the intermediate dtype (or some, when none is declared).

    With one declared, one ladder of 1 ... `MAX_EXTRA_CASTS` more (``--casts``). With none, the
    input dtype for 16-bit inputs, and for fp32 inputs a ladder per 16-bit dtype (axes named
    ``intermediate:<dtype>``: a diagnosis combines each with the other loosenings in turn).
    """
    name = str(dtype).removeprefix("torch.")
    if intermediate_dtype is not None:
        low = name if intermediate_dtype == "input" else intermediate_dtype
        u, c = UNIT_ROUNDOFF[low], casts_on_path
        return [
            [
                RecipeStep(
                    "casts",
                    {"casts_on_path": c + n},
                    n * u,
                    f"{_roundings(c + n)} to {low} on the path",
                    str(c),
                    f"`--casts {c + n}`",
                )
                for n in range(1, MAX_EXTRA_CASTS + 1)
            ]
        ]
    targets = ["input"] if name in _SIXTEEN_BIT else list(_SIXTEEN_BIT)
    ladders = []
    for target in targets:
        low = name if target == "input" else target
        ladders.append(
            [
                RecipeStep(
                    f"intermediate:{target}",
                    {"intermediate_dtype": target, "casts_on_path": n},
                    n * UNIT_ROUNDOFF[low],
                    f"{_roundings(n)} to {low} on the path",
                    "none",
                    f"`--intermediate-dtype {target} --casts {n}`",
                )
                for n in range(1, MAX_EXTRA_CASTS + 1)
            ]
        )
    return ladders


def storage_steps(
    name: str, flag: str, what: str, declared: str | None, dtype: torch.dtype
) -> list[list[RecipeStep]]:
    """A store to a 16-bit dtype where the recipe declares none (a recipe field ``name``).

    16-bit inputs: the input dtype, a loosening. fp32 inputs: float16 or bfloat16, each an
    alternative tried alone (two of them at once would be one kernel storing in both).
    """
    if declared is not None:
        return []
    input_name = str(dtype).removeprefix("torch.")
    if input_name in _SIXTEEN_BIT:
        u = UNIT_ROUNDOFF[input_name]
        text = f"{what} stored in {input_name}"
        return [[set_field(name, "input", u, text, "none", how=f"`{flag} input`")]]
    return [
        [
            set_field(
                name,
                low,
                UNIT_ROUNDOFF[low],
                f"{what} stored in {low}",
                "none",
                how=f"`{flag} {low}`",
                alternative=True,
            )
        ]
        for low in _SIXTEEN_BIT
    ]


def by_axis(ladders: list[list[RecipeStep]]) -> Ladders:
    """Key non-empty ladders by their axis."""
    return {ladder[0].axis: ladder for ladder in ladders if ladder}
