# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Double-double arithmetic in numpy: the building blocks of the double-double oracle.

A double-double (dd) value is an unevaluated sum ``hi + lo`` of two float64 arrays with
``|lo| <= ulp(hi)/2``; it carries about 106 bits. The building blocks are the error-free
transformations TwoSum (Knuth), Fast2Sum (Dekker) and TwoProd by Veltkamp splitting (numpy has
no fma), and the dd operations of Joldes, Muller & Popescu (ACM TOMS 44(2), 2017):
AccurateDWPlusDW (relative error <= 3u^2), DWTimesDW (<= 7u^2), DWTimesFP (<= 2u^2), with
u = 2^-53. Sums of many terms use a pairwise tree that carries each partial sum as a float64
``s`` (combined by TwoSum) plus a float64 compensation ``c`` (the TwoSum errors and the low parts,
added plainly); its error is about 2 u^2 ceil(log2 n)^2 Σ|x_i| (docs/error-model.md §6.2).
The oracles built on it: `linattn_verify.linear_attn.oracles.double_double` and
`linattn_verify.delta.high_precision`; `mpf_to_float` rounds their mpmath certificates.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import numpy.typing as npt

from linattn_verify.errors import InvalidArgument

Array = npt.NDArray[np.float64]
DD = tuple[Array, Array]
"""A double-double array as the pair ``(hi, lo)``."""

_SPLITTER = 134217729.0  # 2^27 + 1: Veltkamp's constant for 53-bit significands.
# Products per block of a dd matmul; ~0.5 MiB per temporary keeps the elementwise passes in cache.
_BLOCK_ELEMENTS = 1 << 16


def _dd_constant(value: Fraction) -> tuple[float, float]:
    hi = float(value)
    return hi, float(value - Fraction(hi))


def _ln2_parts() -> tuple[float, float, float]:
    # Three float64 pieces of ln 2 so that k·ln2 is known to ~2^-159 relative for |k| <= 1100.
    with mpmath.workprec(320):
        ln2 = mpmath.log(2)
        first = float(ln2)
        second = float(ln2 - first)
        third = float(ln2 - first - second)
    return first, second, third


_LN2 = _ln2_parts()
_INV_FACTORIALS = [_dd_constant(Fraction(1, math.factorial(i))) for i in range(11)]
# exp(x) rounds to 0 below this (half the smallest subnormal) and overflows above _EXP_MAX.
_EXP_MIN = -745.2
_EXP_MAX = 709.78


def two_sum(a: Array, b: Array) -> DD:
    """Return ``(s, e)`` with s = fl(a + b) and s + e = a + b exactly (Knuth, 6 flops)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def fast_two_sum(a: Array, b: Array) -> DD:
    """Return ``(s, e)`` with s + e = a + b exactly, provided |a| >= |b| or a = 0 (Dekker)."""
    s = a + b
    e = b - (s - a)
    return s, e


def split(a: Array) -> DD:
    """Split a into ``(hi, lo)``, a = hi + lo exactly, each with at most 26 significant bits."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a: Array, b: Array) -> DD:
    """Return ``(p, e)`` with p = fl(a·b) and p + e = a·b exactly (Dekker/Veltkamp, 17 flops)."""
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def dd_add(ah: Array, al: Array, bh: Array, bl: Array) -> DD:
    """Return a + b (AccurateDWPlusDW; relative error <= 3u^2 of the exact sum)."""
    sh, sl = two_sum(ah, bh)
    th, tl = two_sum(al, bl)
    vh, vl = fast_two_sum(sh, sl + th)
    return fast_two_sum(vh, tl + vl)


def dd_add_d(ah: Array, al: Array, b: Array | float) -> DD:
    """Return a + b for a float64 b (DWPlusFP; relative error <= 2u^2)."""
    sh, sl = two_sum(ah, np.asarray(b, dtype=np.float64))
    return fast_two_sum(sh, al + sl)


def dd_mul(ah: Array, al: Array, bh: Array, bl: Array) -> DD:
    """Return a·b (DWTimesDW1; relative error <= 7u^2)."""
    ch, cl1 = two_prod(ah, bh)
    cl3 = cl1 + (ah * bl + al * bh)
    return fast_two_sum(ch, cl3)


def dd_mul_d(ah: Array, al: Array, b: Array | float) -> DD:
    """Return a·b for a float64 b (DWTimesFP1; relative error <= 2u^2)."""
    b = np.asarray(b, dtype=np.float64)
    ch, cl1 = two_prod(ah, b)
    th, tl1 = fast_two_sum(ch, al * b)
    return fast_two_sum(th, tl1 + cl1)


