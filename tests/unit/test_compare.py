# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The comparison engine: oracle, pairwise and bitwise comparisons, their one message builder."""

from __future__ import annotations

import json
import math

import pytest
import torch
from jsonschema import Draft202012Validator

from linattn_verify.compare import (
    Side,
    assert_linattn_close,
    check_against_oracle,
    compare,
    compare_bitwise,
    compare_pair,
    compare_within,
    mismatch_message,
)
from linattn_verify.compare.ulps import ulp_stats
from linattn_verify.core.bound import TensorBound
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.linear_attn._bounds.dependence import depends_on_rows
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds
from linattn_verify.reporting import run_schema
from linattn_verify.results import Comparison

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


# Declared zero-denominator conventions (docs/design.md §3): where the exact denominator is 0 the
# exact result is undefined; each convention says what the kernel returns there.

NAN, INF = float("nan"), float("inf")


def _zero_rows_problem() -> Problem:
    """T = 3, relu features: row 0 is 0/0 (q <= 0), row 1 is x/0 (z_0 = 0 and φ(k_0) = 0 where
    φ(q_1) > 0, but S_0 != 0), row 2 is an ordinary row."""
    q = torch.tensor([[-1.0, -2.0], [1.0, 0.0], [1.0, 1.0]]).reshape(1, 3, 1, 2)
    k = torch.tensor([[-1.0, 1.0], [-1.0, 1.0], [2.0, 1.0]]).reshape(1, 3, 1, 2)
    v = torch.tensor([[1.0], [2.0], [3.0]]).reshape(1, 3, 1, 1)
    S0 = torch.tensor([[4.0], [0.0]]).reshape(1, 1, 2, 1)
    z0 = torch.zeros(1, 1, 2)
    return validate_problem(
        q, k, v, normalize=True, feature_map="relu", initial_state=(S0, z0), scale=1.0
    )


def _o_bound(convention: str) -> TensorBound:
    return forward_bounds(_zero_rows_problem(), RECIPE, zero_denominator=convention).tensors["o"]


def _with_rows(row0: float, row1: float) -> torch.Tensor:
    o = _o_bound("zero").reference.float().clone()
    o[0, 0, 0, 0], o[0, 1, 0, 0] = row0, row1
    return o


def test_undefined_elements_are_the_rows_whose_exact_denominator_is_zero() -> None:
    tb = _o_bound("zero")
    assert tb.undefined is not None
    assert tb.undefined[0, :, 0, 0].tolist() == [True, True, False]
    assert tb.residual is not None
    assert tb.residual.numerator[0, :2, 0, 0].tolist() == [0.0, 4.0]  # 0/0, then x/0


@pytest.mark.parametrize(
    ("convention", "row0", "row1", "held"),
    [
        # zero: 0 on every row whose exact denominator is 0 (the harness's own convention).
        ("zero", 0.0, 0.0, True),
        ("zero", NAN, 0.0, False),
        ("zero", 0.0, INF, False),
        ("zero", 1e-30, 0.0, False),
        # ieee: NaN for 0/0, ±inf for x/0 (either sign: a computed zero's sign is not the exact
        # function's).
        ("ieee", NAN, INF, True),
        ("ieee", NAN, -INF, True),
        ("ieee", 0.0, INF, False),
        ("ieee", INF, INF, False),
        ("ieee", NAN, NAN, False),
        ("ieee", NAN, 4.0, False),
        # any: nothing judged there.
        ("any", 7.0, NAN, True),
        ("any", -INF, 0.0, True),
    ],
)
def test_undefined_elements_are_judged_by_the_declared_convention(
    convention: str, row0: float, row1: float, held: bool
) -> None:
    c = compare(_with_rows(row0, row1), _o_bound(convention))
    assert c.ok is held, mismatch_message(c)
    assert c.counts.undefined == 2
    if not held:
        assert c.deciding == INF
        assert c.worst is not None
        assert c.worst.index[1] in (0, 1)


