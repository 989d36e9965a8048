# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A scalar gate and the same gate repeated over K, over every registered kernel; meta tests."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.gates import scalar_gate_matches_repeated_vector

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.running import check_property

SMALL: dict[str, Any] = {"max_seq_len": 12, "max_head_dim": 4, "decays": ("mild", "steep")}

base = partial(
    example_spec,
    B=2,
    T=13,
    H=2,
    K=3,
    V=2,
    feature_map="elu1",
    normalize=True,
    eps=1e-06,
    decay="steep",
    initial_state=True,
    output_final_state=True,
    seed=7,
)

NASTY = {
    "overflowing-varlen": base(B=1, T=20, decay="overflowing", segments=(7, 0, 13)),
    "bf16-identity-unnormalized": base(
        dtype="bfloat16", feature_map="identity", normalize=False, eps=0.0
    ),
}


# Every example runs the kernel twice, forward and backward, with two bounds: under the
# interpreter a triton form took 40-50 s for the ci profile's 25. Ten draws here; the nasty cases
# below, tests/kernels/test_vector_gates_forms.py (the forms at larger sizes) and the soak do
# the rest.
@settings(max_examples=min(10, settings.default.max_examples))
@given(data=st.data())
def test_scalar_gate_matches_repeated_vector(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(scalar_gate_matches_repeated_vector, spec, linattn_kernel)


@pytest.mark.cases(NASTY)
def test_scalar_gate_matches_repeated_vector_on_nasty_cases(
    linattn_kernel: Kernel, spec: ProblemSpec
) -> None:
    result = check_property(scalar_gate_matches_repeated_vector, spec, linattn_kernel)
    if "vector" in linattn_kernel.capabilities.gates and linattn_kernel.capabilities.decay:
        assert result.status == "held", result.report()


# Meta tests: a kernel whose two gate paths differ must fail; the correct twin holds.

REFERENCE = float32_reference("recurrent")


def vector_path_uses_first_dimension(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # A vector gate applied as if it were dimension 0's gate everywhere: right whenever the
    # gate is repeated, so this property holds for it; the oracle properties catch it.
    if g is not None and g.ndim == 4:
        g = g[..., :1].expand_as(g)
    return REFERENCE(q, k, v, g, **kw)


def vector_gate_steps_once_late(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # The vector path reads the gate one token late (an off-by-one in its gate pointer).
    if g is not None and g.ndim == 4:
        g = g.roll(1, dims=1)
        g[:, 0] = 0.0
    return REFERENCE(q, k, v, g, **kw)


def test_a_vector_path_that_differs_fails() -> None:
    kernel = bug_kernel(vector_gate_steps_once_late)
    result = scalar_gate_matches_repeated_vector(base(), kernel)
    assert result.status == "failed", result.report()
    failed = {c.tensor for c in result.comparisons if not c.ok}
    assert {"o", "dg"} <= failed
    assert all(c.other == "the scalar gate" for c in result.comparisons)


def test_the_property_holds_where_both_paths_agree() -> None:
    twin = replace(bug_kernel(REFERENCE), name="twin")
    result = scalar_gate_matches_repeated_vector(base(), twin)
    assert result.status == "held", result.report()
    tensors = {c.tensor for c in result.comparisons}
    assert {"o", "final_state", "final_key_sum", "dq", "dk", "dv", "dg"} <= tensors
    # Blind, by design, to a vector path that is only wrong for gates that differ across K.
    blind = scalar_gate_matches_repeated_vector(
        base(), bug_kernel(vector_path_uses_first_dimension)
    )
    assert blind.status == "held", blind.report()


def test_not_applicable_without_a_scalar_gate_or_a_vector_path() -> None:
    kernel = bug_kernel(REFERENCE)
    assert scalar_gate_matches_repeated_vector(base(decay="none"), kernel).status == (
        "not_applicable"
    )
    scalar_only = bug_kernel(REFERENCE, gates=("scalar",))
    result = scalar_gate_matches_repeated_vector(base(), scalar_only)
    assert result.status == "not_applicable"
    assert "takes no vector gate" in result.reason
