# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Ulp statistics of 16-bit outputs: correctly rounded, faithfully rounded, error in ulps."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from linattn_verify.compare.ulps import ulp_stats

DTYPES = [torch.float16, torch.bfloat16]


def _neighbours(value: float, dtype: torch.dtype) -> tuple[float, float]:
    """The two dtype values around a non-representable ``value``, by brute force on patterns."""
    patterns = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = patterns.view(dtype).double()
    finite = values[torch.isfinite(values)]
    below = finite[finite <= value].max()
    above = finite[finite >= value].min()
    return float(below), float(above)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@given(x=st.floats(min_value=-6e4, max_value=6e4, allow_nan=False, allow_subnormal=True))
def test_rounding_exactly_is_correct_and_the_other_neighbour_is_faithful(
    dtype: torch.dtype, x: float
) -> None:
    exact = torch.tensor([x], dtype=torch.float64)
    nearest = exact.to(dtype)
    stats = ulp_stats(nearest, exact)
    assert stats is not None
    assert stats.correctly_rounded == 1.0
    assert stats.faithfully_rounded == 1.0
    assert stats.max_ulps <= 0.5
    lo, hi = _neighbours(x, dtype)
    if lo != hi:
        other = hi if float(nearest) == lo else lo
        far = ulp_stats(torch.tensor([other], dtype=dtype), exact)
        assert far is not None
        # The other bracketing value is faithful, not correct (unless x is a tie, where the
        # nearest-even rule picked one of two equally near values).
        assert far.faithfully_rounded == 1.0
        assert far.max_ulps <= 1.0
        if abs(other - x) != abs(float(nearest) - x):
            assert far.correctly_rounded == 0.0


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_one_step_beyond_the_bracket_is_not_faithful(dtype: torch.dtype) -> None:
    # Just above a power of two the value below the bracket is only half an ulp further down:
    # less than one ulp from x, yet not one of its two neighbours. Faithfulness is decided on
    # the bracket, not on the error in ulps.
    x = 1.0 + 2.0**-12
    lo, _ = _neighbours(x, dtype)
    below_lo, _ = _neighbours(lo - 1e-12, dtype)
    stats = ulp_stats(torch.tensor([below_lo], dtype=dtype), torch.tensor([x], dtype=torch.float64))
    assert stats is not None
    assert stats.faithfully_rounded == 0.0
    assert stats.correctly_rounded == 0.0
    assert 0.5 < stats.max_ulps < 1.0


def test_shares_count_elements_and_skip_the_unjudgeable() -> None:
    exact = torch.tensor([0.1, 0.2, 0.3, float("inf"), 1e6], dtype=torch.float64)
    actual = exact.to(torch.float16).clone()
    actual[1] = -actual[1]
    stats = ulp_stats(actual, exact)
    assert stats is not None
    # inf is not judged, nor is 1e6 (beyond fp16's range): three elements, one wrong.
    assert stats.judged == 3
    assert stats.correctly_rounded == pytest.approx(2 / 3)
    assert stats.faithfully_rounded == pytest.approx(2 / 3)
    assert stats.max_ulps > 100


def test_other_dtypes_have_no_ulp_statistics() -> None:
    exact = torch.tensor([0.1], dtype=torch.float64)
    assert ulp_stats(exact.float(), exact) is None
    assert ulp_stats(torch.tensor([float("nan")], dtype=torch.float16), exact) is None