def test_a_finite_value_where_ieee_declares_nan_is_a_nonfinite_mismatch() -> None:
    c = compare(_with_rows(0.0, INF), _o_bound("ieee"))
    assert c.counts.nonfinite == 1
    assert c.worst is not None
    assert c.worst.index == (0, 0, 0, 0)
    assert c.worst.actual == 0.0
    assert math.isnan(c.worst.expected)  # the declared value, not the oracle's convention
    assert "Finite/non-finite mismatches: 1" in mismatch_message(c)
    assert "elements undefined: 2" in mismatch_message(c)


def test_defined_elements_are_judged_the_same_under_every_convention() -> None:
    declared = {"zero": (0.0, 0.0), "ieee": (NAN, INF), "any": (0.0, 0.0)}
    for convention, rows in declared.items():
        o = _with_rows(*rows)
        o[0, 2, 0, 0] = NAN
        c = compare(o, _o_bound(convention))
        assert not c.ok
        assert c.worst is not None
        assert c.worst.index == (0, 2, 0, 0)


def test_cancelling_denominator_under_ieee_accepts_any_value() -> None:
    # Identity features with q·k = 0 but M^Z > 0: the computed denominator is rounding noise,
    # so its IEEE quotient is not determined.
    q, k = (
        torch.tensor([1.0, 1.0]).reshape(1, 1, 1, 2),
        torch.tensor([1.0, -1.0]).reshape(1, 1, 1, 2),
    )
    p = validate_problem(q, k, torch.ones(1, 1, 1, 1), normalize=True, scale=1.0)
    tb = forward_bounds(p, RECIPE, zero_denominator="ieee").tensors["o"]
    assert tb.undefined is not None
    assert bool(tb.undefined.all())
    for value in (NAN, INF, 123.0):
        assert compare(torch.full((1, 1, 1, 1), value), tb).ok


def test_gradients_depending_on_an_undefined_row_are_undefined() -> None:
    p = _zero_rows_problem()
    do = torch.ones(1, 3, 1, 1)
    bounds = {
        conv: backward_bounds(p, RECIPE, do=do, zero_denominator=conv)
        for conv in ("zero", "ieee", "any")
    }
    zero = bounds["zero"]
    # Rows 0 and 1 are undefined: dq at those rows, dk/dv at positions <= 1, the initial state.
    assert zero["q"].undefined is not None
    assert zero["q"].undefined[0, :, 0, 0].tolist() == [True, True, False]
    assert zero["k"].undefined is not None
    assert zero["k"].undefined[0, :, 0, 0].tolist() == [True, True, False]
    assert zero["v"].undefined is not None
    assert zero["v"].undefined[0, :, 0, 0].tolist() == [True, True, False]
    assert zero["initial_state"].undefined is not None
    assert bool(zero["initial_state"].undefined.all())
    # The bounds are those of the zero convention whatever the declaration.
    for conv in ("ieee", "any"):
        for name, tb in bounds[conv].items():
            assert torch.equal(tb.bound, zero[name].bound)
            assert tb.zero_denominator == conv
    # What an IEEE backward returns there (NaN) fails a "zero" kernel and is not judged for the
    # others: for them every gradient element of the sequence and head of an undefined row is
    # undefined (error-model §3.1: a masked 0·inf spreads the NaN through the chunk).
    grad = zero["q"].reference.float().clone()
    grad[0, :2] = NAN
    assert not compare(grad, zero["q"]).ok
    for conv in ("ieee", "any"):
        c = compare(grad, bounds[conv]["q"])
        assert c.ok, mismatch_message(c)
        assert c.counts.undefined == 6
        for name in ("k", "v"):
            assert bool(bounds[conv][name].undefined.all())  # type: ignore[union-attr]
        spread = zero["v"].reference.float().clone()
        spread[0, 2] = NAN  # a later key: defined, but lost by an IEEE backward
        assert compare(spread, bounds[conv]["v"]).ok
        assert not compare(spread, zero["v"]).ok