def dd_div(ah: Array, al: Array, bh: Array, bl: Array) -> DD:
    """Return a / b by three correction steps (about 2^-104 relative). b must be nonzero."""
    q1 = ah / bh
    rh, rl = dd_mul_d(bh, bl, q1)
    rh, rl = dd_add(ah, al, -rh, -rl)
    q2 = rh / bh
    ph, pl = dd_mul_d(bh, bl, q2)
    rh, rl = dd_add(rh, rl, -ph, -pl)
    q3 = rh / bh
    q1, q2 = fast_two_sum(q1, q2)
    return dd_add_d(q1, q2, q3)


def dd_exp(xh: Array, xl: Array) -> DD:
    """Return exp(x) with relative error about 2^-100 (for results in the normal range).

    x = k ln2 + r with ln2 in three parts, r' = r/256, expm1(r') by a degree-10 Taylor
    polynomial (the terms of degree >= 6 in float64: they contribute below 2^-57 of r'), then
    eight squarings in expm1 form f <- f(f + 2), which keep relative accuracy for small f, and
    finally exp(x) = 2^k (1 + f).
    """
    xh = np.asarray(xh, dtype=np.float64)
    xl = np.broadcast_to(np.asarray(xl, dtype=np.float64), xh.shape)
    under = xh < _EXP_MIN
    over = xh > _EXP_MAX
    xh = np.where(under | over, 0.0, xh)
    xl = np.where(under | over, 0.0, xl)
    k = np.rint(xh / _LN2[0])
    rh, rl = xh, xl
    for part in _LN2[:2]:
        ph, pl = two_prod(k, np.full_like(k, part))
        rh, rl = dd_add(rh, rl, -ph, -pl)
    rh, rl = dd_add_d(rh, rl, -k * _LN2[2])
    rh, rl = rh * 2.0**-8, rl * 2.0**-8
    p = np.full_like(rh, _INV_FACTORIALS[10][0])
    for i in range(9, 5, -1):
        p = p * rh + _INV_FACTORIALS[i][0]
    ph, pl = p, np.zeros_like(p)
    for i in range(5, 0, -1):
        ph, pl = dd_mul(ph, pl, rh, rl)
        ph, pl = dd_add(ph, pl, *(np.full_like(rh, c) for c in _INV_FACTORIALS[i]))
    fh, fl = dd_mul(ph, pl, rh, rl)
    for _ in range(8):
        gh, gl = dd_add_d(fh, fl, 2.0)
        fh, fl = dd_mul(fh, fl, gh, gl)
    eh, el = dd_add_d(fh, fl, 1.0)
    exponent = k.astype(np.int32)
    with np.errstate(over="ignore", under="ignore"):
        eh, el = np.ldexp(eh, exponent), np.ldexp(el, exponent)
    eh = np.where(under, 0.0, np.where(over, np.inf, eh))
    el = np.where(under | over, 0.0, el)
    return eh, el


def dd_sum(hi: Array, lo: Array | None = None, axis: int = -1) -> DD:
    """Return the sum along ``axis`` by a pairwise tree (error ~2u² log2(n)² Σ|x|)."""
    s = np.moveaxis(np.asarray(hi, dtype=np.float64), axis, 0)
    c = np.zeros_like(s) if lo is None else np.moveaxis(np.asarray(lo, dtype=np.float64), axis, 0)
    if s.shape[0] == 0:
        zeros = np.zeros(s.shape[1:])
        return zeros, zeros.copy()
    return _tree_sum(s, c)


def _tree_sum(s: Array, c: Array) -> DD:
    """Sum ``s + c`` over axis 0: TwoSum on the s tree, the errors and c added in float64."""
    n = s.shape[0]
    while n > 1:
        h = n // 2
        a, b = s[:h], s[h : 2 * h]
        x = a + b
        bb = x - a
        cc = c[:h] + c[h : 2 * h]
        cc += (a - (x - bb)) + (b - bb)
        if n % 2:
            # Fold the odd element into the first pair rather than copying the arrays.
            x0, e0 = two_sum(x[0], s[2 * h])
            x[0] = x0
            cc[0] += c[2 * h] + e0
        s, c, n = x, cc, h
    return two_sum(s[0], c[0])


