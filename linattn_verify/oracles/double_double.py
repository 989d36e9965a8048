# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Double-double arithmetic in numpy and the double-double (tier-1) oracle.

A double-double (dd) value is an unevaluated sum ``hi + lo`` of two float64 arrays with
``|lo| <= ulp(hi)/2``; it carries about 106 bits. The building blocks are the error-free
transformations TwoSum (Knuth), Fast2Sum (Dekker) and TwoProd by Veltkamp splitting (numpy has
no fma), and the dd operations of Joldes, Muller & Popescu (ACM TOMS 44(2), 2017):
AccurateDWPlusDW (relative error <= 3u^2), DWTimesDW (<= 7u^2), DWTimesFP (<= 2u^2), with
u = 2^-53. Sums of many terms use a pairwise tree that carries each partial sum as a float64
``s`` (combined by TwoSum) plus a float64 compensation ``c`` (the TwoSum errors and the low parts,
added plainly); its error is about 2 u^2 ceil(log2 n)^2 Σ|x_i| (docs/error-model.md §6.2).

The oracle evaluates the function of `linattn_verify.semantics` from the problem's exact
float64 inputs. The normalized problem is the unnormalized one with a column of ones appended
to v (and z_0 to S_0), so the numerator and the denominator are computed by the same sums. The
work is done in the chunked form (intra-chunk masked products plus inter-chunk state passing,
O(T·C·(K+V) + T·K·V)); one chunk spanning the sequence is the parallel form. Decay weights are
exp of differences of chunk-local dd cumulative sums, never factored exp(G_t)/exp(G_j). A vector
gate (g ``[B, T, H, K]``) gets the same per key dimension: chunk-local dd cumulative sums per
dimension, the intra-chunk scores Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm) as exact dd products
summed by the tree, and the state rows decayed one dimension at a time (O(T·C·K) dd exps).

Range: values must stay within about 2^-969 .. 2^996 (the low part goes subnormal below, the
splitting overflows above); outside it the result degrades gracefully in absolute terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import mpmath
import numpy as np
import numpy.typing as npt
import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.semantics import Problem

Array = npt.NDArray[np.float64]
DD = tuple[Array, Array]
"""A double-double array as the pair ``(hi, lo)``."""

DDForm = Literal["auto", "parallel", "chunk"]

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
    ph, pl = two_sum(x, np.ones_like(x))
    eh, el = dd_exp(np.minimum(x, 0.0), np.zeros_like(x))
    positive = x > 0
    return np.where(positive, ph, eh), np.where(positive, pl, el)


@dataclass(frozen=True)
class DDForward:
    """The double-double forward result, every tensor as a dd pair ``(hi, lo)`` of numpy arrays.

    Attributes:
        o: The output ``[B, T, H, V]``.
        final_state: S_T ``[N, H, K, V]``.
        final_key_sum: z_T ``[N, H, K]`` (normalized problems) or `None`.
    """

    o: DD
    final_state: DD
    final_key_sum: DD | None


