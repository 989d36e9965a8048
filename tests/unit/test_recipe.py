# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Precision recipes: validation and the unit roundoffs they imply."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.recipe import PrecisionRecipe


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"form": "quadratic"}, "form"),
        ({"accumulation": "fp16"}, "accumulation"),
        ({"dot_precision": "tf16"}, "dot_precision"),
        ({"decay_scan": "tree"}, "decay_scan"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"casts_on_path": -1}, "casts_on_path"),
        ({"casts_on_path": 1}, "intermediate_dtype"),
        ({"intermediate_dtype": "int8"}, "intermediate_dtype"),
    ],
)
def test_bad_recipe_names_the_field(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        PrecisionRecipe(**kwargs)
    assert needle in str(info.value)


def test_units() -> None:
    assert PrecisionRecipe().u_acc(torch.float16) == 2.0**-24
    assert PrecisionRecipe(accumulation="mma").u_acc(torch.float16) == 2.0**-23
    # Sums and arithmetic in the input dtype: its unit roundoff, never below fp32's.
    in_input = PrecisionRecipe(accumulation="input")
    assert in_input.u_acc(torch.float16) == in_input.u_arith(torch.float16) == 2.0**-11
    assert in_input.u_acc(torch.float32) == 2.0**-24
    assert PrecisionRecipe(dot_precision="tf32").u_op == 2.0**-10
    assert PrecisionRecipe(division="rn").u_div(torch.float32) == 2.0**-24
    assert PrecisionRecipe().u_div(torch.float16) == 4 * 2.0**-24
    # A reciprocal then a multiply: two roundings in fp32; in a 16-bit division dtype N and Z
    # are rounded to it first, so four, and 1/Z may underflow or overflow there.
    reciprocal = PrecisionRecipe(division="reciprocal")
    assert reciprocal.u_div(torch.float16) == 2 * 2.0**-24
    in_input = PrecisionRecipe(division="reciprocal", division_dtype="input")
    assert in_input.u_div(torch.float16) == 4 * 2.0**-11
    assert in_input.u_div(torch.float32) == 2 * 2.0**-24
    assert in_input.division_limits(torch.float16) == (2.0**-25, 2.0**-14, 65504.0)
    assert PrecisionRecipe().division_limits(torch.float16) is None
    cast = PrecisionRecipe(intermediate_dtype="input", casts_on_path=1)
    assert cast.u_low(torch.bfloat16) == 2.0**-8
    assert cast.u_low(torch.float16) == 2.0**-11
    # eps is rounded to the dtype it is added in: fl32(1e-6) != 1e-6.
    assert PrecisionRecipe().effective_eps(1e-6, torch.float32) == float(torch.tensor(1e-6).item())
    assert PrecisionRecipe(eps_dtype="float64").effective_eps(1e-6, torch.float32) == 1e-6


def test_from_dict_rejects_unknown_keys() -> None:
    assert PrecisionRecipe.from_dict({"form": "chunk"}).form == "chunk"
    with pytest.raises(InvalidArgument, match="unknown"):
        PrecisionRecipe.from_dict({"form": "chunk", "tile": 64})
