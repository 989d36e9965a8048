# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Double-double arithmetic (`linattn_verify.core.dd_arith`) against exact rationals and mpmath.

The error-free transformations and the dd primitives the double-double oracles are built of.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.core.dd_arith import (
    dd_cumsum,
    dd_div,
    dd_exp,
    dd_matmul,
    dd_sum,
    fast_two_sum,
    two_prod,
    two_sum,
)

finite = st.floats(min_value=-1e150, max_value=1e150, allow_nan=False, allow_infinity=False)


# Error-free transformations and dd primitives.


@settings(deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=50))
def test_two_sum_and_fast_two_sum_are_error_free(pairs: list[tuple[float, float]]) -> None:
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])
    s, e = two_sum(a, b)
    big, small = np.where(abs(a) >= abs(b), a, b), np.where(abs(a) >= abs(b), b, a)
    fs, fe = fast_two_sum(big, small)
    for i in range(len(pairs)):
        exact = Fraction(a[i]) + Fraction(b[i])
        assert Fraction(s[i]) + Fraction(e[i]) == exact
        assert s[i] == float(exact)  # s is the rounded sum
        assert Fraction(fs[i]) + Fraction(fe[i]) == exact


@settings(deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=50))
def test_two_prod_is_error_free(pairs: list[tuple[float, float]]) -> None:
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])
    p, e = two_prod(a, b)
    for i in range(len(pairs)):
        exact = Fraction(a[i]) * Fraction(b[i])
        # Below 2^-969 the low part would be subnormal and can no longer be exact.
        if exact == 0 or abs(exact) > Fraction(2) ** -960:
            assert Fraction(p[i]) + Fraction(e[i]) == exact


def relative_bits(values: tuple[np.ndarray, np.ndarray], exact: list[Any]) -> float:
    with mpmath.workdps(80):
        worst = max(
            abs(mpmath.mpf(h) + mpmath.mpf(lo) - x) / abs(x)
            for h, lo, x in zip(values[0], values[1], exact, strict=True)
        )
        return -math.inf if worst == 0 else float(mpmath.log(worst, 2))


def test_dd_exp_is_accurate_to_2_pow_minus_99() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [rng.uniform(-650, 700, 200), rng.uniform(-1, 1, 100), rng.uniform(-1e-3, 0, 50)]
    )
    xl = x * rng.uniform(-1, 1, x.size) * 2.0**-54
    with mpmath.workdps(80):
        exact = [mpmath.exp(mpmath.mpf(a) + mpmath.mpf(b)) for a, b in zip(x, xl, strict=True)]
    assert relative_bits(dd_exp(x, xl), exact) <= -99
    # Below about 2^-969 the low part is subnormal: an absolute error of ~2^-1075 appears.
    tiny = rng.uniform(-745, -650, 50)
    th, tl = dd_exp(tiny, np.zeros_like(tiny))
    with mpmath.workdps(80):
        for a, h, lo in zip(tiny, th, tl, strict=True):
            exact = mpmath.exp(a)
            err = abs(mpmath.mpf(h) + mpmath.mpf(lo) - exact)
            assert err <= exact * mpmath.mpf(2) ** -99 + mpmath.mpf(2) ** -1072
    one = dd_exp(np.zeros(3), np.zeros(3))
    assert (one[0] == 1).all()
    assert (one[1] == 0).all()
    under, over = dd_exp(np.array([-800.0]), np.zeros(1)), dd_exp(np.array([800.0]), np.zeros(1))
    assert under[0][0] == 0
    assert over[0][0] == np.inf


def test_dd_div_is_accurate_to_2_pow_minus_104() -> None:
    rng = np.random.default_rng(2)
    ah, bh = rng.standard_normal(300), rng.standard_normal(300) * 10.0 ** rng.integers(-5, 5, 300)
    al, bl = ah * rng.uniform(-1, 1, 300) * 2.0**-54, bh * rng.uniform(-1, 1, 300) * 2.0**-54
    with mpmath.workdps(80):
        exact = [
            (mpmath.mpf(a) + mpmath.mpf(b)) / (mpmath.mpf(c) + mpmath.mpf(d))
            for a, b, c, d in zip(ah, al, bh, bl, strict=True)
        ]
    assert relative_bits(dd_div(ah, al, bh, bl), exact) <= -104


def test_dd_matmul_sum_and_cumsum_against_exact_rationals() -> None:
    rng = np.random.default_rng(3)
    # Wide exponent range and mixed signs: the error must scale with Σ|a||b|, not |a·b|.
    a = rng.standard_normal((4, 37)) * 2.0 ** rng.integers(-30, 30, (4, 37))
    b = rng.standard_normal((37, 3)) * 2.0 ** rng.integers(-30, 30, (37, 3))
    a_lo = a * rng.uniform(-1, 1, a.shape) * 2.0**-54
    hi, lo = dd_matmul(a, a_lo, b, None)
    magnitude = np.abs(a) @ np.abs(b)
    for i in range(4):
        for j in range(3):
            exact = sum(
                (Fraction(a[i, m]) + Fraction(a_lo[i, m])) * Fraction(b[m, j]) for m in range(37)
            )
            err = abs(Fraction(hi[i, j]) + Fraction(lo[i, j]) - exact)
            assert err <= Fraction(2.0**-100) * Fraction(magnitude[i, j])
    x = rng.standard_normal(101) * 2.0 ** rng.integers(-40, 40, 101)
    s = dd_sum(x)
    assert abs(Fraction(s[0]) + Fraction(s[1]) - sum(map(Fraction, x))) <= Fraction(
        2.0**-100
    ) * Fraction(np.abs(x).sum())
    g = -rng.uniform(0, 1, 200)
    ch, cl = dd_cumsum(g)
    running = Fraction(0)
    for t in range(200):
        running += Fraction(g[t])
        err = abs(Fraction(ch[t]) + Fraction(cl[t]) - running)
        assert err <= Fraction(2.0**-104) * (t + 1) * abs(running)


# The dd oracle against mpmath, mpmath against itself, exact against both.
