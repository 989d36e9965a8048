# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Chunked causal linear attention (the training path): Triton forward and backward.

The sequence is cut into chunks of ``chunk_size`` tokens that never straddle a sequence boundary.
A sequential pass over chunks carries the state S (and the key sum z) and stores it at every
chunk start; a parallel pass then gives each chunk its output as an intra-chunk masked quadratic
plus the contribution of the stored state. Decay weights are exponentials of differences of
chunk-local cumulative sums of g, masked before the exponential. The backward mirrors this: a
reverse pass over chunks for dS (and dz), then parallel per-chunk kernels for dv and for dq, dk
and the decay gradient, and a reverse scan that turns per-token dL/dG into dg.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import INPUT_DTYPES, empty_output, finish_output, prepare
from linattn_kernels.common.feature_maps import feature_map, feature_map_grad, vanishes

CHUNK_SIZES = (16, 32, 64, 128)
"""The chunk sizes the kernels accept (powers of two, at least the 16 rows ``tl.dot`` needs)."""


# Kernels keep fla-style hand formatting: grouped arguments, one concern per line.
# fmt: off
@triton.jit
def _operand(x, LOWP: tl.constexpr, DT: tl.constexpr):
    """Round a ``tl.dot`` operand to the input dtype when the low-precision recipe is on."""
    if LOWP:
        return x.to(DT)
    else:  # noqa: RET505  (Triton resolves returns per constexpr branch)
        return x