def test_depends_on_rows_follows_sequences_and_heads() -> None:
    p = validate_problem(
        torch.randn(1, 5, 2, 3),
        torch.randn(1, 5, 2, 3),
        torch.randn(1, 5, 2, 4),
        torch.zeros(1, 5, 2),
        initial_state=torch.zeros(2, 2, 3, 4),
        cu_seqlens=torch.tensor([0, 2, 5]),
    )
    rows = torch.zeros(1, 5, 2, dtype=torch.bool)
    rows[0, 3, 1] = True  # token 1 of sequence 1, head 1
    masks = depends_on_rows(p, rows)
    assert masks["q"][0, :, 1, 0].tolist() == [False, False, False, True, False]
    # Keys at positions <= t of the same sequence only (tokens 2, 3), and only head 1.
    assert masks["k"][0, :, 1, 0].tolist() == [False, False, True, True, False]
    assert masks["g"][0, :, 1].tolist() == [False, False, True, True, False]
    assert not bool(masks["v"][0, :, 0].any())
    assert masks["initial_state"][:, :, 0, 0].tolist() == [[False, False], [False, True]]
    assert masks["initial_key_sum"].shape == (2, 2, 3)


def test_pairwise_does_not_judge_an_undefined_element() -> None:
    tb = _o_bound("zero")
    a, b = _with_rows(NAN, INF), _with_rows(3.0, 0.0)
    c = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), tb.reference)
    assert c.ok, mismatch_message(c)
    assert c.counts.undefined == 2
    assert c.counts.unverifiable == 0
    # Without the mask the same pair fails: the rows would be judged.
    bare = Side("b", b, tb.bound, tb.verifiable)
    blind = compare_pair("o", Side("a", a, tb.bound, tb.verifiable), bare, tb.reference)
    assert not blind.ok
    # Undefined on one side is enough.
    assert compare_pair("o", Side.of("a", a, tb), bare, tb.reference).ok


def test_bitwise_skips_the_elements_named_undefined() -> None:
    x, y = torch.tensor([1.0, NAN, 2.0]), torch.tensor([1.0, 5.0, 2.0])
    assert not compare_bitwise("o", x, y).ok
    c = compare_bitwise("o", x, y, undefined=torch.tensor([False, True, False]))
    assert c.ok
    assert c.counts.undefined == 1
    y[2] = 3.0
    assert not compare_bitwise("o", x, y, undefined=torch.tensor([False, True, False])).ok


def test_check_against_oracle_notes_the_declared_convention() -> None:
    p = _zero_rows_problem()
    o = _with_rows(NAN, -INF)
    assert not check_against_oracle(p, o, recipe=RECIPE).ok  # "zero" by default
    result = check_against_oracle(p, o, recipe=RECIPE, zero_denominator="ieee")
    assert result.ok, result.report()
    assert any("declared zero_denominator='ieee'" in n for n in result.notes)


# Ulp statistics and severity (linattn_verify.compare.ulps, linattn_verify.triage).


def _fp16_o_bound() -> TensorBound:
    p = _problem(normalize=False).to(torch.float16)
    return forward_bounds(p, RECIPE).tensors["o"]


def test_a_16_bit_comparison_carries_the_ulp_statistics_of_its_exact_elements() -> None:
    tb = _fp16_o_bound()
    assert bool(tb.verifiable.all())
    actual = tb.reference.to(torch.float16)
    # Two elements rounded the other way: still faithful, no longer correct; one two ulps off.
    for index in ((0, 1, 0, 0), (0, 6, 1, 2)):
        toward = tb.reference[index].to(torch.float16)
        if float(toward) == float(tb.reference[index]):
            continue
        other = torch.tensor(math.inf if toward < tb.reference[index] else -math.inf)
        actual[index] = torch.nextafter(toward, other.to(torch.float16))
    actual[0, 9, 0, 1] = torch.nextafter(
        torch.nextafter(actual[0, 9, 0, 1], torch.tensor(math.inf, dtype=torch.float16)),
        torch.tensor(math.inf, dtype=torch.float16),
    )
    c = compare(actual, tb)
    stats = ulp_stats(actual, tb.reference)
    assert stats is not None
    assert stats.correctly_rounded < stats.faithfully_rounded < 1.0
    assert stats.max_ulps > 1.0
    assert c.scores.correctly_rounded == stats.correctly_rounded
    assert c.scores.faithfully_rounded == stats.faithfully_rounded
    assert c.scores.max_ulps == stats.max_ulps


