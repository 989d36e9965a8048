# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Linearity (unnormalized) and affinity/convexity (normalized) over every registered kernel."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import assert_holds, bug_kernel, example_spec, narrowed
from linattn_properties.algebra import linear_in_values_and_state, normalized_affine_and_convex

from linattn_verify.errors import PropertyViolation
from linattn_verify.feature_maps import apply_feature_map
from linattn_verify.kernel import Kernel
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.registry import registered_kernels
from linattn_verify.strategies import ProblemSpec, kernel_specs

KERNELS = list(registered_kernels().values())

SMALL = {"max_seq_len": 20, "max_head_dim": 5}


base = partial(example_spec, B=2, T=17, seed=5)


NORMALIZED = {"normalize": True, "feature_map": "elu1", "eps": 1e-2, "initial_state": False}

NASTY_LINEAR = {
    "bf16-large": base(dtype="bfloat16", values="large"),
    "varlen-steep": base(B=1, T=19, segments=(7, 0, 12), decay="steep"),
}
NASTY_AFFINE = {
    "eps-dominated": base(**{**NORMALIZED, "values": "underflowing_features"}),
    "relu-zero-rows-eps0": base(
        **{**NORMALIZED, "feature_map": "relu", "eps": 0.0, "values": "zero_rows"}
    ),
    "fp16-varlen": base(**{**NORMALIZED, "dtype": "float16", "B": 1, "segments": (3, 14)}),
    # Overflowing decay makes D_t = s q·z_t far below eps: ρ_t = (Z - eps) / Z is 0 in float64
    # while o is not (a false alarm of the hull test before its ρ rounding was counted).
    "D-below-ulp-of-eps": ProblemSpec(
        B=2,
        T=2,
        H=2,
        K=1,
        V=1,
        dtype="bfloat16",
        feature_map="elu1",
        normalize=True,
        eps=0.01,
        scale=None,
        values="heavy_tailed",
        decay="overflowing",
        initial_state=True,
        output_final_state=True,
        segments=None,
        seed=6527687,
        layout="sliced",
    ),
}


@given(data=st.data())
def test_linear_in_values_and_state(kernel: Kernel, data: st.DataObject) -> None:
    if False not in kernel.capabilities.normalize:
        pytest.skip(f"{kernel.name} has no unnormalized output")
    steer = narrowed(kernel, normalize=(False,))
    spec = data.draw(kernel_specs(steer, **SMALL), label="spec")
    result = linear_in_values_and_state(spec, kernel)
    note(result.report())
    assert result.skipped is None, result.report()
    target(float(result.scores["max_r"]), label="max_r")
    result.raise_for_failure()


@given(data=st.data())
def test_normalized_affine_and_convex(kernel: Kernel, data: st.DataObject) -> None:
    maps = tuple(m for m in kernel.capabilities.feature_maps if m in ("elu1", "relu"))
    if True not in kernel.capabilities.normalize or not maps:
        pytest.skip(f"{kernel.name} has no normalized output with a feature map >= 0")
    steer = narrowed(kernel, normalize=(True,), feature_maps=maps)
    spec = data.draw(kernel_specs(steer, **SMALL), label="spec")
    result = normalized_affine_and_convex(spec, kernel)
    note(result.report())
    assert result.skipped is None, result.report()
    target(max(result.scores.values()), label="max score")
    result.raise_for_failure()


@pytest.mark.cases(NASTY_LINEAR)
def test_linear_in_values_and_state_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    result = linear_in_values_and_state(spec, kernel)
    assert_holds(result)


@pytest.mark.cases(NASTY_AFFINE)
def test_normalized_affine_and_convex_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    result = normalized_affine_and_convex(spec, kernel)
    assert_holds(result)


def test_properties_skip_the_other_normalization() -> None:
    kernel = KERNELS[-1]
    assert linear_in_values_and_state(base(**NORMALIZED), kernel).skipped
    assert normalized_affine_and_convex(base(), kernel).skipped
    identity = base(**{**NORMALIZED, "feature_map": "identity"})
    assert normalized_affine_and_convex(identity, kernel).skipped


# Meta tests: wrong kernels must fail.

REFERENCE = float32_reference("recurrent")


def squares_a_little(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    return o + 1e-3 * o * o, final


def eps_inside_the_key_sum(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # q̃·(z + eps·1) instead of q̃·z + eps: eps scaled by Σ φ(q), the classic misplacement.
    eps, fmap = kw.pop("eps"), kw["feature_map"]
    kw["normalize"] = False
    N, _ = REFERENCE(q, k, v, g, **{**kw, "output_final_state": False})
    ones = torch.ones_like(v[..., :1])
    Z, _ = REFERENCE(q, k, ones, g, **{**kw, "output_final_state": False})
    scale = kw.get("scale") or q.shape[-1] ** -0.5
    Z = Z + eps * scale * apply_feature_map(q.float(), fmap).sum(-1, keepdim=True)
    return (N / Z).to(q.dtype), None


def test_linear_in_values_and_state_fails_for_a_nonlinear_kernel() -> None:
    result = linear_in_values_and_state(base(), bug_kernel(squares_a_little))
    assert not result.ok
    assert "is not" in result.message
    assert "within the sum of the bounds" in result.message
    with pytest.raises(PropertyViolation, match="linear_in_values_and_state FAILED"):
        result.raise_for_failure()


def test_normalized_affine_and_convex_fails_for_misplaced_eps() -> None:
    spec = base(**{**NORMALIZED, "output_final_state": False})
    kernel = bug_kernel(eps_inside_the_key_sum, final_state=False, initial_state=False)
    result = normalized_affine_and_convex(spec, kernel)
    assert not result.ok
    assert "is not o(v) +" in result.message, result.message


def test_algebra_passes_the_correct_twin() -> None:
    twin = replace(bug_kernel(REFERENCE), name="twin")
    assert linear_in_values_and_state(base(), twin).ok
    result = normalized_affine_and_convex(base(**NORMALIZED), twin)
    assert result.ok, result.report()
