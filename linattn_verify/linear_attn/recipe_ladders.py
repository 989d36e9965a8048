# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear family's recipe ladders: changes to a `PrecisionRecipe` a diagnosis tries.

`linattn_verify.diagnosis` tries them, smallest first, to explain a bound failure.

Beyond the shared ladders (`linattn_verify.core.recipe_steps`): an unknown form; each other decay
scan (with decay); ``naive_elu1`` (elu1 features); ``division`` rn -> full, and (normalized) ->
``reciprocal`` in fp32, then in the input dtype (16-bit inputs); ``dot_precision`` ieee ->
tf32x3 -> tf32 and ``dots_on_path`` + 1, + 2 (fp32 inputs, dots on the path); ``eps_dtype`` ->
float16, bfloat16 (normalized, eps > 0).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from linattn_verify.core.recipe_steps import (
    TF32,
    TF32X3,
    U32,
    Ladders,
    RecipeStep,
    accumulation_ladder,
    by_axis,
    intermediate_ladders,
    recipe_field,
    set_field,
)
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.typing import dtype_name

_NO_FORM = "no form (leave out `--form`)"
_SCANS = {
    "chunk_local": "chunk-local cumulative sums",
    "global": "whole-sequence cumulative sums",
    "per_step": "products of per-step factors exp(g)",
}


def _dot_ladders(declared: PrecisionRecipe, dtype: torch.dtype) -> list[list[RecipeStep]]:
    """tf32 operands, and more products on the path: only fp32 operands are rounded so."""
    if dtype != torch.float32 or declared.dots_on_path == 0:
        return []
    dots, u_op = declared.dots_on_path, declared.u_op
    order = ("ieee", "tf32x3", "tf32")
    units = {"ieee": 0.0, "tf32x3": TF32X3, "tf32": TF32}
    precision = [
        RecipeStep(
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
        RecipeStep(
            "dots_on_path",
            {"dots_on_path": dots + n},
            n * 2 * u_op,
            f"{dots + n} `tl.dot` products on the path",
            str(dots),
            recipe_field("dots_on_path", dots + n),
        )
        for n in (1, 2)
        if u_op > 0
    ]
    return [ladder for ladder in (precision, more) if ladder]


def _reciprocal_ladder(declared: PrecisionRecipe, dtype: torch.dtype) -> list[RecipeStep]:
    """Division as 1/Z then a multiply: in fp32, then (16-bit inputs) in the input dtype."""
    where = ["float32"] + (["input"] if dtype_name(dtype) in ("float16", "bfloat16") else [])
    return [
        RecipeStep(
            "reciprocal",
            {"division": "reciprocal", "division_dtype": w},
            replace(declared, division="reciprocal", division_dtype=w).u_div(dtype),
            f"a reciprocal 1/Z then a multiply, in {dtype_name(dtype) if w == 'input' else w}",
            f"{declared.division} division in {declared.division_dtype}",
            f"`--division reciprocal --division-dtype {w}`",
        )
        for w in where
    ]


def recipe_ladders(
    declared: PrecisionRecipe, spec: ProblemSpec, kernel: Kernel, dtype: torch.dtype
) -> Ladders:
    """Every change a diagnosis of ``kernel`` on ``spec`` tries, by axis, smallest first."""
    d = declared
    axes = [accumulation_ladder(d.accumulation)]
    if d.form is not None:
        # check has no flag value for an unknown form: it is the default.
        unknown = "the rounding counts of an unknown form (all three forms' counts)"
        axes.append([set_field("form", None, U32, unknown, d.form, how=_NO_FORM)])
    if spec.decay != "none" or kernel.implied_decay is not None:
        axes += [
            [
                set_field(
                    "decay_scan",
                    scan,
                    U32,
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
        axes.append(
            [set_field("naive_elu1", True, 2 * U32, naive, "elu1 without that cancellation")]
        )
    if d.division == "rn":
        full = "a full-range fp32 division (div.full.f32, 2 ulp)"
        axes.append([set_field("division", "full", 3 * U32, full, d.division)])
    if spec.normalize and d.division != "reciprocal":
        axes.append(_reciprocal_ladder(d, dtype))
    axes += _dot_ladders(d, dtype)
    axes += intermediate_ladders(d.intermediate_dtype, d.casts_on_path, dtype)
    if spec.normalize and spec.eps > 0:
        axes += [
            [
                set_field(
                    "eps_dtype",
                    low,
                    UNIT_ROUNDOFF[low],
                    f"eps added in {low}",
                    d.eps_dtype,
                    how=f"`--eps-dtype {low}`",
                    alternative=True,
                )
            ]
            for low in ("float16", "bfloat16")
            if low not in (d.eps_dtype, dtype_name(dtype) if d.eps_dtype == "input" else None)
        ]
    if spec.normalize and spec.eps > 0:
        # Where eps goes changes the function, not its rounding: alternatives of no size,
        # tried first, so a kernel with eps inside the dot or a clamp is told so, not about its
        # rounding. eps inside the dot is judged without decay only.
        where = {
            "offset": "s q·z + eps",
            "in-dot": "eps inside the dot, s q·(z + eps)",
            "clamp": "a clamped denominator, max(s q·z, eps)",
        }
        axes += [
            [
                set_field(
                    "normalizer",
                    other,
                    0.0,
                    text,
                    d.normalizer,
                    how=f"`--normalizer {other}`",
                    alternative=True,
                )
            ]
            for other, text in where.items()
            if other != d.normalizer and (other != "in-dot" or spec.decay == "none")
        ]
    return by_axis(axes)