def test_ulp_statistics_leave_out_undefined_elements_and_wider_dtypes() -> None:
    tb = _o_bound("zero")
    # Rows 0 and 1 are undefined: the oracle holds the convention's 0 there, not an exact value,
    # so the kernel's 0s there are no correctly rounded results. Row 2 is one ulp off.
    actual = _with_rows(0.0, 0.0).to(torch.float16)
    up = torch.tensor(math.inf, dtype=torch.float16)
    actual[0, 2, 0, 0] = torch.nextafter(actual[0, 2, 0, 0], up)
    c = compare(actual, tb)
    assert c.counts.undefined == 2
    stats = ulp_stats(actual[0, 2:], tb.reference[0, 2:])
    assert stats is not None
    assert stats.judged == 1
    assert c.scores.correctly_rounded == stats.correctly_rounded == 0.0
    assert c.scores.max_ulps == stats.max_ulps
    assert compare(actual.float(), tb).scores.max_ulps is None
    # A reference that is only a nearest admissible point gets no ulps.
    assert compare(actual, tb, exact_reference=False).scores.max_ulps is None


def test_a_failure_at_realistic_magnitudes_is_realistic() -> None:
    tb = _fp16_o_bound()
    actual = tb.reference.to(torch.float16)
    actual[0, 4, 1, 1] += 0.25
    c = compare(actual, tb)
    assert not c.ok
    assert c.worst is not None
    assert c.worst.index == (0, 4, 1, 1)
    assert c.severity == "realistic"
    assert "Severity: realistic" in mismatch_message(c)
    assert c.scores.max_ulps is not None
    assert c.scores.max_ulps > 1


def test_a_failure_whose_worst_element_is_tiny_is_extreme_range() -> None:
    exact = torch.tensor([1.0, 1e-30, -2.0], dtype=torch.float64)
    bound = exact.abs() * 1e-7
    actual = torch.tensor([1.0, 1.5e-30, -2.0], dtype=torch.float32)
    c = compare_within("S", actual, exact, bound, magnitude=exact.abs(), unit=2.0**-24)
    assert not c.ok
    assert c.worst is not None
    assert c.worst.index == (1,)
    assert c.severity == "extreme-range"
    assert c.scores.max_ulps is None  # fp32: no ulps reported
    held = compare_within("S", exact.float(), exact, bound, magnitude=exact.abs(), unit=2.0**-24)
    assert held.ok
    assert held.severity is None


def test_pairwise_failures_carry_a_severity_but_no_ulps_and_bitwise_ones_neither() -> None:
    tb = _fp16_o_bound()
    a = tb.reference.to(torch.float16)
    b = a.clone()
    same = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), tb.reference)
    assert same.ok
    assert same.severity is None
    b[0, 2, 0, 0] += 0.5
    c = compare_pair("o", Side.of("a", a, tb), Side.of("b", b, tb), tb.reference)
    assert not c.ok
    assert c.severity == "realistic"
    assert c.scores.max_ulps is None
    assert c.scores.correctly_rounded is None
    bits = compare_bitwise("o", b, a)
    assert not bits.ok
    assert bits.severity is None


def test_ulps_and_severity_survive_json() -> None:
    tb = _fp16_o_bound()
    actual = tb.reference.to(torch.float16)
    actual[0, 4, 1, 1] += 0.25
    c = compare(actual, tb)
    assert c.severity is not None
    assert c.scores.max_ulps is not None
    data = json.loads(json.dumps(c.to_json()))
    assert Comparison.from_json(data) == c
    schema = run_schema()
    comparison_schema = {"$ref": "#/$defs/comparison", "$defs": schema["$defs"]}
    Draft202012Validator(comparison_schema).validate(data)
