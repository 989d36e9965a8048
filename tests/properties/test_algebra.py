# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Linearity (unnormalized) and affinity/convexity (normalized) over every registered kernel."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec, narrowed
from linattn_properties.algebra import linear_in_values_and_state, normalized_affine_and_convex

from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels
from linattn_verify.running import check_property

KERNELS = list(registered_kernels("linear_attn").values())

SMALL: dict[str, Any] = {"max_seq_len": 20, "max_head_dim": 5}


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
def test_linear_in_values_and_state(linattn_kernel: Kernel, data: st.DataObject) -> None:
    if False not in linattn_kernel.capabilities.normalize:
        pytest.skip(f"{linattn_kernel.name} has no unnormalized output")
    steer = narrowed(linattn_kernel, normalize=(False,))
    spec = data.draw(kernel_specs(steer, **SMALL), label="spec")
    result = check_property(linear_in_values_and_state, spec, linattn_kernel)
    assert result.status == "held", result.report()


@given(data=st.data())
def test_normalized_affine_and_convex(linattn_kernel: Kernel, data: st.DataObject) -> None:
    maps = tuple(m for m in linattn_kernel.capabilities.feature_maps if m in ("elu1", "relu"))
    if True not in linattn_kernel.capabilities.normalize or not maps:
        pytest.skip(f"{linattn_kernel.name} has no normalized output with a feature map >= 0")
    steer = narrowed(linattn_kernel, normalize=(True,), feature_maps=maps)
    spec = data.draw(kernel_specs(steer, **SMALL), label="spec")
    result = check_property(normalized_affine_and_convex, spec, linattn_kernel)
    assert result.status == "held", result.report()


@pytest.mark.cases(NASTY_LINEAR)
def test_linear_in_values_and_state_on_nasty_cases(
    linattn_kernel: Kernel, spec: ProblemSpec
) -> None:
    result = check_property(linear_in_values_and_state, spec, linattn_kernel)
    assert result.status == "held", result.report()


@pytest.mark.cases(NASTY_AFFINE)
def test_normalized_affine_and_convex_on_nasty_cases(
    linattn_kernel: Kernel, spec: ProblemSpec
) -> None:
    result = check_property(normalized_affine_and_convex, spec, linattn_kernel)
    assert result.status == "held", result.report()


def test_properties_do_not_apply_to_the_other_normalization() -> None:
    kernel = KERNELS[-1]
    linear = linear_in_values_and_state(base(**NORMALIZED), kernel)
    assert linear.status == "not_applicable"
    assert linear.reason == "normalized output is not linear in v"
    affine = normalized_affine_and_convex(base(), kernel)
    assert affine.status == "not_applicable"
    assert affine.reason is not None
    assert "unnormalized output" in affine.reason
    identity = normalized_affine_and_convex(
        base(**{**NORMALIZED, "feature_map": "identity"}), kernel
    )
    assert identity.status == "not_applicable"
    assert identity.reason == "feature_map=identity can be negative"


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
    assert result.status == "failed"
    failing = [c for c in result.comparisons if not c.ok]
    # o is quadratic; the state S_T = Σ k v^T stays linear.
    assert [c.tensor.partition("(")[0] for c in failing] == ["o"]
    (o,) = failing
    assert re.fullmatch(r"o\(-?[\d.]+·\(v1, S1\) [+-] [\d.]+·\(v2, S2\)\)", o.tensor), o.tensor
    assert o.subject == "bug/squares_a_little"
    assert o.deciding > 2
    assert o.counts.mismatched > 0
    final = [c for c in result.comparisons if c.tensor.startswith("final_state(")]
    assert len(final) == 1
    assert final[0].ok
    message = result.message()
    assert f"bug/squares_a_little {o.tensor} is not close to" in message, message
    assert "within B3 + |α| B1 + |β| B2 (the sum of the runs' bounds)" in message, message


def test_normalized_affine_and_convex_fails_for_misplaced_eps() -> None:
    spec = base(**{**NORMALIZED, "output_final_state": False})
    kernel = bug_kernel(eps_inside_the_key_sum, final_state=False, initial_state=False)
    result = normalized_affine_and_convex(spec, kernel)
    assert result.status == "failed"
    affine = result.comparisons[0]
    assert re.fullmatch(r"o\(v [+-] [\d.]+\)", affine.tensor), affine.tensor
    assert affine.kind == "oracle"
    assert not affine.ok
    assert affine.counts.mismatched > 0
    message = result.message()
    assert f"{kernel.name} {affine.tensor} is not close to" in message, message
    assert "expected: o(v) + c·ρ_t (+ o*(δ)) within B(v + c) + B(v)" in message, message


def test_the_hull_check_fails_for_an_output_outside_the_values() -> None:
    def overshoots(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        # 2·o(v) - o(v - 1) = o(v) + ρ: affine in v, but leaves the hull by ρ·1.
        o, final = REFERENCE(q, k, v, g, **kw)
        return o + (o - REFERENCE(q, k, v - 1, g, **kw)[0]), final

    result = normalized_affine_and_convex(base(**NORMALIZED), bug_kernel(overshoots))
    assert result.status == "failed"
    affine, hull = result.comparisons
    assert affine.ok, affine  # o(v) + ρ_t is affine in v: only the hull catches it
    assert hull.tensor == "o(v) in ρ_t·hull(v)"
    assert not hull.ok
    assert hull.worst is not None
    # The expected value is the nearest end of the interval: o lies beyond it.
    assert abs(hull.worst.actual) > abs(hull.worst.expected)


def test_algebra_passes_the_correct_twin() -> None:
    twin = replace(bug_kernel(REFERENCE), name="twin")
    linear = linear_in_values_and_state(base(), twin)
    assert linear.status == "held", linear.report()
    assert [c.tensor.partition("(")[0] for c in linear.comparisons] == ["o", "final_state"]
    affine = normalized_affine_and_convex(base(**NORMALIZED), twin)
    assert affine.status == "held", affine.report()
    assert [c.tensor for c in affine.comparisons][1] == "o(v) in ρ_t·hull(v)"
