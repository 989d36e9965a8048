# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Bit-exactness on dyadic inputs over every registered kernel, and meta tests."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import example_spec
from linattn_properties.exactness import dyadic_inputs_exact, precision_bits

from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import FULL
from linattn_verify.results import PropertyResult
from linattn_verify.running import check_property

SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 8}


base = partial(
    example_spec,
    B=2,
    T=20,
    K=8,
    V=4,
    decay="none",
    initial_state=False,
    output_final_state=False,
    seed=2,
)


NASTY = {
    "identity-normalized-cancelling": base(normalize=True, initial_state=True, seed=4),
    "bf16-varlen-state": base(
        B=1, dtype="bfloat16", segments=(9, 0, 11), initial_state=True, output_final_state=True
    ),
    "fp16-relu-zero-decay": base(dtype="float16", feature_map="relu", decay="zero", T=24),
}


def input_range(result: PropertyResult) -> int:
    """R, the largest |integer| of the dyadic inputs, as the result notes it."""
    (limit,) = (int(m[1]) for n in result.notes if (m := re.match(r"R=(\d+) ", n)))
    return limit


@given(data=st.data())
def test_dyadic_inputs_exact(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    result = check_property(dyadic_inputs_exact, spec, linattn_kernel)
    assert result.status == "held", result.report()


@pytest.mark.cases(NASTY)
def test_dyadic_inputs_exact_on_nasty_cases(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    result = check_property(dyadic_inputs_exact, spec, linattn_kernel)
    assert result.status == "held", result.report()


def test_precision_bits_follow_the_recipe() -> None:
    assert precision_bits(PrecisionRecipe(), torch.float32) == 24
    assert precision_bits(PrecisionRecipe(dot_precision="tf32"), torch.float32) == 11
    cast = PrecisionRecipe(intermediate_dtype="input", casts_on_path=1)
    assert precision_bits(cast, torch.bfloat16) == 8


def test_elu1_only_kernels_are_not_applicable() -> None:
    elu1 = Capabilities(feature_maps=("elu1",))
    kernel = Kernel("elu1-only", float32_reference("parallel"), elu1, RECIPES["parallel"])
    result = dyadic_inputs_exact(base(), kernel)
    assert result.status == "not_applicable"
    assert result.reason == (
        "elu1-only: feature maps ('elu1',) have no exact dyadic oracle (identity, relu)"
    )


# Meta tests: a kernel rounding P to bf16, or dividing sloppily, must fail.


def rounds_p_to_bf16(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # A plain parallel form whose attention matrix goes through bf16 (a tensor-core shortcut).
    scale = kw.get("scale") or q.shape[-1] ** -0.5
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    P = (scale * qf @ kf.mT).tril().to(torch.bfloat16).float()
    return (P @ vf).transpose(1, 2).to(q.dtype), None


REFERENCE = float32_reference("parallel")


def approximate_division(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    # A reciprocal approximation good to ~2^-12: far inside any random test's tolerance.
    return o * (1 + 2.0**-12), final


def test_dyadic_inputs_exact_fails_for_bf16_attention_matrix() -> None:
    caps = Capabilities(initial_state=False, final_state=False)
    kernel = Kernel("bug/rounds_p_to_bf16", rounds_p_to_bf16, caps, RECIPES["parallel"])
    result = dyadic_inputs_exact(base(seed=1), kernel)
    assert input_range(result) > 3  # P has more than 8 significant bits
    assert result.status == "failed"
    (o,) = result.comparisons
    assert o.tensor == "o"
    assert o.kind == "bitwise"
    assert not o.ok
    assert o.counts.mismatched > 0
    assert o.deciding > 0
    assert "bug/rounds_p_to_bf16 o is not bit-identical to the exact result (dyadic inputs" in (
        result.message()
    )


def test_dyadic_inputs_exact_fails_for_an_inexact_division() -> None:
    kernel = Kernel("bug/approximate_division", approximate_division, FULL, RECIPES["parallel"])
    result = dyadic_inputs_exact(base(normalize=True, seed=3), kernel)
    assert result.status == "failed"
    o, *states = result.comparisons
    # The states are untouched and exact, bit for bit.
    assert [(c.tensor, c.kind, c.status) for c in states] == [
        ("final_state", "bitwise", "held"),
        ("final_key_sum", "bitwise", "held"),
    ]
    assert o.tensor == "o"
    assert o.kind == "oracle"
    assert not o.ok
    assert o.worst is not None
    # 2^-12 relative is far beyond (u_div + u_out + 2^-52)|o*| ~ 2^-23 |o*|.
    w = o.worst
    assert abs(w.actual - w.expected) > 2.0**-13 * abs(w.expected)
    message = result.message()
    assert "bug/approximate_division o is not close to" in message, message
    assert (
        "normalized o: against the exact quotient o*, |ô - o*| <= (u_div + u_out + 2^-52)|o*|"
        in (message)
    )


def test_dyadic_inputs_exact_passes_the_correct_twin() -> None:
    kernel = Kernel("twin", REFERENCE, FULL, RECIPES["parallel"])
    for spec in (base(), base(normalize=True, seed=3), *NASTY.values()):
        result = dyadic_inputs_exact(spec, kernel)
        assert result.status == "held", result.report()
        bitwise = [c for c in result.comparisons if c.kind == "bitwise"]
        assert all(c.deciding == 0 for c in bitwise)
        assert len(bitwise) == len(result.comparisons) - spec.normalize
