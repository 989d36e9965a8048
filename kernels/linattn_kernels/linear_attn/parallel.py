# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parallel (tiled, flash-style) form of causal linear attention, forward and backward.

Per sequence and head, o = s (φ(Q)φ(K)^T ⊙ M ⊙ W) V + s exp(G) ⊙ φ(Q) S_0, with
W_tj = exp(G_t - G_j) from whole-sequence cumulative sums G of g, masked before the exp. One
program owns a block of BT queries and loops over key blocks up to the diagonal, so the T x T
matrix never exists. Normalized outputs divide by s Σ_j P_tj + s exp(G_t) φ(q_t)·z_0 + eps; a
row whose denominator is exactly zero returns 0 (and passes no gradient).

Every sequence, packed (``cu_seqlens``) or not, is addressed through a host-built table of
(sequence, query block) pairs, so no block ever mixes tokens of two sequences. The derivation,
the rounding structure and the design notes live in this package's README.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import (
    INPUT_DTYPES,
    Inputs,
    empty_output,
    finish_output,
    prepare,
)
from linattn_kernels.common.feature_maps import feature_map, feature_map_grad, vanishes

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
Gradients = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None,
    torch.Tensor | None,
]  # fmt: skip


@triton.jit
def parallel_fwd_kernel_cumsum(g, G, cu_seqlens, H: tl.constexpr, BT: tl.constexpr):
    """G_t = Σ_{s<=t} g_s within each sequence, in fp32 (grid: N, H)."""
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_b = tl.arange(0, BT)
    b_carry = 0.0
    for i_t in range(tl.cdiv(L, BT)):
        o_t = i_t * BT + o_b
        m_t = o_t < L
        # [BT]
        b_g = tl.load(g + (bos + o_t) * H + i_h, mask=m_t, other=0.0).to(tl.float32)
        b_G = tl.cumsum(b_g, 0) + b_carry
        tl.store(G + (bos + o_t) * H + i_h, b_G, mask=m_t)
        # Selecting the last entry exactly (not re-summing g) keeps G_end equal to the stored G_T.
        b_carry = tl.sum(tl.where(o_b == BT - 1, b_G, 0.0), 0)


