# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The double-double (tier-1) oracle.

Its arithmetic (TwoSum, TwoProd, the dd operations and the pairwise tree sum, each with its
error bound) is `linattn_verify.core.dd_arith`, whose names this module re-exports.

The oracle evaluates the function of `linattn_verify.linear_attn.semantics` from the problem's exact
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

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from linattn_verify.core.dd_arith import (
    _BLOCK_ELEMENTS,
    DD,
    Array,
    dd_add,
    dd_add_d,
    dd_cumsum,
    dd_div,
    dd_exp,
    dd_feature_map,
    dd_lift,
    dd_matmul,
    dd_mul,
    dd_mul_d,
    dd_sum,
    fast_two_sum,
    split,
    two_prod,
    two_sum,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged
from linattn_verify.typing import LIFTED_MAPS

DDForm = Literal["auto", "parallel", "chunk"]


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
    B, T, H, _, V = p.shape
    K = p.feature_dim
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
            _features(np.ascontiguousarray(qs), p, query=True),
            _features(np.ascontiguousarray(ks), p, query=False),
            np.ascontiguousarray(vs),
            gs,
            S0,
            min(C, L),
        )
        S_h[n], S_l[n] = sh, sl
        nh, nl = dd_mul_d(nh, nl, p.outer_scale)  # [H, L, W]
        if p.normalize:
            if p.clamp:
                # max(Z, eps): a dd pair compares by its high part, then its low (hi + lo, |lo|
                # <= ulp(hi)/2); where Z < eps exactly the result is eps itself.
                below = (nh[..., V] < p.eps) | ((nh[..., V] == p.eps) & (nl[..., V] < 0))
                zh = np.where(below, p.eps, nh[..., V])
                zl = np.where(below, 0.0, nl[..., V])
            else:
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


def _features(x: Array, p: Problem, *, query: bool) -> tuple[Array, Array | None]:
    """φ of queries or keys ``[H, L, K]`` as the problem defines them (`Problem.query_features`)."""
    feature_map = p.map_of(query=query)
    if feature_map not in LIFTED_MAPS:
        return dd_feature_map(x, feature_map)
    weights = None if p.feature_weights is None else p.feature_weights.numpy()
    return dd_lift(
        x,
        feature_map,
        prescale=p.query_prescale if query else 1.0,
        weights=weights,
        stabilise=query and p.stabilised_queries,
    )


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


@judged
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