@triton.jit
def _load_features(x, rows, m_rows, i_h, H, K, o_k, m_k, FEATURE: tl.constexpr):
    """Load a [BT, BK] block of q or k in fp32 and return (φ(x) with padding zeroed, x)."""
    m = m_rows[:, None] & m_k[None, :]
    b_x = tl.load(x + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
    b_x = b_x.to(tl.float32)
    # Padding must be zero after φ: elu1(0) = 1 would otherwise add phantom keys.
    return tl.where(m, feature_map(b_x, FEATURE), 0.0), b_x


@triton.jit
def _load_rows(x, rows, m_rows, i_h, H, D, o_d, m_d):
    """Load a [BT, BD] block of a [*, H, D] tensor in fp32 (zeros outside the masks)."""
    m = m_rows[:, None] & m_d[None, :]
    b_x = tl.load(x + (rows[:, None] * H + i_h) * D + o_d[None, :], mask=m, other=0.0)
    return b_x.to(tl.float32)


@triton.jit
def _chunk_decay(g, rows, m_t, i_h, H, BT: tl.constexpr):
    """Return the chunk-local cumulative sums G [BT] of g and their value G_L at the chunk end."""
    b_g = tl.load(g + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    b_G = tl.cumsum(b_g, axis=0)
    # Padding rows load g = 0, so the last row of the block holds G at the last real token.
    b_GL = tl.sum(tl.where(tl.arange(0, BT) == BT - 1, b_G, 0.0), axis=0)
    return b_G, b_GL


@triton.jit
def _reciprocal(b_den):
    """1 / D per row, and 0 where D vanishes (those rows output 0, so they pass no gradient)."""
    return tl.where(vanishes(b_den), 0.0, 1.0 / tl.where(vanishes(b_den), 1.0, b_den))


@triton.jit
def chunk_fwd_kernel_h(
    k, v, g, h0, z0, h, hz, ht, zt, cu_seqlens, chunk_offsets,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, USE_H0: tl.constexpr, STORE_FINAL: tl.constexpr,
    NORMALIZE: tl.constexpr, LOWP: tl.constexpr,
):
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_v = tl.program_id(2).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    DT = k.dtype.element_ty
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    boh = tl.load(chunk_offsets + i_n)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    o_kv = o_k[:, None] * V + o_v[None, :]
    # Only the first V-block program writes z, which does not depend on the V block. (The
    # comparison is broadcast to a block first: the interpreter turns scalar & block into ints.)
    m_z = m_k & (tl.zeros([BK], dtype=tl.int64) + i_v == 0)

    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_z = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_H0:
        b_h += tl.load(h0 + (i_n * H + i_h) * K * V + o_kv, mask=m_kv, other=0.0)
        if NORMALIZE:
            b_z += tl.load(z0 + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
    for i_t in range(tl.cdiv(L, BT)):
        i_c = boh + i_t
        tl.store(h + (i_c * H + i_h) * K * V + o_kv, b_h.to(h.dtype.element_ty), mask=m_kv)
        if NORMALIZE:
            tl.store(hz + (i_c * H + i_h) * K + o_k, b_z, mask=m_z)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        rows = bos + o_t
        b_k, _ = _load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_v = _load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        if USE_G:
            b_G, b_GL = _chunk_decay(g, rows, m_t, i_h, H, BT)
            # exp(G_L - G_j) <= 1: the weight of key j at the chunk end, never a quotient.
            b_k = b_k * tl.exp(b_GL - b_G)[:, None]
            b_h = b_h * tl.exp(b_GL)
            b_z = b_z * tl.exp(b_GL)
        b_h += tl.dot(tl.trans(_operand(b_k, LOWP, DT)), _operand(b_v, LOWP, DT))
        if NORMALIZE:
            b_z += tl.sum(b_k, axis=0)
    if STORE_FINAL:
        tl.store(ht + (i_n * H + i_h) * K * V + o_kv, b_h, mask=m_kv)
        if NORMALIZE:
            tl.store(zt + (i_n * H + i_h) * K + o_k, b_z, mask=m_z)


@triton.jit
def chunk_fwd_kernel_o(
    q, k, v, g, h, hz, o, den, cu_seqlens, chunk_indices, scale, eps,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, LOWP: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n = tl.load(chunk_indices + i_c * 2)
    i_t = tl.load(chunk_indices + i_c * 2 + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < L
    rows = bos + o_t
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    m_causal = o_i[:, None] >= o_i[None, :]

    b_o = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    b_A = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT]
    b_qz = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = _load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = _load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        p_h = h + (i_c * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(p_h, mask=m_k[:, None] & m_v[None, :], other=0.0).to(tl.float32)
        b_q_op = _operand(b_q, LOWP, DT)
        b_o += tl.dot(b_q_op, _operand(b_h, LOWP, DT))
        b_A += tl.dot(b_q_op, tl.trans(_operand(b_k, LOWP, DT)))
        if NORMALIZE:
            b_hz = tl.load(hz + (i_c * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_qz += tl.sum(b_q * b_hz[None, :], axis=1)
    if USE_G:
        b_G, _ = _chunk_decay(g, rows, m_t, i_h, H, BT)
        b_o = b_o * tl.exp(b_G)[:, None]
        b_qz = b_qz * tl.exp(b_G)
        # Mask before exp: above the diagonal G_i - G_j > 0 may overflow.
        b_W = tl.exp(tl.where(m_causal, b_G[:, None] - b_G[None, :], float("-inf")))
        b_P = tl.where(m_causal, b_A * b_W, 0.0)
    else:
        b_P = tl.where(m_causal, b_A, 0.0)
    b_v = _load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_o += tl.dot(_operand(b_P, LOWP, DT), _operand(b_v, LOWP, DT))
    b_o = b_o * scale
    if NORMALIZE:
        b_den = scale * (b_qz + tl.sum(b_P, axis=1)) + eps
        b_safe = tl.where(vanishes(b_den), 1.0, b_den)
        b_o = tl.where(vanishes(b_den)[:, None], 0.0, b_o / b_safe[:, None])
        m_den = m_t & (tl.zeros([BT], dtype=tl.int64) + i_v == 0)
        tl.store(den + rows * H + i_h, b_den, mask=m_den)
    p_o = o + (rows[:, None] * H + i_h) * V + o_v[None, :]
    tl.store(p_o, b_o.to(o.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


@triton.jit
def chunk_bwd_kernel_dd(o, do, den, dd, T_total, H, V, BT: tl.constexpr, BV: tl.constexpr):
    """dd = -(do · o) / D per token: the cotangent of the denominator D."""
    i_b = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    rows = i_b * BT + tl.arange(0, BT)
    m_t = rows < T_total
    b_s = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_o = _load_rows(o, rows, m_t, i_h, H, V, o_v, m_v)
        b_do = _load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)
        b_s += tl.sum(b_o * b_do, axis=1)
    b_den = tl.load(den + rows * H + i_h, mask=m_t, other=0.0)
    tl.store(dd + rows * H + i_h, -b_s * _reciprocal(b_den), mask=m_t)


@triton.jit
def chunk_bwd_kernel_dh(
    q, g, do, den, dd, dht, dzt, dh, dhz, dh0, dz0, cu_seqlens, chunk_offsets, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, USE_DHT: tl.constexpr, STORE_DH0: tl.constexpr,
    NORMALIZE: tl.constexpr, LOWP: tl.constexpr,
):
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_v = tl.program_id(2).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    DT = q.dtype.element_ty
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    boh = tl.load(chunk_offsets + i_n)
    NT = tl.cdiv(L, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    o_kv = o_k[:, None] * V + o_v[None, :]
    m_z = m_k & (tl.zeros([BK], dtype=tl.int64) + i_v == 0)

    # b_dh is dL/dS at the end of the current chunk, seeded with the final-state cotangent.
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_dz = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_DHT:
        b_dh += tl.load(dht + (i_n * H + i_h) * K * V + o_kv, mask=m_kv, other=0.0)
        if NORMALIZE:
            b_dz += tl.load(dzt + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        i_c = boh + i_t
        tl.store(dh + (i_c * H + i_h) * K * V + o_kv, b_dh.to(dh.dtype.element_ty), mask=m_kv)
        if NORMALIZE:
            tl.store(dhz + (i_c * H + i_h) * K + o_k, b_dz, mask=m_z)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        rows = bos + o_t
        b_q, _ = _load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_do = _load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        # Per-row weight of do_t in dS: s exp(G_t) (/ D_t when normalized).
        b_f = tl.full([BT], scale, dtype=tl.float32)  # [BT]
        if NORMALIZE:
            b_fz = scale * tl.load(dd + rows * H + i_h, mask=m_t, other=0.0)
            b_f = b_f * _reciprocal(tl.load(den + rows * H + i_h, mask=m_t, other=0.0))
        if USE_G:
            b_G, b_GL = _chunk_decay(g, rows, m_t, i_h, H, BT)
            b_f = b_f * tl.exp(b_G)
            b_dh = b_dh * tl.exp(b_GL)
            if NORMALIZE:
                b_fz = b_fz * tl.exp(b_G)
                b_dz = b_dz * tl.exp(b_GL)
        b_qf = _operand(b_q * b_f[:, None], LOWP, DT)
        b_dh += tl.dot(tl.trans(b_qf), _operand(b_do, LOWP, DT))
        if NORMALIZE:
            b_dz += tl.sum(b_q * b_fz[:, None], axis=0)
    if STORE_DH0:
        tl.store(dh0 + (i_n * H + i_h) * K * V + o_kv, b_dh, mask=m_kv)
        if NORMALIZE:
            tl.store(dz0 + (i_n * H + i_h) * K + o_k, b_dz, mask=m_z)


@triton.jit
def chunk_bwd_kernel_dv(
    q, k, g, do, den, dh, dv, cu_seqlens, chunk_indices, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, LOWP: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64)
    i_v = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n = tl.load(chunk_indices + i_c * 2)
    i_t = tl.load(chunk_indices + i_c * 2 + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < L
    rows = bos + o_t
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    # Transposed causal mask: row j (key), column i (query), i >= j.
    m_causal = o_i[:, None] <= o_i[None, :]
    if USE_G:
        b_G, b_GL = _chunk_decay(g, rows, m_t, i_h, H, BT)

    b_At = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT], A transposed: k_j · q_i
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = _load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = _load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_At += tl.dot(_operand(b_k, LOWP, DT), tl.trans(_operand(b_q, LOWP, DT)))
        p_dh = dh + (i_c * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_dh = tl.load(p_dh, mask=m_k[:, None] & m_v[None, :], other=0.0).to(tl.float32)
        if USE_G:
            b_k = b_k * tl.exp(b_GL - b_G)[:, None]
        b_dv += tl.dot(_operand(b_k, LOWP, DT), _operand(b_dh, LOWP, DT))
    if USE_G:
        b_W = tl.exp(tl.where(m_causal, b_G[None, :] - b_G[:, None], float("-inf")))
        b_Pt = tl.where(m_causal, b_At * b_W, 0.0)
    else:
        b_Pt = tl.where(m_causal, b_At, 0.0)
    # Column i of P^T carries s (/ D_i when normalized): the weight of do_i.
    b_f = tl.full([BT], scale, dtype=tl.float32)  # [BT]
    if NORMALIZE:
        b_f = b_f * _reciprocal(tl.load(den + rows * H + i_h, mask=m_t, other=0.0))
    b_Pt = b_Pt * b_f[None, :]
    b_do = _load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_dv += tl.dot(_operand(b_Pt, LOWP, DT), _operand(b_do, LOWP, DT))
    p_dv = dv + (rows[:, None] * H + i_h) * V + o_v[None, :]
    tl.store(p_dv, b_dv.to(dv.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


@triton.jit
def chunk_bwd_kernel_dqk(
    q, k, v, g, h, hz, do, den, dd, dh, dhz, dq, dk, dgp, cu_seqlens, chunk_indices, scale,
    T_total, H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, LOWP: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n = tl.load(chunk_indices + i_c * 2)
    i_t = tl.load(chunk_indices + i_c * 2 + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
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
        m_kv = m_k[:, None] & m_v[None, :]
        o_kv = (i_c * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_v = _operand(_load_rows(v, rows, m_t, i_h, H, V, o_v, m_v), LOWP, DT)  # [BT, BV]
        b_do = _operand(_load_rows(do, rows, m_t, i_h, H, V, o_v, m_v), LOWP, DT)  # [BT, BV]
        b_h = tl.load(h + o_kv, mask=m_kv, other=0.0).to(tl.float32)  # [BK, BV]
        b_dh = tl.load(dh + o_kv, mask=m_kv, other=0.0).to(tl.float32)  # [BK, BV]
        b_dP += tl.dot(b_do, tl.trans(b_v))
        b_dqs += tl.dot(b_do, tl.trans(_operand(b_h, LOWP, DT)))
        b_dks += tl.dot(b_v, tl.trans(_operand(b_dh, LOWP, DT)))
    if NORMALIZE:
        # With z as an extra value column: dP_ij = do_i · v_j / D_i + dd_i.
        b_r = _reciprocal(tl.load(den + rows * H + i_h, mask=m_t, other=0.0))
        b_dd = tl.load(dd + rows * H + i_h, mask=m_t, other=0.0)
        b_hz = tl.load(hz + (i_c * H + i_h) * K + o_k, mask=m_k, other=0.0)
        b_dhz = tl.load(dhz + (i_c * H + i_h) * K + o_k, mask=m_k, other=0.0)
        b_dP = b_dP * b_r[:, None] + b_dd[:, None]
        b_dqs = b_dqs * b_r[:, None] + b_dd[:, None] * b_hz[None, :]
        b_dks = b_dks + b_dhz[None, :]
    if USE_G:
        b_G, b_GL = _chunk_decay(g, rows, m_t, i_h, H, BT)
        b_dqs = b_dqs * tl.exp(b_G)[:, None]
        b_dks = b_dks * tl.exp(b_GL - b_G)[:, None]
        b_W = tl.exp(tl.where(m_causal, b_G[:, None] - b_G[None, :], float("-inf")))
        b_dS = tl.where(m_causal, b_dP * b_W, 0.0)
    else:
        b_dS = tl.where(m_causal, b_dP, 0.0)
    b_dS = b_dS * scale
    b_q, b_qx = _load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_k, b_kx = _load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_dS_op = _operand(b_dS, LOWP, DT)
    # dq~ and dk~: gradients with respect to the features φ(q), φ(k).
    b_dq = b_dqs * scale + tl.dot(b_dS_op, _operand(b_k, LOWP, DT))
    b_dk = b_dks + tl.dot(tl.trans(b_dS_op), _operand(b_q, LOWP, DT))
    m_tk = m_t[:, None] & m_k[None, :]
    if USE_G:
        # dL/dG_t = φ(q_t)·dφ(q_t) - φ(k_t)·dφ(k_t), a partial sum over this K block.
        b_dG = tl.sum(b_q * b_dq - b_k * b_dk, axis=1)
        tl.store(dgp + (i_k * T_total + rows) * H + i_h, b_dG, mask=m_t)
    b_dq = b_dq * feature_map_grad(b_qx, FEATURE)
    b_dk = b_dk * feature_map_grad(b_kx, FEATURE)
    p_dq = dq + (rows[:, None] * H + i_h) * K + o_k[None, :]
    p_dk = dk + (rows[:, None] * H + i_h) * K + o_k[None, :]
    tl.store(p_dq, b_dq.to(dq.dtype.element_ty), mask=m_tk)
    tl.store(p_dk, b_dk.to(dk.dtype.element_ty), mask=m_tk)


@triton.jit
def chunk_bwd_kernel_dg(
    dgp, fin, dg, cu_seqlens, T_total, H, NK, BT: tl.constexpr,
):
    """dg_s = Σ_{t >= s} dL/dG_t within each sequence, as a true reverse scan."""
    i_nh = tl.program_id(0).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    NT = tl.cdiv(L, BT)
    o_i = tl.arange(0, BT)
    m_suffix = o_i[None, :] >= o_i[:, None]
    # The final-state term <dS_T, S_T> + <dz_T, z_T> belongs to the last token, hence to all.
    b_carry = tl.load(fin + i_n * H + i_h)
    # The stride between K-block partials, in int64 (bos is int64; T_total may be a constexpr).
    s_k = (bos * 0 + T_total) * H
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        o_t = i_t * BT + o_i
        m_t = o_t < L
        rows = bos + o_t
        b_dG = tl.zeros([BT], dtype=tl.float32)  # [BT]
        p_dgp = dgp + rows * H + i_h
        for _ in range(NK):
            b_dG += tl.load(p_dgp, mask=m_t, other=0.0)
            p_dgp += s_k
        # A masked row sum, not total - prefix, keeps each suffix accurate (BUG_CLASSES.md).
        b_dg = tl.sum(tl.where(m_suffix, b_dG[None, :], 0.0), axis=1) + b_carry
        tl.store(dg + rows * H + i_h, b_dg, mask=m_t)
        b_carry = b_carry + tl.sum(b_dG, axis=0)


# fmt: on


@dataclass(frozen=True)
class ChunkTable:
    """Where every chunk lives, for the packed token axis of B*T (or varlen) tokens.

    Attributes:
        cu_seqlens: Sequence boundaries ``[N+1]`` int64 on the inputs' device; without
            ``cu_seqlens`` the B rows are sequences of length T.
        chunk_indices: ``[NC, 2]`` int64: (sequence, chunk within the sequence) per chunk.
        chunk_offsets: ``[N]`` int64: the first global chunk of each sequence.
        num_chunks: NC, the total number of chunks (empty sequences have none).
        chunk_size: BT.
    """

    cu_seqlens: torch.Tensor
    chunk_indices: torch.Tensor
    chunk_offsets: torch.Tensor
    num_chunks: int
    chunk_size: int

    @property
    def num_sequences(self) -> int:
        """N."""
        return int(self.chunk_offsets.numel())


def chunk_table(
    cu_seqlens: torch.Tensor | None, B: int, T: int, chunk_size: int, device: torch.device
) -> ChunkTable:
    """Build the chunk index table on the host; chunks never straddle a sequence boundary.

    Args:
        cu_seqlens: Packed boundaries ``[N+1]`` (int) or `None` for B sequences of length T.
        B: Batch size.
        T: Tokens per batch row.
        chunk_size: Tokens per chunk.
        device: Where the kernels run.

    Returns:
        The `ChunkTable`.
    """
    if cu_seqlens is None:
        return _uniform_chunk_table(B, T, chunk_size, device)
    return _build_chunk_table(cu_seqlens.to("cpu", torch.int64), chunk_size, device)


@functools.lru_cache(maxsize=64)
def _uniform_chunk_table(B: int, T: int, chunk_size: int, device: torch.device) -> ChunkTable:
    # Cached: without varlen the table depends on the shape only, so a training loop builds
    # and copies it to the device once.
    bounds = torch.arange(B + 1, dtype=torch.int64) * T
    return _build_chunk_table(bounds, chunk_size, device)


def _build_chunk_table(bounds: torch.Tensor, chunk_size: int, device: torch.device) -> ChunkTable:
    counts = (bounds[1:] - bounds[:-1] + chunk_size - 1) // chunk_size  # [N]
    offsets = torch.cumsum(counts, 0) - counts
    total = int(counts.sum())
    seq = torch.repeat_interleave(torch.arange(counts.numel(), dtype=torch.int64), counts)
    local = torch.arange(total, dtype=torch.int64) - offsets[seq]
    return ChunkTable(
        cu_seqlens=bounds.to(device),
        chunk_indices=torch.stack([seq, local], dim=1).contiguous().to(device),
        chunk_offsets=offsets.to(device),
        num_chunks=total,
        chunk_size=chunk_size,
    )


def _block(n: int) -> int:
    """A power-of-two tile width >= 16 (tl.dot's minimum) covering up to 64 of n."""
    return min(64, max(16, triton.next_power_of_2(n)))


def _num_warps(chunk_size: int) -> int:
    """Warps per program: [128, 128] fp32 tiles need eight to stay in registers."""
    return 8 if chunk_size >= 128 else 4


def _low_precision_dots(dtype: torch.dtype) -> bool:
    """Whether ``tl.dot`` operands are rounded to the input dtype: bf16 inputs, compiled only.

    bf16 keeps fp32's exponent range, so rounding P, dS or the state to it cannot overflow.
    fp16 cannot promise that (1/D-scaled gradients and long-sequence states exceed 65504), so
    fp16 and fp32 inputs keep fp32 operands (tf32 on NVIDIA, which has fp16's precision with
    fp32's range). The interpreter computes bf16 arithmetic on raw bits, so it never casts to
    bf16 there (INTERPRETER.md).
    """
    return dtype == torch.bfloat16 and not _backend.INTERPRETING


def check_chunk_size(chunk_size: object) -> int:
    """Return ``chunk_size`` if it is a power of two in [16, 128], else raise ValueError."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise ValueError(
            f"Expected int but got chunk_size={chunk_size!r} (type={type(chunk_size).__name__})."
        )
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(
            f"Got chunk_size={chunk_size}, but chunk_size must be a power of two in [16, 128]."
        )
    return chunk_size


def chunk_fwd_h(
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    h0: torch.Tensor | None,
    z0: torch.Tensor | None,
    *,
    table: ChunkTable,
    feature: int,
    normalize: bool,
    store_final: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Compute the state at every chunk start (and the final state) by a pass over chunks.

    Args:
        k: Keys ``[B, T, H, K]``, contiguous.
        v: Values ``[B, T, H, V]``, contiguous.
        g: Decay ``[B, T, H]`` fp32 or `None`.
        h0: Initial state ``[N, H, K, V]`` fp32 or `None`.
        z0: Initial key sum ``[N, H, K]`` fp32 or `None`.
        table: The chunk table.
        feature: Feature-map code.
        normalize: Whether to carry the key sum z.
        store_final: Whether to return S_T (and z_T).

    Returns:
        ``(h, hz, ht, zt)``: h ``[NC, H, K, V]`` (fp32, or the input dtype when dots take
        low-precision operands), hz ``[NC, H, K]`` fp32 or `None`, ht ``[N, H, K, V]`` and
        zt ``[N, H, K]`` fp32 or `None`.
    """
    _, _, H, K = k.shape
    V = v.shape[-1]
    N, NC = table.num_sequences, table.num_chunks
    lowp = _low_precision_dots(k.dtype)
    BK, BV = _block(K), _block(V)
    h = torch.empty(NC, H, K, V, dtype=k.dtype if lowp else torch.float32, device=k.device)
    hz = torch.empty(NC, H, K, dtype=torch.float32, device=k.device) if normalize else None
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=k.device) if store_final else None
    zt = (
        torch.empty(N, H, K, dtype=torch.float32, device=k.device)
        if store_final and normalize
        else None
    )
    grid = (N * H, triton.cdiv(K, BK), triton.cdiv(V, BV))
    # fmt: off
    chunk_fwd_kernel_h[grid](
        k=k, v=v, g=g, h0=h0, z0=z0, h=h, hz=hz, ht=ht, zt=zt,
        cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets,
        H=H, K=K, V=V, BT=table.chunk_size, BK=BK, BV=BV, FEATURE=feature,
        USE_G=g is not None, USE_H0=h0 is not None, STORE_FINAL=store_final,
        NORMALIZE=normalize, LOWP=lowp, num_warps=_num_warps(table.chunk_size),
    )
    # fmt: on
    return h, hz, ht, zt


def chunk_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    h0: torch.Tensor | None,
    z0: torch.Tensor | None,
    *,
    table: ChunkTable,
    scale: float,
    normalize: bool,
    eps: float,
    feature: int,
    output_final_state: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Run the forward pass.

    Args:
        q: Queries ``[B, T, H, K]``, contiguous.
        k: Keys ``[B, T, H, K]``, contiguous.
        v: Values ``[B, T, H, V]``, contiguous.
        g: Decay ``[B, T, H]`` fp32 or `None`.
        h0: Initial state ``[N, H, K, V]`` fp32 or `None`.
        z0: Initial key sum ``[N, H, K]`` fp32 or `None`.
        table: The chunk table.
        scale: The scale s.
        normalize: Divide by s φ(q)^T z + eps.
        eps: Denominator offset (added in fp32).
        feature: Feature-map code.
        output_final_state: Return S_T (and z_T).

    Returns:
        ``(o, ht, zt, den)``: o ``[B, T, H, V]`` (fp32 when normalized, for the backward's
        do · o; else the input dtype, or fp32 for bf16 under the interpreter), the final state,
        and the denominators ``[B, T, H]`` fp32 when normalized (else `None`).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    # fmt: off
    h, hz, ht, zt = chunk_fwd_h(
        k, v, g, h0, z0, table=table, feature=feature, normalize=normalize,
        store_final=output_final_state,
    )
    # fmt: on
    BV = _block(V)
    if normalize:
        o = torch.empty(B, T, H, V, dtype=torch.float32, device=q.device)
        den = torch.empty(B, T, H, dtype=torch.float32, device=q.device)
    else:
        o = empty_output((B, T, H, V), q.dtype, q.device)
        den = None
    grid = (table.num_chunks, triton.cdiv(V, BV), H)
    # fmt: off
    chunk_fwd_kernel_o[grid](
        q=q, k=k, v=v, g=g, h=h, hz=hz, o=o, den=den,
        cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices, scale=scale, eps=eps,
        H=H, K=K, V=V, BT=table.chunk_size, BK=_block(K), BV=BV, FEATURE=feature,
        USE_G=g is not None, NORMALIZE=normalize, LOWP=_low_precision_dots(q.dtype),
        num_warps=_num_warps(table.chunk_size),
    )
    # fmt: on
    return o, ht, zt, den


def chunk_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    h0: torch.Tensor | None,
    z0: torch.Tensor | None,
    o: torch.Tensor | None,
    den: torch.Tensor | None,
    do: torch.Tensor,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
    *,
    table: ChunkTable,
    scale: float,
    normalize: bool,
    feature: int,
) -> tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor | None,
    torch.Tensor | None,
    torch.Tensor | None,
]:
    """Run the backward pass.

    Args:
        q: Queries ``[B, T, H, K]``, contiguous.
        k: Keys ``[B, T, H, K]``, contiguous.
        v: Values ``[B, T, H, V]``, contiguous.
        g: Decay ``[B, T, H]`` fp32 or `None`.
        h0: Initial state ``[N, H, K, V]`` fp32 or `None`.
        z0: Initial key sum ``[N, H, K]`` fp32 or `None`.
        o: The forward's fp32 output ``[B, T, H, V]`` (normalized only, else `None`).
        den: The forward's denominators ``[B, T, H]`` (normalized only, else `None`).
        do: Output cotangent ``[B, T, H, V]``.
        dht: Final-state cotangent ``[N, H, K, V]`` or `None`.
        dzt: Final key-sum cotangent ``[N, H, K]`` or `None`.
        table: The chunk table.
        scale: The scale s.
        normalize: Whether the forward was normalized.
        feature: Feature-map code.

    Returns:
        ``(dq, dk, dv, dg, dh0, dz0)``: dq, dk, dv in the input dtype (fp32 for bf16 under the
        interpreter), dg ``[B, T, H]`` fp32 (or `None` without decay), dh0 and dz0 fp32 (or
        `None` without an initial state).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    N, NC, BT = table.num_sequences, table.num_chunks, table.chunk_size
    BK, BV = _block(K), _block(V)
    NK = triton.cdiv(K, BK)
    lowp = _low_precision_dots(q.dtype)
    use_g = g is not None
    do = do.contiguous()
    use_dht = dht is not None or dzt is not None
    if use_dht:
        dht = torch.zeros(N, H, K, V, dtype=torch.float32, device=q.device) if dht is None else dht
        dht = dht.float().contiguous()
        if normalize:
            dzt = torch.zeros(N, H, K, dtype=torch.float32, device=q.device) if dzt is None else dzt
            dzt = dzt.float().contiguous()
    # fmt: off
    h, hz, ht, zt = chunk_fwd_h(
        k, v, g, h0, z0, table=table, feature=feature, normalize=normalize,
        store_final=use_g and use_dht,
    )
    # fmt: on
    dd = None
    if normalize:
        dd = torch.empty(B, T, H, dtype=torch.float32, device=q.device)
        # fmt: off
        chunk_bwd_kernel_dd[(triton.cdiv(B * T, BT), H)](
            o=o, do=do, den=den, dd=dd, T_total=B * T, H=H, V=V, BT=BT, BV=BV,
            num_warps=_num_warps(BT),
        )
        # fmt: on

    dh = torch.empty(NC, H, K, V, dtype=q.dtype if lowp else torch.float32, device=q.device)
    dhz = torch.empty(NC, H, K, dtype=torch.float32, device=q.device) if normalize else None
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=q.device) if h0 is not None else None
    dz0 = (
        torch.empty(N, H, K, dtype=torch.float32, device=q.device)
        if h0 is not None and normalize
        else None
    )
    # fmt: off
    chunk_bwd_kernel_dh[(N * H, NK, triton.cdiv(V, BV))](
        q=q, g=g, do=do, den=den, dd=dd, dht=dht, dzt=dzt, dh=dh, dhz=dhz, dh0=dh0, dz0=dz0,
        cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets, scale=scale,
        H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, FEATURE=feature, USE_G=use_g, USE_DHT=use_dht,
        STORE_DH0=h0 is not None, NORMALIZE=normalize, LOWP=lowp, num_warps=_num_warps(BT),
    )
    # fmt: on

    dv = empty_output((B, T, H, V), q.dtype, q.device)
    # fmt: off
    chunk_bwd_kernel_dv[(NC, triton.cdiv(V, BV), H)](
        q=q, k=k, g=g, do=do, den=den, dh=dh, dv=dv,
        cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices, scale=scale,
        H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, FEATURE=feature, USE_G=use_g,
        NORMALIZE=normalize, LOWP=lowp, num_warps=_num_warps(BT),
    )
    # fmt: on

    dq = empty_output((B, T, H, K), q.dtype, q.device)
    dk = empty_output((B, T, H, K), q.dtype, q.device)
    dgp = torch.empty(NK, B * T, H, dtype=torch.float32, device=q.device) if use_g else None
    # fmt: off
    chunk_bwd_kernel_dqk[(NC, NK, H)](
        q=q, k=k, v=v, g=g, h=h, hz=hz, do=do, den=den, dd=dd, dh=dh, dhz=dhz,
        dq=dq, dk=dk, dgp=dgp, cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices,
        scale=scale, T_total=B * T, H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, FEATURE=feature,
        USE_G=use_g, NORMALIZE=normalize, LOWP=lowp, num_warps=_num_warps(BT),
    )
    # fmt: on

    dg = None
    if use_g:
        if use_dht:
            assert ht is not None
            assert dht is not None
            fin = (dht * ht).sum(dim=(-2, -1))
            if normalize:
                assert zt is not None
                assert dzt is not None
                fin = fin + (dzt * zt).sum(dim=-1)
        else:
            fin = torch.zeros(N, H, dtype=torch.float32, device=q.device)
        dg = torch.empty(B, T, H, dtype=torch.float32, device=q.device)
        # fmt: off
        chunk_bwd_kernel_dg[(N * H,)](
            dgp=dgp, fin=fin.contiguous(), dg=dg, cu_seqlens=table.cu_seqlens,
            T_total=B * T, H=H, NK=NK, BT=BT, num_warps=_num_warps(BT),
        )
        # fmt: on
    return dq, dk, dv, dg, dh0, dz0


class ChunkLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: sequencing and saved tensors only (the maths is in the kernels)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        h0: torch.Tensor | None,
        z0: torch.Tensor | None,
        scale: float,
        normalize: bool,
        eps: float,
        feature: int,
        output_final_state: bool,
        cu_seqlens: torch.Tensor | None,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        B, T = q.shape[:2]
        table = chunk_table(cu_seqlens, B, T, chunk_size, q.device)
        # fmt: off
        o, ht, zt, den = chunk_fwd(
            q, k, v, g, h0, z0, table=table, scale=scale, normalize=normalize, eps=eps,
            feature=feature, output_final_state=output_final_state,
        )
        # fmt: on
        # The backward needs the unrounded output for do · o; unnormalized o is not needed.
        ctx.save_for_backward(q, k, v, g, h0, z0, o if normalize else None, den)  # type: ignore[arg-type]
        ctx.table = table  # type: ignore[attr-defined]
        ctx.options = (scale, normalize, feature)  # type: ignore[attr-defined]
        ctx.set_materialize_grads(False)
        return finish_output(o, q.dtype), ht, zt

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx,
        do: torch.Tensor | None,
        dht: torch.Tensor | None,
        dzt: torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, h0, z0, o, den = ctx.saved_tensors  # type: ignore[attr-defined]
        scale, normalize, feature = ctx.options  # type: ignore[attr-defined]
        if do is None:
            do = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
        # fmt: off
        dq, dk, dv, dg, dh0, dz0 = chunk_bwd(
            q, k, v, g, h0, z0, o, den, do, dht, dzt,
            table=ctx.table, scale=scale, normalize=normalize, feature=feature,  # type: ignore[attr-defined]
        )
        return (
            finish_output(dq, q.dtype),
            finish_output(dk, k.dtype),
            finish_output(dv, v.dtype),
            dg, dh0, dz0,
            None, None, None, None, None, None, None,
        )
        # fmt: on


def chunked_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    normalize: bool = False,
    eps: float = 0.0,
    feature_map: str = "identity",
    initial_state: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None]:
    """Causal linear attention in the chunked form, differentiable in every tensor input.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay ``[B, T, H]`` (<= 0), or `None` for no decay. Default: `None`.
        scale: The scale s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)^T z_t + eps; a row whose denominator is exactly 0
            returns 0. Default: `False`.
        eps: Denominator offset, added in fp32; must be 0 unless normalized. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel.
            Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Return the final state. Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1); the state restarts at
            each boundary and empty sequences are allowed. Default: `None`.
        chunk_size: Tokens per chunk, a power of two in [16, 128]. Default: `64`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``, else S_T ``[N, H, K, V]`` fp32, or ``(S_T, z_T)`` when
        normalized.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    chunk_size = check_chunk_size(chunk_size)
    # fmt: off
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map=feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )
    # fmt: on
    # fmt: off
    o, ht, zt = ChunkLinearAttentionFunction.apply(
        x.q, x.k, x.v, x.g, x.h0, x.z0, x.scale, x.normalize, x.eps, x.feature,
        x.output_final_state, x.cu_seqlens, chunk_size,
    )
    # fmt: on
    if not x.output_final_state:
        return o, None
    if x.normalize:
        return o, (ht, zt)
    return o, ht


def precision_recipe(dtype: torch.dtype, *, chunk_size: int = 64) -> dict[str, object]:
    """Describe how the kernels round for inputs of ``dtype`` in the current mode.

    The result is the keyword arguments of ``linattn_verify.recipe.PrecisionRecipe``. Compiled
    on CUDA, dots accumulate on tensor cores (``mma``), fp32 operands go in as tf32 and fp32
    division is ``div.full``. Compiled with bf16 inputs every dot operand is bf16, which rounds
    φ(q), φ(k), decayed keys, the stored state, P and dS: at most three such roundings meet any
    one product term, forward or backward. Under the interpreter dots and division are IEEE
    fp32 and no intermediate is rounded.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16).
        chunk_size: The chunk size the kernels run with. Default: `64`.

    Returns:
        The recipe as a dict.

    Raises:
        ValueError: for an unsupported dtype or chunk size.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype among float32, float16, bfloat16 but got dtype={dtype}.")
    chunk_size = check_chunk_size(chunk_size)
    interpreting = _backend.INTERPRETING
    lowp = _low_precision_dots(dtype)
    return {
        "form": "chunk",
        "chunk_size": chunk_size,
        "accumulation": "ieee" if interpreting else "mma",
        "dot_precision": "ieee" if interpreting or lowp else "tf32",
        "dots_on_path": 2,
        "intermediate_dtype": "input" if lowp else None,
        "casts_on_path": 3 if lowp else 0,
        "decay_scan": "chunk_local",
        "division": "rn" if interpreting else "full",
        "naive_elu1": False,
        "eps_dtype": "float32",
    }


__all__ = [
    "CHUNK_SIZES",
    "ChunkLinearAttentionFunction",
    "ChunkTable",
    "check_chunk_size",
    "chunk_bwd",
    "chunk_fwd",
    "chunk_fwd_h",
    "chunk_table",
    "chunked_linear_attention",
    "precision_recipe",
]