def dd_cumsum(hi: Array, lo: Array | None = None, axis: int = -1) -> DD:
    """Return the running sums along ``axis`` (sequential AccurateDWPlusDW, 3u² per step).

    Sequential accumulation makes G_t - G_j carry only the roundings of steps j+1..t, which is
    what the decay weights exp(G_t - G_j) need.
    """
    x = np.moveaxis(np.asarray(hi, dtype=np.float64), axis, 0)
    y = None if lo is None else np.moveaxis(np.asarray(lo, dtype=np.float64), axis, 0)
    out_h, out_l = np.zeros_like(x), np.zeros_like(x)
    if x.shape[0]:
        sh, sl = x[0].copy(), (np.zeros_like(x[0]) if y is None else y[0].copy())
        sh, sl = fast_two_sum(sh, sl)
        out_h[0], out_l[0] = sh, sl
        for i in range(1, x.shape[0]):
            sh, sl = dd_add_d(sh, sl, x[i]) if y is None else dd_add(sh, sl, x[i], y[i])
            out_h[i], out_l[i] = sh, sl
    return np.moveaxis(out_h, 0, axis), np.moveaxis(out_l, 0, axis)


def dd_matmul(a_hi: Array, a_lo: Array | None, b_hi: Array, b_lo: Array | None) -> DD:
    """Return ``a @ b`` for dd (or float64, lo `None`) operands ``[..., m, k] @ [..., k, n]``.

    Every product is formed exactly (TwoProd on pre-split operands) plus the cross terms with
    the low parts, and the k products are summed by `_tree_sum`, in blocks of rows that bound the
    memory to about `_BLOCK_ELEMENTS` products per temporary.
    """
    batch = np.broadcast_shapes(a_hi.shape[:-2], b_hi.shape[:-2])
    m, k = a_hi.shape[-2:]
    n = b_hi.shape[-1]
    if b_hi.shape[-2] != k:
        raise InvalidArgument(f"Expected b of shape [..., {k}, n] but got {b_hi.shape}.")

    def prepare(x: Array | None, rows: int, cols: int, transpose: bool) -> Array | None:
        if x is None:
            return None
        x = np.broadcast_to(x, (*batch, rows, cols)).reshape(-1, rows, cols)
        # Lay the summed axis first so the tree halves contiguous slabs.
        order = (2, 0, 1) if transpose else (1, 0, 2)
        return np.ascontiguousarray(x.transpose(order))

    ah, al = prepare(a_hi, m, k, True), prepare(a_lo, m, k, True)  # [k, Bt, m]
    bh, bl = prepare(b_hi, k, n, False), prepare(b_lo, k, n, False)  # [k, Bt, n]
    assert ah is not None
    assert bh is not None
    a1, a2 = split(ah)
    b1, b2 = split(bh)
    Bt = ah.shape[1]
    out_h = np.zeros((Bt, m, n))
    out_l = np.zeros((Bt, m, n))
    if k == 0 or m == 0 or n == 0:
        return out_h.reshape(*batch, m, n), out_l.reshape(*batch, m, n)
    rows = max(1, _BLOCK_ELEMENTS // (k * n))
    batches = max(1, rows // m)
    rows = min(rows, m)
    for i in range(0, Bt, batches):
        bs = slice(i, i + batches)
        for j in range(0, m, rows):
            rs = slice(j, j + rows)
            x, x1, x2 = ah[:, bs, rs, None], a1[:, bs, rs, None], a2[:, bs, rs, None]
            y, y1, y2 = bh[:, bs, None, :], b1[:, bs, None, :], b2[:, bs, None, :]
            p = x * y
            e = x1 * y1
            e -= p
            e += x1 * y2
            e += x2 * y1
            e += x2 * y2
            if al is not None:
                e += al[:, bs, rs, None] * y
            if bl is not None:
                e += x * bl[:, bs, None, :]
            sh, sl = _tree_sum(p, e)
            out_h[bs, rs], out_l[bs, rs] = sh, sl
    return out_h.reshape(*batch, m, n), out_l.reshape(*batch, m, n)


def dd_feature_map(x: Array, feature_map: str) -> tuple[Array, Array | None]:
    """Return φ(x) as a dd pair; lo is `None` where φ is exact in float64 (identity, relu)."""
    if feature_map == "identity":
        return x, None
    if feature_map == "relu":
        return np.maximum(x, 0.0), None
    if feature_map == "exp":
        return dd_exp(x, np.zeros_like(x))
    ph, pl = two_sum(x, np.ones_like(x))
    eh, el = dd_exp(np.minimum(x, 0.0), np.zeros_like(x))
    positive = x > 0
    return np.where(positive, ph, eh), np.where(positive, pl, el)


def dd_mul_d2(ah: Array, al: Array, b: tuple[float, float]) -> DD:
    """Return a·b for a dd constant b (a pair of floats), as `dd_mul`."""
    return dd_mul(ah, al, np.full_like(ah, b[0]), np.full_like(ah, b[1]))


def _dd_inverse_sqrt(n: int) -> tuple[float, float]:
    """1/√n as a dd pair (to ~2^-106), from mpmath at 200 bits."""
    with mpmath.workprec(200):
        value = 1 / mpmath.sqrt(n)
        hi = float(value)
        return hi, float(value - hi)


def _dd_outer(xh: Array, xl: Array | None) -> DD:
    """(x_i x_j) i-major ``[..., K*K]`` as dd products."""
    lo = None if xl is None else xl[..., :, None]
    lo_t = None if xl is None else xl[..., None, :]
    if lo is None or lo_t is None:
        ph, pl = two_prod(xh[..., :, None], xh[..., None, :])
    else:
        ph, pl = dd_mul(xh[..., :, None], lo, xh[..., None, :], lo_t)
    shape = (*xh.shape[:-1], -1)
    return ph.reshape(shape), pl.reshape(shape)


def dd_lift(
    x: Array,
    feature_map: str,
    *,
    prescale: float = 1.0,
    weights: Array | None = None,
    stabilise: bool = False,
) -> DD:
    """Return a lifted map's φ(prescale·x) ``[..., F]`` as a dd pair (docs: feature_maps).

    ``stabilise`` (favor+ only) subtracts c = max_f y_f from each row's exponents first: the
    features of a normalized favor+ query with eps = 0 (`linattn_verify.linear_attn.semantics`).
    """
    if prescale == 1.0:
        xh, xl = x, np.zeros_like(x)
    else:
        xh, xl = two_prod(x, np.full_like(x, prescale))
    if feature_map == "softmax":
        # exp(x - m) / Σ exp(x - m): x - m exact as a dd pair, so the only error is dd's own.
        eh, el = dd_exp(*dd_add_d(xh, xl, -xh.max(axis=-1, keepdims=True)))
        sh, sl = dd_sum(eh, el)
        return dd_div(eh, el, sh[..., None], sl[..., None])
    if feature_map in ("taylor2", "rebased"):
        qh, ql = _dd_outer(xh, xl)
        if feature_map == "rebased":
            return qh, ql
        qh, ql = dd_mul_d2(qh, ql, _INV_SQRT2)
        one = np.ones_like(xh[..., :1])
        return (
            np.concatenate([one, xh, qh], axis=-1),
            np.concatenate([np.zeros_like(one), xl, ql], axis=-1),
        )
    assert feature_map == "favor+"
    assert weights is not None, "favor+ needs its projection W [m, K]"
    wx = dd_matmul(xh, xl, np.ascontiguousarray(weights.T), None)  # [..., m]
    sq = dd_sum(*dd_mul(xh, xl, xh, xl))  # |x|² [...]
    yh, yl = dd_add(wx[0], wx[1], -0.5 * sq[0][..., None], -0.5 * sq[1][..., None])
    if stabilise:
        yh, yl = dd_add_d(yh, yl, -yh.max(axis=-1, keepdims=True))
    eh, el = dd_exp(yh, yl)
    return dd_mul_d2(eh, el, _dd_inverse_sqrt(weights.shape[0]))


_INV_SQRT2 = _dd_inverse_sqrt(2)


def mpf_to_float(x: Any) -> float:
    """Return the float64 nearest to the mpf ``x`` (round to nearest even, subnormals included)."""
    # _mpf_ is (sign, |mantissa|, exponent, bitcount); zero is (0, 0, 0, 0).
    sign, magnitude, exp, _ = mpmath.mpf(x)._mpf_
    man = -int(magnitude) if sign else int(magnitude)
    try:
        return float(man << exp) if exp >= 0 else man / (1 << -exp)
    except OverflowError:
        return float("inf") if man > 0 else float("-inf")


__all__ = [
    "DD",
    "Array",
    "dd_add",
    "dd_add_d",
    "dd_cumsum",
    "dd_div",
    "dd_exp",
    "dd_feature_map",
    "dd_lift",
    "dd_matmul",
    "dd_mul",
    "dd_mul_d",
    "dd_sum",
    "fast_two_sum",
    "mpf_to_float",
    "split",
    "two_prod",
    "two_sum",
]
