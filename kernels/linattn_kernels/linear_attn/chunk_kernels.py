# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk form's per-chunk kernels (parallel over chunks): o, and dd, dv, dq/dk, dg.

They read the states that the sequential passes of `chunk_h` store at every chunk start (dS at
every chunk end); `chunk` holds the host launchers that sequence the two. Decay weights are
exponentials of differences of chunk-local cumulative sums of g, masked before the exponential.

The constexpr ``GATE`` picks the decay: 0 none, 1 a scalar g ``[B, T, H]``, 2 a vector g
``[B, T, H, K]``. With a scalar gate (or none) the intra-chunk score is the ``tl.dot``
A = φ(Q)φ(K)^T, weighted afterwards by exp(G_i - G_j). A vector gate's weight differs per key
dimension, so its score A_tj = Σ_m q̃_tm k̃_jm exp(G_tm - G_jm) is a ``[BT, BT, BK]``
broadcast product summed over its last axis (two multiplies per m and K - 1 additions, the
count the error bound charges), each weight the exp of a masked difference (exponent <= 0, -inf
above the diagonal), with the smaller K tile of `common.blocks.chunk_score_block`. It is never
factored into (q̃ ⊙ e^G)(k̃ ⊙ e^-G)^T, which overflows once |G| > 88 inside a chunk. The
backward mirrors this for dq̃, dk̃ and keeps dL/dG per dimension. Only the given gate's
branches compile.
"""

from __future__ import annotations

import triton
import triton.language as tl

from linattn_kernels.common.decay import chunk_decay, masked_decay, vector_chunk_decay
from linattn_kernels.common.division import divide_or_zero, reciprocal
from linattn_kernels.common.feature_maps import feature_map_grad
from linattn_kernels.common.loads import (
    load_features,
    load_key_sum,
    load_per_token,
    load_rows,
    load_tile,
    operand,
    store_per_token,
    store_rows,
)
from linattn_kernels.common.tables import chunk_bounds, sequence_bounds


@triton.jit
def chunk_fwd_kernel_o(
    q, k, v, g, h, hz, o, den, cu_seqlens, chunk_indices, scale, eps,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    GATE: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """o (and the denominator D) of one chunk: s (e^G ⊙ φ(Q) S + (A ⊙ W) V) (grid: NC, V, H)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    _i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < L
    rows = bos + o_t
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    # Query i (axis 0) sees key j (axis 1) when j <= i.
    m_causal = o_i[:, None] >= o_i[None, :]

    b_o = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    b_A = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT]
    b_qz = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        if GATE == 2:
            b_G, _ = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)  # [BT, BK]
            # [BT, BT, BK]: w_tjm = exp(G_tm - G_jm), masked to -inf before the exp.
            b_w = tl.exp(
                tl.where(m_causal[:, :, None], b_G[:, None, :] - b_G[None, :, :], float("-inf"))
            )
            b_A += tl.sum(b_q[:, None, :] * b_k[None, :, :] * b_w, axis=2)
            # exp(G_tm) <= 1: query t reads the chunk-start state per dimension.
            b_q = b_q * tl.exp(tl.where(m_t[:, None], b_G, float("-inf")))
        b_h = load_tile(h, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_qd = operand(b_q, DOT_LOW, DT)
        b_o += tl.dot(b_qd, operand(b_h, DOT_LOW, DT))
        if GATE != 2:
            b_A += tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT)))
        if NORMALIZE:
            b_qz += tl.sum(b_q * load_key_sum(hz, i_c * H + i_h, K, o_k, m_k)[None, :], axis=1)
    if GATE == 1:
        b_G, _ = chunk_decay(g, rows, m_t, i_h, H, BT)
        b_o = b_o * tl.exp(b_G)[:, None]
        b_qz = b_qz * tl.exp(b_G)
        b_P = tl.where(m_causal, b_A * masked_decay(b_G[:, None], b_G[None, :], m_causal), 0.0)
    elif GATE == 2:
        # The vector weights were masked before their exp: A is causal already.
        b_P = b_A
    else:
        b_P = tl.where(m_causal, b_A, 0.0)
    b_v = load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_o += tl.dot(operand(b_P, DOT_LOW, DT), operand(b_v, DOT_LOW, DT))
    b_o = b_o * scale
    if NORMALIZE:
        b_den = scale * (b_qz + tl.sum(b_P, axis=1)) + eps
        b_o = divide_or_zero(b_o, b_den[:, None])
        # D does not depend on the V block: only the first V-block program stores it.
        m_den = m_t & (tl.zeros([BT], dtype=tl.int64) + i_v == 0)
        store_per_token(den, b_den, rows, m_den, i_h, H)
    store_rows(o, b_o, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def chunk_bwd_kernel_dd(o, do, den, dd, T_total, H, V, BT: tl.constexpr, BV: tl.constexpr):
    """dd = -(do · o) / D per token: the cotangent of the denominator D (no gate or scalar)."""
    i_b = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    rows = i_b * BT + tl.arange(0, BT)
    m_t = rows < T_total
    b_s = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_o = load_rows(o, rows, m_t, i_h, H, V, o_v, m_v)
        b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)
        b_s += tl.sum(b_o * b_do, axis=1)
    b_den = load_per_token(den, rows, m_t, i_h, H)
    store_per_token(dd, -b_s * reciprocal(b_den), rows, m_t, i_h, H)