def choose_chunk_size(
    L: int, K: int, W: int, decay: bool, with_state: bool, *, vector_gate: bool = False
) -> int:
    """Return the chunk size the dd oracle uses for one sequence of length L (L means parallel).

    The model counts product terms: C·(K + W) per token inside chunks (plus ~6 for the dd exp of
    the decay weights, ~8·K for a vector gate's K weights and dd products), 2·K·W per token for
    the state passing, and a fixed Python overhead per chunk of the sequential state scan. The
    parallel form (C = L) skips the state passing when no state goes in or out.
    """
    per_pair = K + W + ((8 * K if vector_gate else 6) if decay else 0)
    best, best_cost = L, L * L * per_pair + (2 * L * K * W if with_state else 0)
    for C in (16, 32, 64, 128, 256):
        if C >= L:
            break
        chunks = -(-L // C)
        cost = chunks * C * (C * per_pair + 2 * K * W) + 20000 * chunks
        if cost < best_cost:
            best, best_cost = C, cost
    return max(best, 1)


def dd_forward(
    problem: Problem, *, form: DDForm = "auto", chunk_size: int | None = None
) -> DDForward:
    """Evaluate the problem in double-double arithmetic from its exact float64 inputs.

    Args:
        problem: A validated problem (any float dtype; converted exactly to float64).
        form: ``"parallel"`` (one chunk per sequence), ``"chunk"``, or ``"auto"`` (the cheaper
            of the two by `choose_chunk_size`). Default: `"auto"`.
        chunk_size: C for ``form="chunk"``; `None` picks it by the cost model. Default: `None`.

    Returns:
        The `DDForward` result; the final state is always computed.

    Raises:
        InvalidArgument: for an unknown ``form`` or a ``chunk_size`` < 1.
    """
    if form not in ("auto", "parallel", "chunk"):
        raise InvalidArgument(f"Got form={form!r}, but form must be 'auto', 'parallel' or 'chunk'.")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise InvalidArgument(f"Got chunk_size={chunk_size!r}, but chunk_size must be an int >= 1.")
    p = problem.to(torch.float64, "cpu")
    B, T, H, K, V = p.shape
    W = V + 1 if p.normalize else V
    q, k, v = p.q.numpy(), p.k.numpy(), p.v.numpy()
    g = None if p.g is None else p.g.numpy()
    N = p.num_sequences
    o_h, o_l = np.zeros((B, T, H, V)), np.zeros((B, T, H, V))
    S_h, S_l = np.zeros((N, H, K, W)), np.zeros((N, H, K, W))
    S0_all = None
    if p.initial_state is not None:
        S0_all = p.initial_state.numpy()
        if p.normalize:
            assert p.initial_key_sum is not None
            S0_all = np.concatenate([S0_all, p.initial_key_sum.numpy()[..., None]], axis=-1)
    for n, b, start, end in p.sequences():
        L = end - start
        S0 = None if S0_all is None else S0_all[n]
        if L == 0:
            if S0 is not None:
                S_h[n] = S0
            continue
        qs = q[b, start:end].transpose(1, 0, 2)  # [H, L, K]
        ks = k[b, start:end].transpose(1, 0, 2)
        vs = v[b, start:end].transpose(1, 0, 2)  # [H, L, V]
        if p.normalize:
            vs = np.concatenate([vs, np.ones((H, L, 1))], axis=-1)  # [H, L, W]
        # [H, L], or [H, L, K] for a vector gate
        gs = None if g is None else np.ascontiguousarray(np.swapaxes(g[b, start:end], 0, 1))
        if form == "parallel":
            C = L
        elif form == "chunk" and chunk_size is not None:
            C = chunk_size
        else:
            C = choose_chunk_size(L, K, W, gs is not None, True, vector_gate=p.vector_gate)
            if form == "chunk" and C >= L:
                C = max(1, min(16, L // 2))
        (nh, nl), (sh, sl) = _sequence(
            dd_feature_map(np.ascontiguousarray(qs), p.feature_map),
            dd_feature_map(np.ascontiguousarray(ks), p.feature_map),
            np.ascontiguousarray(vs),
            gs,
            S0,
            min(C, L),
        )
        S_h[n], S_l[n] = sh, sl
        nh, nl = dd_mul_d(nh, nl, p.scale)  # [H, L, W]
        if p.normalize:
            zh, zl = dd_add_d(nh[..., V], nl[..., V], p.eps)
            zero = zh == 0
            one = np.ones_like(zh)
            qh, ql = dd_div(
                nh[..., :V], nl[..., :V], np.where(zero, one, zh)[..., None], zl[..., None]
            )
            nh = np.where(zero[..., None], 0.0, qh)
            nl = np.where(zero[..., None], 0.0, ql)
        o_h[b, start:end] = nh[..., :V].transpose(1, 0, 2)
        o_l[b, start:end] = nl[..., :V].transpose(1, 0, 2)
    state = (S_h[..., :V], S_l[..., :V])
    key_sum = (S_h[..., V], S_l[..., V]) if p.normalize else None
    return DDForward(o=(o_h, o_l), final_state=state, final_key_sum=key_sum)


def _sequence(
    q: tuple[Array, Array | None],
    k: tuple[Array, Array | None],
    v: Array,
    g: Array | None,
    S0: Array | None,
    C: int,
) -> tuple[DD, DD]:
    """Return the unscaled numerator ``[H, L, W]`` and S_T ``[H, K, W]`` of one sequence, in dd.

    Args:
        q: φ(q) ``[H, L, K]`` as (hi, lo or `None`).
        k: φ(k) ``[H, L, K]`` as (hi, lo or `None`).
        v: Values (with the ones column when normalized) ``[H, L, W]``.
        g: Log decay ``[H, L]``, a vector gate ``[H, L, K]``, or `None`.
        S0: Initial state (with z_0 as the last column when normalized) ``[H, K, W]`` or `None`.
        C: Chunk size; C >= L is the parallel form.
    """
    H, L, K = q[0].shape
    W = v.shape[-1]
    n_c = -(-L // C)
    pad = n_c * C - L

    def chunks(x: Array | None, width: int | None) -> Array | None:
        if x is None:
            return None
        if pad:
            x = np.concatenate([x, np.zeros((H, pad, *x.shape[2:]))], axis=1)
        return x.reshape(H, n_c, C, *(() if width is None else (width,)))

    qh, ql = chunks(q[0], K), chunks(q[1], K)
    kh, kl = chunks(k[0], K), chunks(k[1], K)
    vc = chunks(v, W)
    vector = g is not None and g.ndim == 3
    gc = chunks(g, K if vector else None)
    assert qh is not None
    assert kh is not None
    assert vc is not None
    if vector:
        assert gc is not None
        Gh, Gl = dd_cumsum(gc, None, axis=-2)  # [H, n_c, C, K], chunk-local per dimension
        Ph, Pl = _vector_scores(qh, ql, kh, kl, Gh, Gl)
        return _pass_vector_state(qh, ql, kh, kl, vc, Gh, Gl, Ph, Pl, S0, L)
    # A = φ(Q)φ(K)^T inside each chunk, masked to j <= t and weighted by exp(G_t - G_j).
    Ah, Al = dd_matmul(qh, ql, kh.swapaxes(-1, -2), None if kl is None else kl.swapaxes(-1, -2))
    tri = np.tril(np.ones((C, C), dtype=bool))
    if gc is None:
        Ph, Pl = np.where(tri, Ah, 0.0), np.where(tri, Al, 0.0)
    else:
        Gh, Gl = dd_cumsum(gc, None, axis=-1)  # [H, n_c, C], chunk-local
        ti, ji = np.tril_indices(C)
        dh, dl = dd_add(Gh[..., ti], Gl[..., ti], -Gh[..., ji], -Gl[..., ji])
        wh, wl = dd_exp(dh, dl)
        Wh, Wl = np.zeros((H, n_c, C, C)), np.zeros((H, n_c, C, C))
        Wh[..., ti, ji], Wl[..., ti, ji] = wh, wl
        Ph, Pl = dd_mul(Ah, Al, Wh, Wl)
    Nh, Nl = dd_matmul(Ph, Pl, vc, None)  # [H, n_c, C, W]
    # State passing: S_c is the state before chunk c; S_{c+1} = a_c S_c + ΔS_c.
    if gc is None:
        kw, qw = (kh, kl), (qh, ql)
        decay = None
    else:
        Eh, El = Gh[..., -1:], Gl[..., -1:]
        w_out = dd_exp(*dd_add(Eh, El, -Gh, -Gl))
        w_in = dd_exp(Gh, Gl)
        decay = dd_exp(Eh[..., 0], El[..., 0])  # [H, n_c]
        kw = _mul_maybe(kh, kl, *w_out)
        qw = _mul_maybe(qh, ql, *w_in)
    dSh, dSl = dd_matmul(
        kw[0].swapaxes(-1, -2), None if kw[1] is None else kw[1].swapaxes(-1, -2), vc, None
    )  # [H, n_c, K, W]
    Sh = np.zeros((H, n_c + 1, K, W))
    Sl = np.zeros((H, n_c + 1, K, W))
    if S0 is not None:
        Sh[:, 0] = S0
    for c in range(n_c):
        ah, al = Sh[:, c], Sl[:, c]
        if decay is not None:
            ah, al = dd_mul(ah, al, decay[0][:, c, None, None], decay[1][:, c, None, None])
        Sh[:, c + 1], Sl[:, c + 1] = dd_add(ah, al, dSh[:, c], dSl[:, c])
    if n_c > 1 or S0 is not None:
        Ih, Il = dd_matmul(qw[0], qw[1], Sh[:, :n_c], Sl[:, :n_c])
        Nh, Nl = dd_add(Nh, Nl, Ih, Il)
    Nh = Nh.reshape(H, n_c * C, W)[:, :L]
    Nl = Nl.reshape(H, n_c * C, W)[:, :L]
    return (Nh, Nl), (Sh[:, n_c], Sl[:, n_c])


def _vector_scores(
    qh: Array, ql: Array | None, kh: Array, kl: Array | None, Gh: Array, Gl: Array
) -> DD:
    """Return P_tj = Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm) ``[H, n_c, C, C]``, 0 for j > t.

    Only the pairs j <= t are formed (the exp never sees a positive difference); each product
    is a dd product and the K terms are summed by the tree. Blocks of chunks bound the memory.
    """
    H, n_c, C, K = qh.shape
    ql = np.zeros_like(qh) if ql is None else ql
    kl = np.zeros_like(kh) if kl is None else kl
    ti, ji = np.tril_indices(C)
    Ph, Pl = np.zeros((H, n_c, C, C)), np.zeros((H, n_c, C, C))
    step = max(1, (16 * _BLOCK_ELEMENTS) // (H * len(ti) * K))
    for c in range(0, n_c, step):
        cs = slice(c, c + step)
        dh, dl = dd_add(Gh[:, cs, ti], Gl[:, cs, ti], -Gh[:, cs, ji], -Gl[:, cs, ji])
        wh, wl = dd_exp(dh, dl)  # [H, nb, pairs, K]
        xh, xl = dd_mul(qh[:, cs, ti], ql[:, cs, ti], kh[:, cs, ji], kl[:, cs, ji])
        xh, xl = dd_mul(xh, xl, wh, wl)
        Ph[:, cs, ti, ji], Pl[:, cs, ti, ji] = dd_sum(xh, xl, axis=-1)
    return Ph, Pl


def _pass_vector_state(
    qh: Array,
    ql: Array | None,
    kh: Array,
    kl: Array | None,
    vc: Array,
    Gh: Array,
    Gl: Array,
    Ph: Array,
    Pl: Array,
    S0: Array | None,
    L: int,
) -> tuple[DD, DD]:
    """Finish `_sequence` for a vector gate: the intra-chunk numerator plus state passing.

    The decays are exp(Gl_end - Gl_j) on φ(k_j), exp(Gl_t) on φ(q_t) and exp(Gl_end) on the
    rows of the state, each per key dimension and each <= 1.
    """
    H, n_c, C, K = qh.shape
    W = vc.shape[-1]
    ql = np.zeros_like(qh) if ql is None else ql
    kl = np.zeros_like(kh) if kl is None else kl
    Nh, Nl = dd_matmul(Ph, Pl, vc, None)  # [H, n_c, C, W]
    Eh, El = Gh[..., -1:, :], Gl[..., -1:, :]  # [H, n_c, 1, K]
    kw = dd_mul(kh, kl, *dd_exp(*dd_add(Eh, El, -Gh, -Gl)))
    qw = dd_mul(qh, ql, *dd_exp(Gh, Gl))
    decay = dd_exp(Eh[..., 0, :], El[..., 0, :])  # [H, n_c, K]
    dSh, dSl = dd_matmul(kw[0].swapaxes(-1, -2), kw[1].swapaxes(-1, -2), vc, None)
    Sh = np.zeros((H, n_c + 1, K, W))
    Sl = np.zeros((H, n_c + 1, K, W))
    if S0 is not None:
        Sh[:, 0] = S0
    for c in range(n_c):
        ah, al = dd_mul(Sh[:, c], Sl[:, c], decay[0][:, c, :, None], decay[1][:, c, :, None])
        Sh[:, c + 1], Sl[:, c + 1] = dd_add(ah, al, dSh[:, c], dSl[:, c])
    if n_c > 1 or S0 is not None:
        Ih, Il = dd_matmul(qw[0], qw[1], Sh[:, :n_c], Sl[:, :n_c])
        Nh, Nl = dd_add(Nh, Nl, Ih, Il)
    Nh = Nh.reshape(H, n_c * C, W)[:, :L]
    Nl = Nl.reshape(H, n_c * C, W)[:, :L]
    return (Nh, Nl), (Sh[:, n_c], Sl[:, n_c])


def _mul_maybe(xh: Array, xl: Array | None, wh: Array, wl: Array) -> tuple[Array, Array]:
    """Return x ⊙ w broadcasting w ``[..., C]`` over the feature axis of x ``[..., C, K]``."""
    wh, wl = wh[..., None], wl[..., None]
    if xl is None:
        return dd_mul_d(wh, wl, xh)
    return dd_mul(xh, xl, wh, wl)


def round_dd(x: DD) -> Array:
    """Return the float64 nearest to hi + lo (hi itself, after renormalizing the pair)."""
    hi, _ = two_sum(x[0], x[1])
    return hi


def double_double_oracle(
    problem: Problem, *, form: DDForm = "auto", chunk_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None]:
    """Evaluate the problem in double-double and round every result once to float64.

    Args:
        problem: A validated problem.
        form: See `dd_forward`. Default: `"auto"`.
        chunk_size: See `dd_forward`. Default: `None`.

    Returns:
        ``(o, final_state)`` as float64 CPU tensors: o ``[B, T, H, V]``; final_state `None`
        (unless ``problem.output_final_state``), S_T ``[N, H, K, V]``, or ``(S_T, z_T)``.
    """
    result = dd_forward(problem, form=form, chunk_size=chunk_size)
    o = torch.from_numpy(np.ascontiguousarray(round_dd(result.o)))
    if not problem.output_final_state:
        return o, None
    S = torch.from_numpy(np.ascontiguousarray(round_dd(result.final_state)))
    if result.final_key_sum is None:
        return o, S
    return o, (S, torch.from_numpy(np.ascontiguousarray(round_dd(result.final_key_sum))))


__all__ = [
    "DD",
    "DDForward",
    "choose_chunk_size",
    "dd_add",
    "dd_add_d",
    "dd_cumsum",
    "dd_div",
    "dd_exp",
    "dd_feature_map",
    "dd_forward",
    "dd_matmul",
    "dd_mul",
    "dd_mul_d",
    "dd_sum",
    "double_double_oracle",
    "fast_two_sum",
    "round_dd",
    "split",
    "two_prod",
    "two_sum",
]
