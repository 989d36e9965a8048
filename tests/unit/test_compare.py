# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The comparison engine: oracle, pairwise and bitwise comparisons, their one message builder."""

from __future__ import annotations

import pytest
import torch

from linattn_verify.compare import (
    Side,
    assert_linattn_close,
    check_against_oracle,
    compare,
    compare_bitwise,
    compare_pair,
    mismatch_message,
)
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.results import Comparison
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
    assert c.scores.r == 0.0
    assert c.scores.eta is not None
    assert c.scores.eta <= 1.0  # the exact result leaves only the rounding residual


def test_nan_where_the_oracle_is_finite_fails() -> None:
    p = _problem()
    o, state = parallel_reference(p)
    o[0, 3, 1, 2] = float("nan")
    verdict = check_against_oracle(p, o, state, recipe=RECIPE)
    assert not verdict.ok
    assert verdict.comparisons[0].counts.nonfinite == 1
    assert verdict.comparisons[0].deciding == float("inf")
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
    assert c.counts.unverifiable == int((~fb.tensors["o"].verifiable).sum())
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
    assert verdict.reason is not None
    assert "dtype" in verdict.reason
    assert "final state" in verdict.reason


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


def test_pairwise_within_the_sum_of_bounds_holds_and_beyond_fails() -> None:
    p = _problem(normalize=False)
    tb = forward_bounds(p, RECIPE).tensors["o"]
    exact = tb.reference
    a = exact.float()
    # b is off by 1.5 (B_a + B_b) at one element: within the threshold 2.
    b = a.clone()
    b[0, 5, 0, 1] += 1.5 * 2 * float(tb.bound[0, 5, 0, 1])
    ok = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), exact)
    assert ok.ok
    assert ok.reference == "pair:b"
    assert ok.worst is not None
    assert ok.worst.index == (0, 5, 0, 1)
    b[0, 5, 0, 1] = a[0, 5, 0, 1] + 3 * 2 * float(tb.bound[0, 5, 0, 1])
    bad = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), exact)
    assert not bad.ok
    assert bad.deciding > 2
    assert bad.counts.mismatched == 1
    assert mismatch_message(bad).startswith("a and b disagree on o!")


def test_pairwise_nonfinite_on_one_side_fails() -> None:
    p = _problem(normalize=False)
    tb = forward_bounds(p, RECIPE).tensors["o"]
    a = tb.reference.float()
    b = a.clone()
    b[0, 0, 0, 0] = float("inf")
    c = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), tb.reference)
    assert not c.ok
    assert c.counts.nonfinite == 1


def test_bitwise_identical_holds_and_one_ulp_fails() -> None:
    x = torch.randn(3, 4)
    assert compare_bitwise("o", x, x.clone()).ok
    nan = torch.full((2,), float("nan"))
    assert compare_bitwise("o", nan, nan.clone()).ok  # NaN equals NaN bit for bit here
    y = x.clone()
    y[1, 2] = torch.nextafter(y[1, 2], torch.tensor(float("inf")))
    c = compare_bitwise("o", y, x, subject="k", condition="on a rerun")
    assert not c.ok
    assert c.counts.mismatched == 1
    assert c.worst is not None
    assert c.worst.index == (1, 2)
    text = mismatch_message(c)
    assert text.startswith("k o is not bit-identical on a rerun!")
    assert "0 allowed" in text


def test_bitwise_dtype_difference_is_a_reason_not_a_crash() -> None:
    c = compare_bitwise("o", torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert not c.ok
    assert c.reason is not None
    assert "dtype" in c.reason


def test_comparisons_survive_json() -> None:
    p = _problem()
    o, state = parallel_reference(p)
    o[0, 3, 1, 2] = float("nan")
    result = check_against_oracle(p, o, state, recipe=RECIPE)
    assert any(c.worst is not None and c.worst.actual != c.worst.actual for c in result.comparisons)
    for c in result.comparisons:
        # NaN != NaN, so compare the JSON (where a NaN is the string "nan").
        assert Comparison.from_json(c.to_json()).to_json() == c.to_json()
