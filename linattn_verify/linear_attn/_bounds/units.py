# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The unit roundoffs and absolute error units a recipe implies for one input dtype.

The derivation of every count and error term is in `linattn_verify.linear_attn.tolerance`'s
docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.linear_attn.recipe import DivisionLimits, PrecisionRecipe, dtype_name

SMALLEST_NORMAL_FP32 = 2.0**-126
"""A feature exp(x) below this may be flushed to zero: an absolute error of at most this."""

HALF_SMALLEST_SUBNORMAL = {
    "float64": 2.0**-1075,
    "float32": 2.0**-150,
    "float16": 2.0**-25,
    "bfloat16": 2.0**-134,
}
"""Largest absolute error of rounding a tiny value to each format (gradual underflow)."""


@dataclass(frozen=True)
class Units:
    """The unit roundoffs a recipe implies for one input dtype."""

    acc: float  # accumulation
    arith: float  # elementwise arithmetic (exp, φ, multiplies)
    per_term: float  # casts to the intermediate dtype and tf32 operands, per term
    out: float  # rounding of the output to the input dtype (0 when it is the fp32 result)
    div: float
    underflow: float  # absolute error of one operation whose result underflows (FTZ-safe)
    out_abs: float  # absolute error of rounding a result below the output dtype's normal range
    cast_abs: float  # the same for one cast to the intermediate dtype, times casts on a path
    # A reciprocal division's 1/Z: its absolute error below the normal range, and its dtype's
    # smallest normal and largest finite value (0, 0 and inf for a direct division).
    reciprocal_abs: float = 0.0
    reciprocal_tiny: float = 0.0
    reciprocal_max: float = float("inf")
    # A division in the input dtype rounds fp32 N and Z to it first: below its normal range
    # each cast loses up to half its smallest subnormal (0 when nothing is cast).
    division_cast_abs: float = 0.0
    # One operation of the backward's quotient adjoints (dN = do/Z, dZ = -(do·N)/Z^2, in the
    # division's dtype) whose result is below that dtype's normal range errs by up to this much,
    # absolutely (docs/error-model.md §5, "Quotient adjoints below the normal range").
    adjoint_abs: float = 0.0
    # The largest value of the input dtype where the kernel computes (``overflow_arith``) or
    # divides (``overflow_division``) in it, inf elsewhere (`_bounds.overflow`).
    overflow_arith: float = float("inf")
    overflow_division: float = float("inf")

    @property
    def lost_intermediate(self) -> float:
        """Absolute error of an intermediate product lost to underflow or a cast.

        A partial product of a term (w·dP, P·ζ, q·e^G, ...) that underflows, or that is cast to
        the intermediate dtype, loses up to this much before the term's remaining factors
        multiply it; four such partial products per term cover every evaluation order of the
        (at most five-factor) terms here.
        """
        return self.cast_abs + 4 * self.underflow

    @staticmethod
    def of(recipe: PrecisionRecipe, dtype: torch.dtype) -> Units:
        name = dtype_name(dtype)
        out = 0.0 if name in ("float32", "float64") else UNIT_ROUNDOFF[name]
        float64 = recipe.accumulation == "float64"
        low = recipe.intermediate_dtype
        low_name = name if low == "input" else low
        limits = recipe.division_limits(dtype) or DivisionLimits(0.0, 0.0, float("inf"))
        narrow = name not in ("float32", "float64") and not float64
        largest = float(torch.finfo(dtype).max) if narrow else float("inf")
        # With flush-to-zero an underflowing result can lose all of the smallest normal: of
        # the arithmetic's format (the input dtype's for arithmetic in the input dtype).
        underflow = (
            2.0**-1022
            if float64
            else max(SMALLEST_NORMAL_FP32, _smallest_normal(dtype))
            if recipe.accumulation == "input"
            else SMALLEST_NORMAL_FP32
        )
        narrow_division = narrow and recipe.division_dtype == "input"
        return Units(
            acc=recipe.u_acc(dtype),
            arith=recipe.u_arith(dtype),
            per_term=recipe.casts_on_path * recipe.u_low(dtype)
            + recipe.dots_on_path * 2 * recipe.u_op,
            out=out,
            div=recipe.u_div(dtype),
            underflow=underflow,
            out_abs=HALF_SMALLEST_SUBNORMAL[name],
            cast_abs=0.0
            if low_name is None
            else recipe.casts_on_path * HALF_SMALLEST_SUBNORMAL[low_name],
            reciprocal_abs=limits.subnormal_abs,
            reciprocal_tiny=limits.smallest_normal,
            reciprocal_max=limits.largest,
            division_cast_abs=HALF_SMALLEST_SUBNORMAL[name]
            if recipe.division_dtype == "input" and recipe.accumulation not in ("float64", "input")
            else 0.0,
            adjoint_abs=max(underflow, HALF_SMALLEST_SUBNORMAL[name])
            if narrow_division
            else underflow,
            overflow_arith=largest if recipe.accumulation == "input" else float("inf"),
            overflow_division=largest
            if recipe.division_dtype == "input" or recipe.accumulation == "input"
            else float("inf"),
        )


def _smallest_normal(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).smallest_normal)


def exp_error(x: torch.Tensor, u: float) -> torch.Tensor:
    """ε_exp(x) = (4 + 2.4|x|) u: relative error of ``tl.exp`` (ex2.approx) on fp32."""
    return (4 + 2.4 * x.abs()) * u


__all__ = ["HALF_SMALLEST_SUBNORMAL", "SMALLEST_NORMAL_FP32", "Units", "exp_error"]
