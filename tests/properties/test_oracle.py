# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Oracle agreement over every registered kernel, gradcheck of the float64 path, meta tests.

The meta tests feed deliberately wrong kernels (wrappers of the float32 torch reference) to each
property and check that it fails and says where, so every property is shown able to fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import event, given, note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from linattn_properties._testing import RARE_CASES, bug_kernel, example_spec
from linattn_properties.oracle import (
    float64_path_passes_gradcheck,
    gradients_match_oracle,
    outputs_match_oracle,
)

from linattn_verify.errors import PropertyViolation
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs, problem_specs
from linattn_verify.results import PropertyResult
from linattn_verify.running import check_property

# Small enough for the Triton interpreter: every example costs ~0.1-1 s per kernel call.
SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 6}


base = example_spec


@given(data=st.data())
def test_outputs_match_oracle(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(outputs_match_oracle, spec, linattn_kernel)


@given(data=st.data())
def test_gradients_match_oracle(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(gradients_match_oracle, spec, linattn_kernel)


@pytest.mark.cases(RARE_CASES)
def test_outputs_and_gradients_match_oracle_on_nasty_cases(
    linattn_kernel: Kernel, spec: ProblemSpec
) -> None:
    # @example cannot be combined with st.data(), so the nasty cases run here explicitly.
    for prop in (outputs_match_oracle, gradients_match_oracle):
        result = check_property(prop, spec, linattn_kernel)
        assert result.status == "held", result.report()


def _held(result: PropertyResult) -> None:
    """The oracle self-check has no kernel to save a failure for: it fails with its report."""
    if currently_in_test_context():
        note(result.report())
        event(result.status)
    if result.status == "failed":
        raise PropertyViolation(result.report(), result=result)


@given(spec=problem_specs(max_seq_len=24, max_head_dim=6, dtypes=("float32", "float16")))
def test_float64_path_passes_gradcheck(spec: ProblemSpec) -> None:
    _held(float64_path_passes_gradcheck(spec))


@pytest.mark.cases(RARE_CASES)
def test_float64_path_passes_gradcheck_on_nasty_cases(spec: ProblemSpec) -> None:
    _held(float64_path_passes_gradcheck(spec))


# Meta tests: deliberately wrong kernels must fail, with a message that says where.

REFERENCE = float32_reference("recurrent")


def drops_initial_state(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    kw.pop("initial_state", None)
    return REFERENCE(q, k, v, g, **kw)


class DoubledGradient(torch.autograd.Function):
    """Identity forward, twice the gradient backward: a wrong backward with a right forward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return 2 * grad


def wrong_dv(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    return REFERENCE(q, k, DoubledGradient.apply(v), g, **kw)


def returns_float64(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    return o.double(), final


def returns_nan_row(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    o = o.clone()
    o[0, -1, 0, 0] = torch.nan
    return o, final


def raises(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    raise RuntimeError("launch failed")


def returns_no_state(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    return REFERENCE(q, k, v, g, **kw)[0], None


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (drops_initial_state, "o is not close to the float64 oracle"),
        (
            returns_float64,
            "returned o of dtype torch.float64, expected the input dtype torch.float32",
        ),
        (returns_nan_row, "Finite/non-finite mismatches: 1"),
        (raises, "raised RuntimeError: launch failed"),
        (returns_no_state, "returned no final state although output_final_state=True"),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_outputs_match_oracle_fails_for_wrong_kernels(
    fn: Callable[..., Any], expected: str
) -> None:
    result = outputs_match_oracle(base(), bug_kernel(fn))
    assert result.status == "failed"
    assert expected in result.message(), result.message()
    assert result.report().startswith("outputs_match_oracle FAILED for bug/")


def test_outputs_match_oracle_passes_and_scores_the_correct_reference() -> None:
    result = outputs_match_oracle(base(), bug_kernel(REFERENCE, name="torch/ok"))
    assert result.status == "held", result.report()
    assert [(c.tensor, c.reference) for c in result.comparisons] == [
        ("o", "oracle"),
        ("final_state", "oracle"),
    ]
    o = result.comparisons[0]
    assert 0 < o.scores.r <= 1
    assert o.deciding == o.scores.r  # unnormalized: r decides
    assert o.scores.rho is not None
    assert o.scores.median_rho is not None
    assert o.scores.p999_r is not None
    assert o.scores.p999_r <= o.scores.r


def test_outputs_match_oracle_skips_unsupported_cases() -> None:
    kernel = bug_kernel(REFERENCE, name="torch/no-decay", decay=False)
    result = outputs_match_oracle(base(decay="mild"), kernel)
    assert result.status == "not_applicable"
    assert result.reason is not None
    assert "no decay support" in result.reason


def test_gradients_match_oracle_fails_for_a_wrong_backward() -> None:
    result = gradients_match_oracle(base(), bug_kernel(wrong_dv, name="bug/wrong_dv"))
    assert result.status == "failed"
    assert "dv is not close to the float64 oracle" in result.message(), result.message()
    # The forward is right, so only the gradient of v is blamed.
    by_tensor = {c.tensor: c for c in result.comparisons}
    assert by_tensor["o"].scores.r <= 1
    assert by_tensor["dv"].scores.r > 2
    assert [c.tensor for c in result.comparisons if not c.ok] == ["dv"]


def test_gradients_match_oracle_fails_for_a_kernel_without_autograd() -> None:
    def detached(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        o, final = REFERENCE(q, k, v, g, **kw)
        return o.detach(), final.detach()

    result = gradients_match_oracle(base(), bug_kernel(detached, name="bug/detached"))
    assert result.status == "failed"
    assert "backward raised RuntimeError" in result.message()


def test_gradients_match_oracle_skips_forward_only_kernels() -> None:
    result = gradients_match_oracle(base(), bug_kernel(REFERENCE, name="fwd", backward=False))
    assert result.status == "not_applicable"


def wrong_g_backward(problem: Problem) -> Any:
    assert problem.g is not None
    return parallel_reference(replace(problem, g=DoubledGradient.apply(problem.g)))


def test_float64_path_passes_gradcheck_fails_for_a_wrong_backward() -> None:
    result = float64_path_passes_gradcheck(base(), reference=wrong_g_backward)
    assert result.status == "failed"
    assert "Jacobian mismatch" in result.message(), result.message()
    assert result.kernel == "oracle/float64"


def test_float64_path_gradcheck_leaves_out_relu_kinks() -> None:
    result = float64_path_passes_gradcheck(base(feature_map="relu", values="zero_rows"))
    assert result.status == "held", result.report()
    assert "q left out" in result.message()
    assert "k left out" in result.message()
