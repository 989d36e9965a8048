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
from hypothesis import event, given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import RARE_CASES, bug_kernel, example_spec
from linattn_properties.oracle import (
    float64_path_passes_gradcheck,
    gradients_match_oracle,
    outputs_match_oracle,
)

from linattn_verify.errors import PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec, kernel_specs, problem_specs
from linattn_verify.verdict import PropertyResult

# Small enough for the Triton interpreter: every example costs ~0.1-1 s per kernel call.
SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 6}


base = example_spec


def check(result: PropertyResult) -> None:
    note(result.report())
    event("skipped" if result.skipped else "checked")
    scores = [v for k, v in result.scores.items() if not k.endswith("rho")]
    if scores:
        target(max(scores), label="worst score")
    result.raise_for_failure()


@given(data=st.data())
def test_outputs_match_oracle(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check(outputs_match_oracle(spec, kernel))


@given(data=st.data())
def test_gradients_match_oracle(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check(gradients_match_oracle(spec, kernel))


@pytest.mark.cases(RARE_CASES)
def test_outputs_and_gradients_match_oracle_on_nasty_cases(
    kernel: Kernel, spec: ProblemSpec
) -> None:
    # @example cannot be combined with st.data(), so the nasty cases run here explicitly.
    for prop in (outputs_match_oracle, gradients_match_oracle):
        result = prop(spec, kernel)
        assert result.skipped is None, result.report()
        result.raise_for_failure()


@given(spec=problem_specs(max_seq_len=24, max_head_dim=6, dtypes=("float32", "float16")))
def test_float64_path_passes_gradcheck(spec: ProblemSpec) -> None:
    check(float64_path_passes_gradcheck(spec))


@pytest.mark.cases(RARE_CASES)
def test_float64_path_passes_gradcheck_on_nasty_cases(spec: ProblemSpec) -> None:
    float64_path_passes_gradcheck(spec).raise_for_failure()


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
    assert not result.ok
    assert result.skipped is None
    assert expected in result.message, result.message
    with pytest.raises(PropertyViolation, match="outputs_match_oracle FAILED"):
        result.raise_for_failure()


def test_outputs_match_oracle_passes_and_scores_the_correct_reference() -> None:
    result = outputs_match_oracle(base(), bug_kernel(REFERENCE, name="torch/ok"))
    assert result.ok, result.report()
    assert set(result.scores) == {
        "o.max_r",
        "o.max_rho",
        "o.p999_r",
        "o.median_rho",
        "final_state.max_r",
        "final_state.max_rho",
        "final_state.p999_r",
        "final_state.median_rho",
    }
    assert 0 < result.scores["o.max_r"] <= 1


def test_outputs_match_oracle_skips_unsupported_cases() -> None:
    kernel = bug_kernel(REFERENCE, name="torch/no-decay", decay=False)
    result = outputs_match_oracle(base(decay="mild"), kernel)
    assert result.ok
    assert result.skipped is not None
    assert "no decay support" in result.skipped


def test_gradients_match_oracle_fails_for_a_wrong_backward() -> None:
    result = gradients_match_oracle(base(), bug_kernel(wrong_dv, name="bug/wrong_dv"))
    assert not result.ok
    assert "dv is not close to the float64 oracle" in result.message, result.message
    # The forward is right, so only the gradient of v is blamed.
    assert result.scores["o.max_r"] <= 1
    assert result.scores["dv.max_r"] > 2


def test_gradients_match_oracle_fails_for_a_kernel_without_autograd() -> None:
    def detached(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        o, final = REFERENCE(q, k, v, g, **kw)
        return o.detach(), final.detach()

    result = gradients_match_oracle(base(), bug_kernel(detached, name="bug/detached"))
    assert not result.ok
    assert "backward raised RuntimeError" in result.message


def test_gradients_match_oracle_skips_forward_only_kernels() -> None:
    result = gradients_match_oracle(base(), bug_kernel(REFERENCE, name="fwd", backward=False))
    assert result.ok
    assert result.skipped is not None


def wrong_g_backward(problem: Problem) -> Any:
    assert problem.g is not None
    return parallel_reference(replace(problem, g=DoubledGradient.apply(problem.g)))


def test_float64_path_passes_gradcheck_fails_for_a_wrong_backward() -> None:
    result = float64_path_passes_gradcheck(base(), reference=wrong_g_backward)
    assert not result.ok
    assert "Jacobian mismatch" in result.message, result.message
    assert result.kernel == "oracle/float64"


def test_float64_path_gradcheck_leaves_out_relu_kinks() -> None:
    result = float64_path_passes_gradcheck(base(feature_map="relu", values="zero_rows"))
    assert result.ok, result.report()
    assert "q left out" in result.message
    assert "k left out" in result.message
