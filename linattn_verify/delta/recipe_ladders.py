# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta family's recipe ladders: changes to a `DeltaRecipe` a diagnosis tries.

`linattn_verify.diagnosis` tries them, smallest first, to explain a bound failure. Beyond the
shared ladders (`linattn_verify.core.recipe_steps`: wider accumulation, more roundings to a
16-bit intermediate dtype): tf32 dot operands (fp32 inputs); the chunk form's triangular inverse
stored in a 16-bit dtype, and computed by products of (I + N^(2^k)) factors instead of a
substitution; the state stored in a 16-bit dtype. The form is never changed: a delta-rule
recipe names one (the chunk form's bound depends on its inverse), so a kernel declared with the
wrong form is diagnosed as what it is, wrong for that declaration.
"""

from __future__ import annotations

import torch

from linattn_verify.core.recipe_steps import (
    TF32,
    U32,
    Ladders,
    accumulation_ladder,
    by_axis,
    intermediate_ladders,
    set_field,
    storage_steps,
)
from linattn_verify.delta.kernel import DeltaRecipe


def recipe_ladders(declared: DeltaRecipe, dtype: torch.dtype) -> Ladders:
    """Every change a diagnosis of a kernel declaring ``declared`` for ``dtype`` tries."""
    axes = [accumulation_ladder(declared.accumulation)]
    if dtype == torch.float32 and not declared.tf32:
        tf32 = "`tl.dot` operands in tf32"
        axes.append([set_field("tf32", True, 2 * TF32, tf32, "ieee", how="`--dot-precision tf32`")])
    if declared.form == "chunk":
        axes += storage_steps(
            "inverse_dtype",
            "--inverse-dtype",
            "the triangular inverse",
            declared.inverse_dtype,
            dtype,
        )
        if declared.inverse_method == "substitution":
            products = "a triangular inverse by products of (I + N^(2^k)) factors"
            how = "`--inverse-method products`"
            axes.append(
                [set_field("inverse_method", "products", U32, products, "substitution", how=how)]
            )
    axes += storage_steps("state_dtype", "--state-dtype", "the state", declared.state_dtype, dtype)
    axes += intermediate_ladders(declared.intermediate_dtype, declared.casts_on_path, dtype)
    return by_axis(axes)