@triton.jit
def chunk_bwd_kernel_dv(
    q, k, g, do, den, dh, dv, cu_seqlens, chunk_indices, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    GATE: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dv of one chunk: the state part e^{G_L - G} φ(K) dS plus s (P^T / D) dO (grid: NC, V, H)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    _i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < L
    rows = bos + o_t
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    # Transposed causal mask: row j (key), column i (query), i >= j.
    m_causal = o_i[:, None] <= o_i[None, :]
    if GATE == 1:
        b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)

    b_At = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT], A transposed: k_j · q_i
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        if GATE == 2:
            b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)
            # [BT, BT, BK]: w_tjm at [j, t, m].
            b_w = tl.exp(
                tl.where(m_causal[:, :, None], b_G[None, :, :] - b_G[:, None, :], float("-inf"))
            )
            b_At += tl.sum(b_k[:, None, :] * b_q[None, :, :] * b_w, axis=2)
            b_k = b_k * tl.exp(tl.where(m_t[:, None], b_GL[None, :] - b_G, float("-inf")))
        else:
            b_At += tl.dot(operand(b_k, DOT_LOW, DT), tl.trans(operand(b_q, DOT_LOW, DT)))
            if GATE == 1:
                b_k = b_k * tl.exp(b_GL - b_G)[:, None]
        b_dh = load_tile(dh, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_dv += tl.dot(operand(b_k, DOT_LOW, DT), operand(b_dh, DOT_LOW, DT))
    if GATE == 1:
        b_Pt = tl.where(m_causal, b_At * masked_decay(b_G[None, :], b_G[:, None], m_causal), 0.0)
    elif GATE == 2:
        b_Pt = b_At
    else:
        b_Pt = tl.where(m_causal, b_At, 0.0)
    # Column i of P^T carries s (/ D_i when normalized): the weight of do_i.
    b_f = tl.full([BT], scale, dtype=tl.float32)  # [BT]
    if NORMALIZE:
        b_f = b_f * reciprocal(load_per_token(den, rows, m_t, i_h, H))
    b_Pt = b_Pt * b_f[None, :]
    b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_dv += tl.dot(operand(b_Pt, DOT_LOW, DT), operand(b_do, DOT_LOW, DT))
    store_rows(dv, b_dv, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def chunk_bwd_kernel_dqk(
    q, k, v, g, h, hz, do, den, dd, dh, dhz, dq, dk, dgp, cu_seqlens, chunk_indices, scale,
    T_total, H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    GATE: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, dk and dL/dG of one chunk and K block (grid: NC, K-blocks, H).

    dL/dG goes to ``dgp``: a scalar gate's partial sum over this K block (``[NK, tokens, H]``),
    or a vector gate's per dimension, which this program owns outright (``[tokens, H, K]``).
    """
    i_c = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    _i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < L
    rows = bos + o_t
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    m_causal = o_i[:, None] >= o_i[None, :]

    b_dP = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT] do_i · v_j
    b_dqs = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK] do_i S^T, state part of dq
    b_dks = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK] v_j dS^T, state part of dk
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_v = operand(load_rows(v, rows, m_t, i_h, H, V, o_v, m_v), DOT_LOW, DT)  # [BT, BV]
        b_do = operand(load_rows(do, rows, m_t, i_h, H, V, o_v, m_v), DOT_LOW, DT)  # [BT, BV]
        b_h = load_tile(h, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_dh = load_tile(dh, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_dP += tl.dot(b_do, tl.trans(b_v))
        b_dqs += tl.dot(b_do, tl.trans(operand(b_h, DOT_LOW, DT)))
        b_dks += tl.dot(b_v, tl.trans(operand(b_dh, DOT_LOW, DT)))
    if NORMALIZE:
        # With z as an extra value column: dP_ij = do_i · v_j / D_i + dd_i.
        b_r = reciprocal(load_per_token(den, rows, m_t, i_h, H))
        b_dd = load_per_token(dd, rows, m_t, i_h, H)
        b_hz = load_key_sum(hz, i_c * H + i_h, K, o_k, m_k)
        b_dhz = load_key_sum(dhz, i_c * H + i_h, K, o_k, m_k)
        b_dP = b_dP * b_r[:, None] + b_dd[:, None]
        b_dqs = b_dqs * b_r[:, None] + b_dd[:, None] * b_hz[None, :]
        b_dks = b_dks + b_dhz[None, :]
    if GATE == 1:
        b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)
        b_dqs = b_dqs * tl.exp(b_G)[:, None]
        b_dks = b_dks * tl.exp(b_GL - b_G)[:, None]
        b_dS = tl.where(m_causal, b_dP * masked_decay(b_G[:, None], b_G[None, :], m_causal), 0.0)
    elif GATE == 2:
        b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)  # [BT, BK], [BK]
        b_dqs = b_dqs * tl.exp(tl.where(m_t[:, None], b_G, float("-inf")))
        b_dks = b_dks * tl.exp(tl.where(m_t[:, None], b_GL[None, :] - b_G, float("-inf")))
        # The weights differ per dimension: they enter below, inside the sums over j and t.
        b_dS = tl.where(m_causal, b_dP, 0.0)
    else:
        b_dS = tl.where(m_causal, b_dP, 0.0)
    b_dS = b_dS * scale
    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_k, b_kx = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    # dq~ and dk~: gradients with respect to the features φ(q), φ(k).
    if GATE == 2:
        # [BT, BT, BK]: w_tjm, query t on axis 0, key j on axis 1.
        b_w = tl.exp(
            tl.where(m_causal[:, :, None], b_G[:, None, :] - b_G[None, :, :], float("-inf"))
        )
        # dq̃_tm = s Σ_j dP_tj k̃_jm w_tjm (+ state), dk̃_jm = s Σ_t dP_tj q̃_tm w_tjm (+ state).
        b_dq = b_dqs * scale + tl.sum(b_dS[:, :, None] * b_k[None, :, :] * b_w, axis=1)
        b_dk = b_dks + tl.sum(b_dS[:, :, None] * b_q[:, None, :] * b_w, axis=0)
        # dL/dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm, whole for the dimensions o_k.
        store_rows(dgp, b_q * b_dq - b_k * b_dk, rows, m_t, i_h, H, K, o_k, m_k)
    else:
        b_dS_op = operand(b_dS, DOT_LOW, DT)
        b_dq = b_dqs * scale + tl.dot(b_dS_op, operand(b_k, DOT_LOW, DT))
        b_dk = b_dks + tl.dot(tl.trans(b_dS_op), operand(b_q, DOT_LOW, DT))
        if GATE == 1:
            # dL/dG_t = φ(q_t)·dφ(q_t) - φ(k_t)·dφ(k_t), a partial sum over this K block.
            b_dG = tl.sum(b_q * b_dq - b_k * b_dk, axis=1)
            tl.store(dgp + (i_k * T_total + rows) * H + i_h, b_dG, mask=m_t)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def chunk_bwd_kernel_dg(
    dgp, fin, dg, cu_seqlens, T_total, H, K, NK,
    BT: tl.constexpr, BK: tl.constexpr, GATE: tl.constexpr,
):  # fmt: skip
    """dg_s = Σ_{t >= s} dL/dG_t within each sequence, as a true reverse scan (grid: N·H, NKG).

    The carry starts at the final-state term ``fin``. A scalar gate sums the NK partials of
    ``dgp`` per token (one program per sequence-head); a vector gate scans each dimension on
    its own, one program per sequence-head and BK dimensions.
    """
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos, L = sequence_bounds(cu_seqlens, i_n)
    NT = tl.cdiv(L, BT)
    o_i = tl.arange(0, BT)
    # Row s sums the entries t >= s.
    m_suffix = o_i[None, :] >= o_i[:, None]
    if GATE == 2:
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_carry = load_key_sum(fin, i_nh, K, o_k, m_k)  # [BK]
    else:
        # The final-state term <dS_T, S_T> + <dz_T, z_T> belongs to the last token, hence to all.
        b_carry = tl.load(fin + i_n * H + i_h)
        # The stride between K-block partials, in int64 (bos is int64; T_total may be constexpr).
        s_k = (bos * 0 + T_total) * H
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        o_t = i_t * BT + o_i
        m_t = o_t < L
        rows = bos + o_t
        # A masked row sum, not total - prefix, keeps each suffix accurate (docs/bug-classes.md).
        if GATE == 2:
            b_dG = load_rows(dgp, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_dg = tl.sum(tl.where(m_suffix[:, :, None], b_dG[None, :, :], 0.0), axis=1)
            b_dg = b_dg + b_carry[None, :]
            store_rows(dg, b_dg, rows, m_t, i_h, H, K, o_k, m_k)
        else:
            b_dG = tl.zeros([BT], dtype=tl.float32)  # [BT]
            p_dgp = dgp + rows * H + i_h
            for _ in range(NK):
                b_dG += tl.load(p_dgp, mask=m_t, other=0.0)
                p_dgp += s_k
            b_dg = tl.sum(tl.where(m_suffix, b_dG[None, :], 0.0), axis=1) + b_carry
            store_per_token(dg, b_dg, rows, m_t, i_h, H)
        b_carry = b_carry + tl.sum(b_dG, axis=0)


__all__ = [
    "chunk_bwd_kernel_dd",
    "chunk_bwd_kernel_dg",
    "chunk_bwd_kernel_dqk",
    "chunk_bwd_kernel_dv",
    "chunk_fwd_kernel_o",
]
