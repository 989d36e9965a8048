# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The comparison: scores, the zero-denominator rule, non-finite values and messages."""

from __future__ import annotations

import pytest
import torch

from linattn_verify.compare import assert_linattn_close, check_against_oracle, compare
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import validate_problem
from linattn_verify.tolerance import forward_bounds

RECIPE = PrecisionRecipe(form="parallel", dots_on_path=0, decay_scan="global")


def _problem(normalize: bool = True, feature_map: str = "elu1", T: int = 12, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, T, 2, 4, generator=gen), torch.randn(1, T, 2, 4, generator=gen)
    v = torch.randn(1, T, 2, 3, generator=gen)
    return validate_problem(
        q,
        k,
        v,
        normalize=normalize,
        eps=1e-6 if normalize else 0.0,
        feature_map=feature_map,
        output_final_state=True,
    )


def test_exact_result_scores_zero() -> None:
    p = _problem()
    fb = forward_bounds(p, RECIPE)
    c = compare(fb.tensors["o"].reference.clone(), fb.tensors["o"])
    assert c.ok
    assert c.max_r == 0.0
    assert c.max_eta is not None
    assert c.max_eta <= 1.0  # the exact result leaves only the rounding residual


def test_nan_where_the_oracle_is_finite_fails() -> None:
    p = _problem()
    o, state = parallel_reference(p)
    o[0, 3, 1, 2] = float("nan")
    verdict = check_against_oracle(p, o, state, recipe=RECIPE)
    assert not verdict.ok
    assert verdict.comparisons[0].nonfinite_mismatches == 1
    assert "Finite/non-finite mismatches: 1" in verdict.report()


def test_zero_denominator_row_must_be_exactly_zero() -> None:
    # relu features of all-negative queries vanish: the 0/0 row is defined as 0.
    q = -torch.rand(1, 4, 1, 3) - 0.1
    k, v = torch.rand(1, 4, 1, 3), torch.randn(1, 4, 1, 2)
    p = validate_problem(q, k, v, normalize=True, feature_map="relu")
    fb = forward_bounds(p, RECIPE)
    assert torch.equal(fb.tensors["o"].bound, torch.zeros_like(fb.o))
    assert compare(torch.zeros(1, 4, 1, 2), fb.tensors["o"]).ok
    wrong = torch.full((1, 4, 1, 2), 1e-30)
    assert not compare(wrong, fb.tensors["o"]).ok


def test_cancelling_identity_denominators_are_counted_not_judged_by_r() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 64, 1, 8, generator=gen), torch.randn(1, 64, 1, 8, generator=gen)
    v = torch.randn(1, 64, 1, 4, generator=gen)
    p = validate_problem(q, k, v, normalize=True, feature_map="identity", scale=1.0)
    o, _ = parallel_reference(p)
    verdict = assert_linattn_close(p, o, recipe=RECIPE)
    c = verdict.comparisons[0]
    fb = forward_bounds(p, RECIPE)
    Z = fb.tensors["o"].residual.denominator
    assert c.unverifiable == int((~fb.tensors["o"].verifiable).sum())
    assert (
        fb.tensors["o"].residual.denominator_bound[~fb.tensors["o"].verifiable[..., :1]]
        >= Z.abs()[~fb.tensors["o"].verifiable[..., :1]] / 2
    ).all()


def test_failure_message_names_tensor_index_bound_and_case() -> None:
    p = _problem(normalize=False)
    o, state = parallel_reference(p)
    o[0, 7, 1, 0] += 1e-3
    with pytest.raises(PropertyViolation) as info:
        assert_linattn_close(p, o, state, recipe=RECIPE, name="triton/chunk")
    text = str(info.value)
    assert "triton/chunk o is not close to the float64 oracle!" in text
    assert "at index (0, 7, 1, 0)" in text
    assert "bound" in text
    assert "B=1 T=12 H=2 K=4 V=3" in text
    assert "PrecisionRecipe(form='parallel'" in text


def test_contract_wrong_dtype_and_missing_state() -> None:
    p = _problem(normalize=False)
    o, _ = parallel_reference(p)
    verdict = check_against_oracle(p, o.double(), None, recipe=RECIPE)
    assert not verdict.ok
    assert any("dtype" in e for e in verdict.contract_errors)
    assert any("final state" in e for e in verdict.contract_errors)


def test_shape_mismatch_is_reported_not_raised() -> None:
    p = _problem(normalize=False)
    o, state = parallel_reference(p)
    verdict = check_against_oracle(p, o[:, :-1], state, recipe=RECIPE)
    assert not verdict.ok
    assert "expected shape" in verdict.report()


def test_grads_without_cotangent_is_an_argument_error() -> None:
    p = _problem(normalize=False)
    o, state = parallel_reference(p)
    with pytest.raises(InvalidArgument, match="do"):
        check_against_oracle(p, o, state, recipe=RECIPE, grads={"q": torch.zeros_like(p.q)})