@triton.jit
def _load_features(
    x, bos, o_t, m_t, i_h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, FEATURE: tl.constexpr
):
    """Return (raw x, φ(x)) of a [BT, BK] block in fp32, φ zeroed outside the valid block."""
    o_k = tl.arange(0, BK)
    m = m_t[:, None] & (o_k < K)[None, :]
    b_x = tl.load(x + ((bos + o_t[:, None]) * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
    b_x = b_x.to(tl.float32)
    # φ(0) = 1 for elu1, so padding must be zeroed after the map, not by the masked load.
    return b_x, tl.where(m, feature_map(b_x, FEATURE), 0.0)


@triton.jit
def _load_rows(x, bos, o_t, m_t, i_h, H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr):
    """Load a [BT, BD] block of a [tokens, H, D] tensor as fp32 (zeros outside)."""
    o_d = tl.arange(0, BD)
    m = m_t[:, None] & (o_d < D)[None, :]
    p = x + ((bos + o_t[:, None]) * H + i_h) * D + o_d[None, :]
    return tl.load(p, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _store_rows(x, b_x, bos, o_t, m_t, i_h, H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr):
    o_d = tl.arange(0, BD)
    m = m_t[:, None] & (o_d < D)[None, :]
    p = x + ((bos + o_t[:, None]) * H + i_h) * D + o_d[None, :]
    tl.store(p, b_x.to(x.dtype.element_ty), mask=m)


@triton.jit
def _operand(b_x, like, DOT_LOW: tl.constexpr):
    """A tl.dot operand: fp32 (tf32 on CUDA), or rounded to ``like``'s dtype when DOT_LOW."""
    if DOT_LOW:
        return b_x.to(like.dtype.element_ty)
    return b_x


@triton.jit
def parallel_fwd_kernel(
    q, k, v, G, h0, z0, o, Z, tiles, cu_seqlens, scale, eps,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """o (and the denominator Z) for one query block of one sequence-head (grid: tiles, H)."""
    i_tile = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.load(tiles + 2 * i_tile)
    i_t = tl.load(tiles + 2 * i_tile + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK]
    _, b_q = _load_features(q, bos, o_t, m_t, i_h, H, K, BK, FEATURE)
    b_qd = _operand(b_q, q, DOT_LOW)
    if USE_G:
        b_Gq = tl.load(G + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
    # [BT, BV], [BT]
    b_n = tl.zeros([BT, BV], dtype=tl.float32)
    b_z = tl.zeros([BT], dtype=tl.float32)
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        _, b_k = _load_features(k, bos, o_s, m_s, i_h, H, K, BK, FEATURE)
        b_v = _load_rows(v, bos, o_s, m_s, i_h, H, V, BV)
        # [BT, BT]
        b_a = tl.dot(b_qd, tl.trans(_operand(b_k, k, DOT_LOW)))
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        if USE_G:
            b_Gk = tl.load(G + (bos + o_s) * H + i_h, mask=m_s, other=0.0)
            # Masked to -inf before the exp: above the diagonal G_t - G_j > 0 may overflow.
            b_w = tl.exp(tl.where(m_a, b_Gq[:, None] - b_Gk[None, :], float("-inf")))
            b_a = tl.where(m_a, b_a * b_w, 0.0)
        else:
            b_a = tl.where(m_a, b_a, 0.0)
        if NORMALIZE:
            b_z += tl.sum(b_a, 1)
        b_n += tl.dot(_operand(b_a, v, DOT_LOW), _operand(b_v, v, DOT_LOW))
    if USE_H0:
        m_h = m_k[:, None] & m_v[None, :]
        p_h0 = h0 + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :]
        # [BK, BV]
        b_h0 = tl.load(p_h0, mask=m_h, other=0.0)
        b_hn = tl.dot(b_qd, _operand(b_h0, q, DOT_LOW))
        if NORMALIZE:
            b_z0 = tl.load(z0 + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_hz = tl.sum(b_q * b_z0[None, :], 1)
        if USE_G:
            b_e = tl.exp(b_Gq)
            b_hn = b_hn * b_e[:, None]
            if NORMALIZE:
                b_hz = b_hz * b_e
        b_n += b_hn
        if NORMALIZE:
            b_z += b_hz
    b_o = b_n * scale
    if NORMALIZE:
        # eps is added in fp32, after the scale: Z = s φ(q)·z + eps exactly as the semantics say.
        b_den = b_z * scale + eps
        b_zero = vanishes(b_den)
        b_o = tl.where(b_zero[:, None], 0.0, b_o / tl.where(b_zero, 1.0, b_den)[:, None])
        tl.store(Z + (bos + o_t) * H + i_h, b_den, mask=m_t)
    _store_rows(o, b_o, bos, o_t, m_t, i_h, H, V, BV)


@triton.jit
def parallel_fwd_kernel_state(
    k, v, G, h0, z0, ht, zt, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """S_T = Σ_j exp(G_T - G_j) φ(k_j) v_j^T + exp(G_T) S_0 and z_T (grid: K x V tiles, N, H)."""
    i_kv = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    NV = tl.cdiv(V, BV)
    i_k = i_kv // NV
    i_v = i_kv % NV
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    if USE_G:
        # An empty sequence has G_T = 0: its final state is its initial state.
        b_Gend = tl.load(G + (bos + L - 1) * H + i_h, mask=L > 0, other=0.0)
    # [BK, BV], [BK]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    b_zk = tl.zeros([BK], dtype=tl.float32)
    for i_s in range(tl.cdiv(L, BT)):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        m_sk = m_s[:, None] & m_k[None, :]
        p_k = k + ((bos + o_s[:, None]) * H + i_h) * K + o_k[None, :]
        b_k = tl.load(p_k, mask=m_sk, other=0.0).to(tl.float32)
        # [BT, BK]
        b_k = tl.where(m_sk, feature_map(b_k, FEATURE), 0.0)
        p_v = v + ((bos + o_s[:, None]) * H + i_h) * V + o_v[None, :]
        b_v = tl.load(p_v, mask=m_s[:, None] & m_v[None, :], other=0.0).to(tl.float32)
        if USE_G:
            b_Gk = tl.load(G + (bos + o_s) * H + i_h, mask=m_s, other=0.0)
            b_w = tl.exp(tl.where(m_s, b_Gend - b_Gk, float("-inf")))
            b_k = b_k * b_w[:, None]
        b_h += tl.dot(tl.trans(_operand(b_k, k, DOT_LOW)), _operand(b_v, v, DOT_LOW))
        if NORMALIZE:
            b_zk += tl.sum(b_k, 0)
    m_h = m_k[:, None] & m_v[None, :]
    if USE_H0:
        b_h0 = tl.load(
            h0 + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :], mask=m_h, other=0.0
        )
        if NORMALIZE:
            b_z0 = tl.load(z0 + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
        if USE_G:
            b_e = tl.exp(b_Gend)
            b_h0 = b_h0 * b_e
            if NORMALIZE:
                b_z0 = b_z0 * b_e
        b_h += b_h0
        if NORMALIZE:
            b_zk += b_z0
    tl.store(ht + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :], b_h, mask=m_h)
    if NORMALIZE:
        tl.store(zt + (i_n * H + i_h) * K + o_k, b_zk, mask=m_k & (o_k * 0 + i_v == 0))


@triton.jit
def parallel_bwd_kernel_dq(
    q, k, v, G, h0, z0, o, Z, do, dq, dGq, delta, tiles, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, the query part q̃·dq̃ of dL/dG and δ_t = do_t·o_t for one query block."""
    i_tile = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.load(tiles + 2 * i_tile)
    i_t = tl.load(tiles + 2 * i_tile + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_qx, b_q = _load_features(q, bos, o_t, m_t, i_h, H, K, BK, FEATURE)
    b_do = _load_rows(do, bos, o_t, m_t, i_h, H, V, BV)
    b_dod = _operand(b_do, v, DOT_LOW)
    if NORMALIZE:
        b_o = _load_rows(o, bos, o_t, m_t, i_h, H, V, BV)
        b_den = tl.load(Z + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
        b_zero = vanishes(b_den)
        b_safe = tl.where(b_zero, 1.0, b_den)
        b_delta = tl.sum(b_do * b_o, 1)
        tl.store(delta + (bos + o_t) * H + i_h, b_delta, mask=m_t)
    if USE_G:
        b_Gq = tl.load(G + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        _, b_k = _load_features(k, bos, o_s, m_s, i_h, H, K, BK, FEATURE)
        b_v = _load_rows(v, bos, o_s, m_s, i_h, H, V, BV)
        # [BT, BT]: dA_tj = do_t·v_j, or (do_t·v_j - δ_t) / Z_t when normalized
        b_dp = tl.dot(b_dod, tl.trans(_operand(b_v, v, DOT_LOW)))
        if NORMALIZE:
            b_dp = tl.where(b_zero[:, None], 0.0, (b_dp - b_delta[:, None]) / b_safe[:, None])
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        if USE_G:
            b_Gk = tl.load(G + (bos + o_s) * H + i_h, mask=m_s, other=0.0)
            b_w = tl.exp(tl.where(m_a, b_Gq[:, None] - b_Gk[None, :], float("-inf")))
            b_dp = tl.where(m_a, b_dp * b_w, 0.0)
        else:
            b_dp = tl.where(m_a, b_dp, 0.0)
        b_dq += tl.dot(_operand(b_dp, k, DOT_LOW), _operand(b_k, k, DOT_LOW))
    if USE_H0:
        p_h0 = h0 + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :]
        b_h0 = tl.load(p_h0, mask=m_k[:, None] & m_v[None, :], other=0.0)
        # [BT, BK]: S_0 dN_t + z_0 dZ_t with dN_t = do_t / Z_t and dZ_t = -δ_t / Z_t
        b_dqh = tl.dot(b_dod, tl.trans(_operand(b_h0, q, DOT_LOW)))
        if NORMALIZE:
            b_z0 = tl.load(z0 + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_dqh = b_dqh - b_delta[:, None] * b_z0[None, :]
            b_dqh = tl.where(b_zero[:, None], 0.0, b_dqh / b_safe[:, None])
        if USE_G:
            b_dqh = b_dqh * tl.exp(b_Gq)[:, None]
        b_dq += b_dqh
    b_dq = b_dq * scale
    if USE_G:
        tl.store(dGq + (bos + o_t) * H + i_h, tl.sum(b_q * b_dq, 1), mask=m_t)
    _store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), bos, o_t, m_t, i_h, H, K, BK)


@triton.jit
def parallel_bwd_kernel_dkv(
    q, k, v, G, Z, delta, do, dht, dzt, dk, dv, dGk, tiles, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_DHT: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dk, dv and the key part k̃·dk̃ of dL/dG for one key block (loops over later queries)."""
    i_tile = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.load(tiles + 2 * i_tile)
    i_s = tl.load(tiles + 2 * i_tile + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_s = i_s * BT + tl.arange(0, BT)
    m_s = o_s < L
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_kx, b_k = _load_features(k, bos, o_s, m_s, i_h, H, K, BK, FEATURE)
    b_v = _load_rows(v, bos, o_s, m_s, i_h, H, V, BV)
    b_kd = _operand(b_k, k, DOT_LOW)
    b_vd = _operand(b_v, v, DOT_LOW)
    if USE_G:
        b_Gk = tl.load(G + (bos + o_s) * H + i_h, mask=m_s, other=0.0)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)
    for i_t in range(i_s, tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        _, b_q = _load_features(q, bos, o_t, m_t, i_h, H, K, BK, FEATURE)
        b_do = _load_rows(do, bos, o_t, m_t, i_h, H, V, BV)
        b_dod = _operand(b_do, v, DOT_LOW)
        # [BT(keys), BT(queries)]: the transposed score and gradient blocks
        b_at = tl.dot(b_kd, tl.trans(_operand(b_q, q, DOT_LOW)))
        b_dpt = tl.dot(b_vd, tl.trans(b_dod))
        m_a = (o_t[None, :] >= o_s[:, None]) & m_t[None, :]
        if NORMALIZE:
            b_den = tl.load(Z + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_delta = tl.load(delta + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_zero = vanishes(b_den)
            b_safe = tl.where(b_zero, 1.0, b_den)
            m_a = m_a & (~b_zero)[None, :]
            # dv takes P_tj / Z_t; dk takes dA_tj = (do_t·v_j - δ_t) / Z_t, as the dq pass does.
            b_at = b_at / b_safe[None, :]
            b_dpt = (b_dpt - b_delta[None, :]) / b_safe[None, :]
        if USE_G:
            b_Gq = tl.load(G + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_w = tl.exp(tl.where(m_a, b_Gq[None, :] - b_Gk[:, None], float("-inf")))
            b_at = b_at * b_w
            b_dpt = b_dpt * b_w
        b_at = tl.where(m_a, b_at, 0.0)
        b_dpt = tl.where(m_a, b_dpt, 0.0)
        b_dv += tl.dot(_operand(b_at, v, DOT_LOW), b_dod)
        b_dk += tl.dot(_operand(b_dpt, q, DOT_LOW), _operand(b_q, q, DOT_LOW))
    b_dk = b_dk * scale
    b_dv = b_dv * scale
    if USE_DHT:
        # The final state S_T = Σ_j exp(G_T - G_j) φ(k_j) v_j^T + ... sends dS_T back to every key.
        m_h = m_k[:, None] & m_v[None, :]
        p_dht = dht + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :]
        # [BK, BV]
        b_dht = tl.load(p_dht, mask=m_h, other=0.0)
        b_dhtd = _operand(b_dht, v, DOT_LOW)
        b_dkf = tl.dot(b_vd, tl.trans(b_dhtd))
        b_dvf = tl.dot(b_kd, b_dhtd)
        if NORMALIZE:
            b_dzt = tl.load(dzt + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_dkf = b_dkf + b_dzt[None, :]
        if USE_G:
            b_Gend = tl.load(G + (bos + L - 1) * H + i_h)
            b_we = tl.exp(tl.where(m_s, b_Gend - b_Gk, float("-inf")))
            b_dkf = b_dkf * b_we[:, None]
            b_dvf = b_dvf * b_we[:, None]
        b_dk += b_dkf
        b_dv += b_dvf
    if USE_G:
        tl.store(dGk + (bos + o_s) * H + i_h, tl.sum(b_k * b_dk, 1), mask=m_s)
    _store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), bos, o_s, m_s, i_h, H, K, BK)
    _store_rows(dv, b_dv, bos, o_s, m_s, i_h, H, V, BV)


@triton.jit
def parallel_bwd_kernel_dg(
    dGq, dGk, dGend, dg, cu_seqlens, H: tl.constexpr, BT: tl.constexpr, USE_DHT: tl.constexpr
):
    """dg_s = Σ_{t>=s} (q̃_t·dq̃_t - k̃_t·dk̃_t) + ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ (grid: N, H)."""
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_b = tl.arange(0, BT)
    b_carry = 0.0
    if USE_DHT:
        b_carry = tl.load(dGend + i_n * H + i_h)
    NT = tl.cdiv(L, BT)
    for i in range(NT):
        o_t = (NT - 1 - i) * BT + o_b
        m_t = o_t < L
        b_d = tl.load(dGq + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
        b_d = b_d - tl.load(dGk + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
        # A reverse scan, not total - prefix, so short suffixes keep their own precision.
        b_dg = tl.cumsum(b_d, 0, reverse=True) + b_carry
        tl.store(dg + (bos + o_t) * H + i_h, b_dg, mask=m_t)
        b_carry = tl.sum(tl.where(o_b == 0, b_dg, 0.0), 0)


@triton.jit
def parallel_bwd_kernel_dh0(
    q, G, Z, delta, do, dht, dzt, dh0, dz0, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_DHT: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dS_0 = s Σ_t exp(G_t) φ(q_t) dN_t^T + exp(G_T) dS_T, and dz_0 (grid: K x V tiles, N, H)."""
    i_kv = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    NV = tl.cdiv(V, BV)
    i_k = i_kv // NV
    i_v = i_kv % NV
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    # [BK, BV], [BK]
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)
    b_dz = tl.zeros([BK], dtype=tl.float32)
    for i_t in range(tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        m_tk = m_t[:, None] & m_k[None, :]
        b_q = tl.load(
            q + ((bos + o_t[:, None]) * H + i_h) * K + o_k[None, :], mask=m_tk, other=0.0
        ).to(tl.float32)
        # [BT, BK], [BT, BV]
        b_q = tl.where(m_tk, feature_map(b_q, FEATURE), 0.0)
        p_do = do + ((bos + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.0).to(tl.float32)
        if USE_G:
            b_Gq = tl.load(G + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_q = b_q * tl.exp(b_Gq)[:, None]
        if NORMALIZE:
            b_den = tl.load(Z + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_delta = tl.load(delta + (bos + o_t) * H + i_h, mask=m_t, other=0.0)
            b_zero = vanishes(b_den)
            b_safe = tl.where(b_zero, 1.0, b_den)
            b_do = tl.where(b_zero[:, None], 0.0, b_do / b_safe[:, None])
            b_dzr = tl.where(b_zero, 0.0, -b_delta / b_safe)
            b_dz += tl.sum(b_q * b_dzr[:, None], 0)
        b_dh += tl.dot(tl.trans(_operand(b_q, q, DOT_LOW)), _operand(b_do, q, DOT_LOW))
    b_dh = b_dh * scale
    b_dz = b_dz * scale
    if USE_DHT:
        m_h = m_k[:, None] & m_v[None, :]
        b_dht = tl.load(
            dht + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :], mask=m_h, other=0.0
        )
        if NORMALIZE:
            b_dzt = tl.load(dzt + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.0)
        if USE_G:
            b_e = tl.exp(tl.load(G + (bos + L - 1) * H + i_h, mask=L > 0, other=0.0))
            b_dht = b_dht * b_e
            if NORMALIZE:
                b_dzt = b_dzt * b_e
        b_dh += b_dht
        if NORMALIZE:
            b_dz += b_dzt
    p_dh0 = dh0 + ((i_n * H + i_h) * K + o_k[:, None]) * V + o_v[None, :]
    tl.store(p_dh0, b_dh, mask=m_k[:, None] & m_v[None, :])
    if NORMALIZE:
        tl.store(dz0 + (i_n * H + i_h) * K + o_k, b_dz, mask=m_k & (o_k * 0 + i_v == 0))


class Blocks(NamedTuple):
    """Tile sizes: BT tokens, BK/BV the padded head dims, BKS/BVS the state-kernel tiles."""

    BT: int
    BK: int
    BV: int
    BKS: int
    BVS: int


def blocks(K: int, V: int) -> Blocks:
    """Pick tile sizes: powers of two >= 16 (tl.dot's minimum), smaller BT for wide heads."""
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    widest = max(BK, BV)
    BT = 64 if widest <= 64 else 32 if widest <= 128 else 16
    return Blocks(BT=BT, BK=BK, BV=BV, BKS=min(BK, 64), BVS=min(BV, 64))


def dot_low(dtype: torch.dtype) -> bool:
    """Whether tl.dot operands are rounded to the input dtype (bf16 on CUDA only).

    bf16 keeps fp32's range, so P and the features cannot overflow there; fp16 operands could
    (|P| > 65504), so fp16 inputs use fp32 operands (tf32 on CUDA). The interpreter cannot do
    bf16 arithmetic, so it never casts.
    """
    return dtype == torch.bfloat16 and not _backend.INTERPRETING


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Return the `linattn_verify.recipe.PrecisionRecipe` keyword arguments for this kernel.

    The recipe describes the current mode: under the interpreter every tl.dot is exact-product
    fp32 with round-to-nearest division; on CUDA fp32 operands go through tf32, accumulation is
    tensor-core (MMA) and division is ``div.full.f32``; bf16 inputs on CUDA round φ(q), φ(k) and
    P (and in the backward dP, P/Z, dN) to bf16, at most three such roundings per term.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16).

    Raises:
        ValueError: if ``dtype`` is not an input dtype.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype among float32, float16, bfloat16 but got dtype={dtype}.")
    interpreting = _backend.INTERPRETING
    low = dot_low(dtype)
    return {
        "form": "parallel",
        "accumulation": "ieee" if interpreting else "mma",
        "dot_precision": "ieee" if interpreting or low else "tf32",
        "dots_on_path": 2,
        "intermediate_dtype": "input" if low else None,
        "casts_on_path": 3 if low else 0,
        "decay_scan": "global",
        "division": "rn" if interpreting else "full",
        "naive_elu1": False,
        "eps_dtype": "float32",
    }


def tile_table(cu_seqlens: torch.Tensor, BT: int) -> torch.Tensor:
    """Return the (sequence, block) pairs ``[num_tiles * 2]`` (int64) of every non-empty block."""
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    counts = (lengths + BT - 1) // BT
    seq = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    block = torch.arange(seq.numel(), device=counts.device) - first
    return torch.stack([seq, block], dim=1).reshape(-1).contiguous()


class Forward(NamedTuple):
    """What `parallel_fwd` returns; ``o_acc`` is the fp32 output backward reads δ from."""

    o: torch.Tensor | None  # [B, T, H, V] input dtype (None when rebuilt for backward)
    o_acc: torch.Tensor | None  # [B, T, H, V] fp32 (normalized only)
    Z: torch.Tensor | None  # [B*T, H] fp32 denominators incl. eps (normalized only)
    G: torch.Tensor | None  # [B*T, H] fp32 cumulative decay
    ht: torch.Tensor | None  # [N, H, K, V] fp32
    zt: torch.Tensor | None  # [N, H, K] fp32
    cu_seqlens: torch.Tensor  # [N+1] int64
    tiles: torch.Tensor  # [num_tiles * 2] int64


def sequence_bounds(x: Inputs) -> torch.Tensor:
    """Return ``cu_seqlens``, or the implicit one ``[0, T, 2T, ..., BT]`` for B dense rows."""
    if x.cu_seqlens is not None:
        return x.cu_seqlens
    return torch.arange(x.B + 1, device=x.q.device, dtype=torch.int64) * x.T


def parallel_fwd(x: Inputs) -> Forward:
    """Run the forward kernels: decay cumsum, output, and the final state when asked.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).

    Returns:
        The output in the input dtype plus what the backward pass needs.
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    cu = sequence_bounds(x)
    tiles = tile_table(cu, bl.BT)
    device, dtype = x.q.device, x.q.dtype
    common = {
        "H": H, "K": K, "V": V, "BT": bl.BT, "FEATURE": x.feature, "NORMALIZE": x.normalize,
        "USE_G": x.g is not None, "DOT_LOW": dot_low(dtype),
    }  # fmt: skip
    G = None
    if x.g is not None:
        G = torch.empty(B * T, H, dtype=torch.float32, device=device)
        parallel_fwd_kernel_cumsum[(N, H)](g=x.g, G=G, cu_seqlens=cu, H=H, BT=64)
    if x.normalize:
        o_acc = torch.empty(B, T, H, V, dtype=torch.float32, device=device)
        Z = torch.empty(B * T, H, dtype=torch.float32, device=device)
    else:
        o_acc, Z = empty_output((B, T, H, V), dtype, device), None
    parallel_fwd_kernel[(tiles.numel() // 2, H)](
        q=x.q, k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, o=o_acc, Z=Z, tiles=tiles, cu_seqlens=cu,
        scale=x.scale, eps=x.eps, BK=bl.BK, BV=bl.BV, USE_H0=x.h0 is not None, **common,
    )  # fmt: skip
    o = finish_output(o_acc, dtype)
    ht = zt = None
    if x.output_final_state:
        ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
        zt = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
        grid = (triton.cdiv(K, bl.BKS) * triton.cdiv(V, bl.BVS), N, H)
        parallel_fwd_kernel_state[grid](
            k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, ht=ht, zt=zt, cu_seqlens=cu, BK=bl.BKS, BV=bl.BVS,
            USE_H0=x.h0 is not None, **common,
        )  # fmt: skip
    return Forward(
        o=o, o_acc=o_acc if x.normalize else None, Z=Z, G=G, ht=ht, zt=zt, cu_seqlens=cu,
        tiles=tiles,
    )  # fmt: skip


def parallel_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the backward kernels.

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `parallel_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``.
        dht: Cotangent of S_T ``[N, H, K, V]`` or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]`` or `None` (zero); normalized only.

    Returns:
        ``(dq, dk, dv, dg, dh0, dz0)``: dq, dk, dv in the input dtype; dg ``[B, T, H]``, dh0
        ``[N, H, K, V]`` and dz0 ``[N, H, K]`` in fp32, or `None` where there is no such input.
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    device, dtype = x.q.device, x.q.dtype
    use_g, use_dht = x.g is not None, dht is not None or dzt is not None
    if use_dht:
        dht = torch.zeros(N, H, K, V, device=device) if dht is None else dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, device=device) if dzt is None else dzt.float().contiguous()
    do = do.contiguous()
    common = {
        "H": H, "K": K, "V": V, "BT": bl.BT, "FEATURE": x.feature, "NORMALIZE": x.normalize,
        "USE_G": use_g, "DOT_LOW": dot_low(dtype),
    }  # fmt: skip
    ntiles = fwd.tiles.numel() // 2
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dv = empty_output((B, T, H, V), dtype, device)
    dGq = torch.empty(B * T, H, dtype=torch.float32, device=device) if use_g else None
    dGk = torch.empty(B * T, H, dtype=torch.float32, device=device) if use_g else None
    delta = torch.empty(B * T, H, dtype=torch.float32, device=device) if x.normalize else None
    parallel_bwd_kernel_dq[(ntiles, H)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, h0=x.h0, z0=x.z0, o=fwd.o_acc, Z=fwd.Z, do=do, dq=dq, dGq=dGq,
        delta=delta, tiles=fwd.tiles, cu_seqlens=fwd.cu_seqlens, scale=x.scale, BK=bl.BK, BV=bl.BV,
        USE_H0=x.h0 is not None, **common,
    )  # fmt: skip
    parallel_bwd_kernel_dkv[(ntiles, H)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, Z=fwd.Z, delta=delta, do=do, dht=dht, dzt=dzt, dk=dk, dv=dv,
        dGk=dGk, tiles=fwd.tiles, cu_seqlens=fwd.cu_seqlens, scale=x.scale, BK=bl.BK, BV=bl.BV,
        USE_DHT=use_dht, **common,
    )  # fmt: skip
    dg = None
    if use_g:
        dGend = None
        if dht is not None and fwd.ht is not None:
            # ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩: S_T scales as exp(G_T), so this enters dL/dG_T.
            dGend = (dht * fwd.ht).sum((-2, -1))
            if dzt is not None and fwd.zt is not None:
                dGend = dGend + (dzt * fwd.zt).sum(-1)
            dGend = dGend.contiguous()
        dg = torch.empty(B, T, H, dtype=torch.float32, device=device)
        parallel_bwd_kernel_dg[(N, H)](
            dGq=dGq, dGk=dGk, dGend=dGend, dg=dg, cu_seqlens=fwd.cu_seqlens, H=H, BT=64,
            USE_DHT=use_dht,
        )  # fmt: skip
    dh0 = dz0 = None
    if x.h0 is not None:
        dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
        dz0 = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
        grid = (triton.cdiv(K, bl.BKS) * triton.cdiv(V, bl.BVS), N, H)
        parallel_bwd_kernel_dh0[grid](
            q=x.q, G=fwd.G, Z=fwd.Z, delta=delta, do=do, dht=dht, dzt=dzt, dh0=dh0, dz0=dz0,
            cu_seqlens=fwd.cu_seqlens, scale=x.scale, BK=bl.BKS, BV=bl.BVS, USE_DHT=use_dht,
            **common,
        )  # fmt: skip
    return (
        finish_output(dq, dtype),
        finish_output(dk, dtype),
        finish_output(dv, dtype),
        dg,
        dh0,
        dz0,
    )


class ParallelLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `parallel_fwd`, keeps what `parallel_bwd` needs."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Inputs,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        h0: torch.Tensor | None,
        z0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Tensors are passed beside ``x`` (which holds the same ones) so autograd tracks them."""
        fwd = parallel_fwd(x)
        ctx.x = x
        # Outputs go through save_for_backward (not ctx attributes) to avoid reference cycles.
        ctx.save_for_backward(fwd.o_acc, fwd.Z, fwd.G, fwd.ht, fwd.zt, fwd.cu_seqlens, fwd.tiles)
        ctx.set_materialize_grads(False)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for ``x`` and absent inputs)."""
        x = ctx.x
        o_acc, Z, G, ht, zt, cu, tiles = ctx.saved_tensors
        if do is None:
            do = torch.zeros(x.B, x.T, x.H, x.V, dtype=x.q.dtype, device=x.q.device)
        fwd = Forward(o=None, o_acc=o_acc, Z=Z, G=G, ht=ht, zt=zt, cu_seqlens=cu, tiles=tiles)
        dq, dk, dv, dg, dh0, dz0 = parallel_bwd(x, fwd, do, dht, dzt)
        return None, dq, dk, dv, dg, dh0, dz0


def parallel_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    normalize: bool = False,
    eps: float = 0.0,
    feature_map: str = "identity",
    initial_state: State | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention in the parallel (tiled quadratic) form, differentiable.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay ``[B, T, H]`` (<= 0), or `None` for no decay. Default: `None`.
        scale: s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)·z_t + eps (a zero denominator gives 0). Default: `False`.
        eps: Denominator offset, added in fp32; normalized only. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel.
            Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Also return S_T (fp32), or ``(S_T, z_T)`` when normalized.
            Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1). Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``.

    Raises:
        ValueError: naming the argument that is malformed and what was expected.
    """
    x = prepare(
        q,
        k,
        v,
        g,
        scale=scale,
        normalize=normalize,
        eps=eps,
        feature_map=feature_map,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )
    o, ht, zt = ParallelLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0)
    if not x.output_final_state:
        return o, None
    return o, ((ht, zt) if x.normalize else ht)


__all__ = [
    "ParallelLinearAttentionFunction",
    "parallel_bwd",
    "parallel_fwd",
    "parallel_linear_attention",
    "precision_recipe",
]
