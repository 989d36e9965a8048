# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parallel form with a vector gate g ``[B, T, H, K]``: tiled kernels and host launchers.

Per sequence and head, o_t = s Σ_{j<=t} A_tj v_j + s (φ(q_t) ⊙ e^{G_t})^T S_0 with
A_tj = Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm) and G the whole-sequence cumulative sums of each
key dimension (one fp32 scan per dimension). A program owns BT = 16 queries and loops over key
blocks of 16 up to the diagonal; each score block is a ``[BT, BT, BK]`` broadcast product summed
over its last axis, over K tiles of at most 64, with every weight the exp of a masked difference
(exponent <= 0). Nothing is ever factored as (q ⊙ e^G)(k ⊙ e^-G)^T: e^-G overflows once
|G| > 88. The backward runs a dq pass (per query block and K tile), a dk pass (per key block and
K tile), a dv pass (per key block, the score summed over all K tiles), the dg reverse scan per
dimension and the dS_0 reduction of `parallel_h`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import Inputs, empty_output, finish_output, forward_outputs
from linattn_kernels.common.blocks import blocks, chunk_block, dot_low
from linattn_kernels.common.division import divide_or_zero, vanishes
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
from linattn_kernels.common.results import Forward, Gradients
from linattn_kernels.common.tables import chunk_bounds, chunk_table, sequence_bounds
from linattn_kernels.gla.parallel_h import gla_parallel_bwd_dh0, gla_parallel_fwd_h

BLOCK_T = 32 if _backend.INTERPRETING else 16
"""Query and key block of the vector-gate parallel kernels: ``[16, 16, 64]`` score products on a
GPU (registers); 32 under the interpreter, where each program costs Python overhead and the
larger block halved the time of a T = 24 call (measured 0.43 s -> 0.23 s forward + backward)."""


@triton.jit
def gla_parallel_fwd_kernel_cumsum(
    g, G, cu_seqlens, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr
):
    """G_tm = Σ_{s<=t} g_sm within each sequence, per dimension, in fp32 (grid: N, H, K-tiles)."""
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    o_b = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    b_carry = tl.zeros([BK], dtype=tl.float32)  # [BK]
    for i_t in range(tl.cdiv(L, BT)):
        o_t = i_t * BT + o_b
        m_t = o_t < L
        # [BT, BK]
        b_G = tl.cumsum(load_rows(g, bos + o_t, m_t, i_h, H, K, o_k, m_k), 0) + b_carry[None, :]
        store_rows(G, b_G, bos + o_t, m_t, i_h, H, K, o_k, m_k)
        # The last row exactly (not a re-sum of g) keeps the carried G equal to the stored one.
        b_carry = tl.sum(tl.where(o_b[:, None] == BT - 1, b_G, 0.0), 0)


@triton.jit
def gla_parallel_fwd_kernel(
    q, k, v, G, h0, z0, o, Z, chunk_indices, cu_seqlens, scale, eps,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """o (and the denominator Z) for one query block of one sequence-head (grid: blocks, H)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    rows = bos + o_t
    o_v = tl.arange(0, BV)
    m_v = o_v < V

    b_n = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    b_z = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]  # [BT, BT]
        b_a = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT]
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_Gq = load_rows(G, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
            # [BT, BT, BK]: w_tjm = exp(G_tm - G_jm), masked to -inf before the exp.
            b_w = tl.exp(
                tl.where(m_a[:, :, None], b_Gq[:, None, :] - b_Gk[None, :, :], float("-inf"))
            )
            b_a += tl.sum(b_q[:, None, :] * b_k[None, :, :] * b_w, axis=2)
        if NORMALIZE:
            b_z += tl.sum(b_a, 1)
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_n += tl.dot(operand(b_a, DOT_LOW, DT), operand(b_v, DOT_LOW, DT))
    if USE_H0:
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_Gq = load_rows(G, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            # exp(G_tm) <= 1: query t reads S_0 per dimension.
            b_q = b_q * tl.exp(tl.where(m_t[:, None], b_Gq, float("-inf")))
            b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
            b_n += tl.dot(operand(b_q, DOT_LOW, DT), operand(b_h0, DOT_LOW, DT))
            if NORMALIZE:
                b_z += tl.sum(b_q * load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)[None, :], 1)
    b_o = b_n * scale
    if NORMALIZE:
        b_den = b_z * scale + eps
        b_o = divide_or_zero(b_o, b_den[:, None])
        store_per_token(Z, b_den, rows, m_t, i_h, H)
    store_rows(o, b_o, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def gla_parallel_bwd_kernel_dq(
    q, k, v, G, h0, z0, Z, delta, do, dq, dGq, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq and q̃ ⊙ dq̃ (the query part of dL/dG) of one query block and K tile."""
    i_c = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    rows = bos + o_t
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    o_v = tl.arange(0, BV)
    m_v = o_v < V

    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_Gq = load_rows(G, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
    b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_dod = operand(b_do, DOT_LOW, DT)
    if NORMALIZE:
        b_den = load_per_token(Z, rows, m_t, i_h, H)
        b_delta = load_per_token(delta, rows, m_t, i_h, H)
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK]
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
        # [BT, BT]: dA_tj = do_t·v_j, or (do_t·v_j - δ_t) / Z_t when normalized
        b_dp = tl.dot(b_dod, tl.trans(operand(b_v, DOT_LOW, DT)))
        if NORMALIZE:
            b_dp = divide_or_zero(b_dp - b_delta[:, None], b_den[:, None])
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        b_dp = tl.where(m_a, b_dp, 0.0)
        # [BT, BT, BK]
        b_w = tl.exp(tl.where(m_a[:, :, None], b_Gq[:, None, :] - b_Gk[None, :, :], float("-inf")))
        b_dq += tl.sum(b_dp[:, :, None] * b_k[None, :, :] * b_w, axis=1)
    if USE_H0:
        b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        # [BT, BK]: S_0 dN_t + z_0 dZ_t with dN_t = do_t / Z_t and dZ_t = -δ_t / Z_t
        b_dqh = tl.dot(b_dod, tl.trans(operand(b_h0, DOT_LOW, DT)))
        if NORMALIZE:
            b_z0 = load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)
            b_dqh = divide_or_zero(b_dqh - b_delta[:, None] * b_z0[None, :], b_den[:, None])
        b_dq += b_dqh * tl.exp(tl.where(m_t[:, None], b_Gq, float("-inf")))
    b_dq = b_dq * scale
    store_rows(dGq, b_q * b_dq, rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def gla_parallel_bwd_kernel_dk(
    q, k, v, G, Z, delta, do, dht, dzt, dk, dGk, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_DHT: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dk and k̃ ⊙ dk̃ (the key part of dL/dG) of one key block and K tile (later queries)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_s, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_s = i_s * BT + tl.arange(0, BT)
    m_s = o_s < L
    rows = bos + o_s
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    o_v = tl.arange(0, BV)
    m_v = o_v < V

    b_k, b_kx = load_features(k, rows, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_Gk = load_rows(G, rows, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
    b_v = load_rows(v, rows, m_s, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_vd = operand(b_v, DOT_LOW, DT)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK]
    for i_t in range(i_s, tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        b_q, _ = load_features(q, bos + o_t, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_Gq = load_rows(G, bos + o_t, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
        b_dod = operand(load_rows(do, bos + o_t, m_t, i_h, H, V, o_v, m_v), DOT_LOW, DT)
        # [BT(keys), BT(queries)]: the transposed gradient block
        b_dpt = tl.dot(b_vd, tl.trans(b_dod))
        m_a = (o_t[None, :] >= o_s[:, None]) & m_t[None, :]
        if NORMALIZE:
            b_den = load_per_token(Z, bos + o_t, m_t, i_h, H)
            b_delta = load_per_token(delta, bos + o_t, m_t, i_h, H)
            m_a = m_a & (~vanishes(b_den))[None, :]
            b_dpt = (b_dpt - b_delta[None, :]) / tl.where(vanishes(b_den), 1.0, b_den)[None, :]
        b_dpt = tl.where(m_a, b_dpt, 0.0)
        # [BT(keys), BT(queries), BK]: w_tjm at [j, t, m]
        b_w = tl.exp(tl.where(m_a[:, :, None], b_Gq[None, :, :] - b_Gk[:, None, :], float("-inf")))
        b_dk += tl.sum(b_dpt[:, :, None] * b_q[None, :, :] * b_w, axis=1)
    b_dk = b_dk * scale
    if USE_DHT:
        # S_T = Σ_j diag(e^{G_T - G_j}) φ(k_j) v_j^T + ... sends dS_T back to every key.
        b_dht = load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_dkf = tl.dot(b_vd, tl.trans(operand(b_dht, DOT_LOW, DT)))  # [BT, BK]
        if NORMALIZE:
            b_dkf = b_dkf + load_key_sum(dzt, i_n * H + i_h, K, o_k, m_k)[None, :]
        b_Gend = tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_k, other=0.0)  # [BK]
        b_dk += b_dkf * tl.exp(tl.where(m_s[:, None], b_Gend[None, :] - b_Gk, float("-inf")))
    store_rows(dGk, b_k * b_dk, rows, m_s, i_h, H, K, o_k, m_k)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_s, i_h, H, K, o_k, m_k)


@triton.jit
def gla_parallel_bwd_kernel_dv(
    q, k, G, Z, do, dht, dv, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_DHT: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dv of one key block: s Σ_t A_tj / Z_t do_t + Σ_m e^{G_T,m - G_j,m} k̃_jm dS_T[m, :]."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_s, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_s = i_s * BT + tl.arange(0, BT)
    m_s = o_s < L
    rows = bos + o_s
    o_v = tl.arange(0, BV)
    m_v = o_v < V

    b_dv = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    for i_t in range(i_s, tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        m_a = (o_t[None, :] >= o_s[:, None]) & m_t[None, :]  # [BT(keys), BT(queries)]
        b_at = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT], A^T
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            b_k, _ = load_features(k, rows, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_q, _ = load_features(q, bos + o_t, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_Gk = load_rows(G, rows, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_Gq = load_rows(G, bos + o_t, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_w = tl.exp(
                tl.where(m_a[:, :, None], b_Gq[None, :, :] - b_Gk[:, None, :], float("-inf"))
            )
            b_at += tl.sum(b_k[:, None, :] * b_q[None, :, :] * b_w, axis=2)
        if NORMALIZE:
            b_den = load_per_token(Z, bos + o_t, m_t, i_h, H)
            b_zero = vanishes(b_den)[None, :]
            b_at = tl.where(b_zero, 0.0, b_at / tl.where(b_zero, 1.0, b_den[None, :]))
        b_dod = operand(load_rows(do, bos + o_t, m_t, i_h, H, V, o_v, m_v), DOT_LOW, DT)
        b_dv += tl.dot(operand(b_at, DOT_LOW, DT), b_dod)
    b_dv = b_dv * scale
    if USE_DHT:
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            b_k, _ = load_features(k, rows, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
            b_Gk = load_rows(G, rows, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_Gend = tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_k = b_k * tl.exp(tl.where(m_s[:, None], b_Gend[None, :] - b_Gk, float("-inf")))
            b_dht = load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
            b_dv += tl.dot(operand(b_k, DOT_LOW, DT), operand(b_dht, DOT_LOW, DT))
    store_rows(dv, b_dv, rows, m_s, i_h, H, V, o_v, m_v)


@triton.jit
def gla_parallel_bwd_kernel_dg(
    dGq, dGk, dGend, dg, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, USE_DHT: tl.constexpr,
):  # fmt: skip
    """dg_sm = Σ_{t>=s} (q̃ ⊙ dq̃ - k̃ ⊙ dk̃)_tm + the final-state term (grid: N, H, K-tiles)."""
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    o_b = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    b_carry = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_DHT:
        b_carry += load_key_sum(dGend, i_n * H + i_h, K, o_k, m_k)
    NT = tl.cdiv(L, BT)
    for i in range(NT):
        o_t = (NT - 1 - i) * BT + o_b
        m_t = o_t < L
        # [BT, BK]
        b_d = load_rows(dGq, bos + o_t, m_t, i_h, H, K, o_k, m_k)
        b_d = b_d - load_rows(dGk, bos + o_t, m_t, i_h, H, K, o_k, m_k)
        # A reverse scan per dimension, not total - prefix.
        b_dg = tl.cumsum(b_d, 0, reverse=True) + b_carry[None, :]
        store_rows(dg, b_dg, bos + o_t, m_t, i_h, H, K, o_k, m_k)
        b_carry = tl.sum(tl.where(o_b[:, None] == 0, b_dg, 0.0), 0)


def _tiles(K: int) -> int:
    """The K tile of the vector-gate score products: K's chunk tile (a power of two in [16, 64])."""
    return chunk_block(K)


def gla_parallel_fwd(x: Inputs) -> Forward:
    """Run the vector-gate forward: per-dimension cumsum, output, final state when asked.

    Args:
        x: Prepared inputs with g ``[B, T, H, K]``.

    Returns:
        The `Forward`, as `linattn_kernels.linear_attn.parallel.parallel_fwd`'s (G is
        ``[B, T, H, K]``).
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    BK = _tiles(K)
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, BLOCK_T, device)
    low = dot_low(dtype)
    G = torch.empty(B, T, H, K, dtype=torch.float32, device=device)
    gla_parallel_fwd_kernel_cumsum[(N, H, triton.cdiv(K, BK))](
        g=x.g, G=G, cu_seqlens=table.cu_seqlens, H=H, K=K, BT=64, BK=BK
    )  # fmt: skip
    o_acc, Z = forward_outputs(x, unrounded=x.normalize)
    gla_parallel_fwd_kernel[(table.num_chunks, H)](
        q=x.q, k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, o=o_acc, Z=Z,
        chunk_indices=table.chunk_indices, cu_seqlens=table.cu_seqlens, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=BLOCK_T, BK=BK, BV=bl.BV, FEATURE=x.feature, NORMALIZE=x.normalize,
        USE_H0=x.h0 is not None, DOT_LOW=low,
    )  # fmt: skip
    ht = zt = None
    if x.output_final_state:
        ht, zt = gla_parallel_fwd_h(x, G=G, table=table, dot_low=low)
    return Forward(
        o=finish_output(o_acc, dtype), ht=ht, zt=zt, o_acc=o_acc if x.normalize else None, den=Z,
        G=G, table=table,
    )  # fmt: skip


def gla_parallel_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the vector-gate backward: dq, dk, dv, then dg and dS_0 (dz_0).

    Args:
        x: The prepared inputs of the forward pass (4-D g).
        fwd: What `gla_parallel_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Cotangent of S_T ``[N, H, K, V]``, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g ``[B, T, H, K]``, S_0 and z_0 (fp32).
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    assert fwd.table is not None
    assert fwd.G is not None
    bl = blocks(K, V)
    BK = _tiles(K)
    NK = triton.cdiv(K, BK)
    device, dtype = x.q.device, x.q.dtype
    use_dht, low = dht is not None or dzt is not None, dot_low(dtype)
    f32 = torch.float32
    if use_dht:
        dht = torch.zeros(N, H, K, V, device=device) if dht is None else dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, device=device) if dzt is None else dzt.float().contiguous()
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    delta = None
    if x.normalize:
        assert fwd.o_acc is not None
        # δ_t = do_t·o_t from the unrounded fp32 output.
        delta = (do.float() * fwd.o_acc).sum(-1).contiguous()
    common = {
        "chunk_indices": fwd.table.chunk_indices, "cu_seqlens": fwd.table.cu_seqlens,
        "scale": x.scale, "H": H, "K": K, "V": V, "BT": BLOCK_T, "BK": BK, "BV": bl.BV,
        "FEATURE": x.feature, "NORMALIZE": x.normalize, "DOT_LOW": low,
    }  # fmt: skip
    NB = fwd.table.num_chunks
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dv = empty_output((B, T, H, V), dtype, device)
    dGq = torch.empty(B, T, H, K, dtype=f32, device=device)
    dGk = torch.empty(B, T, H, K, dtype=f32, device=device)
    gla_parallel_bwd_kernel_dq[(NB, NK, H)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, h0=x.h0, z0=x.z0, Z=fwd.den, delta=delta, do=do, dq=dq,
        dGq=dGq, USE_H0=x.h0 is not None, **common,
    )  # fmt: skip
    gla_parallel_bwd_kernel_dk[(NB, NK, H)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, Z=fwd.den, delta=delta, do=do, dht=dht, dzt=dzt, dk=dk,
        dGk=dGk, USE_DHT=use_dht, **common,
    )  # fmt: skip
    gla_parallel_bwd_kernel_dv[(NB, H)](
        q=x.q, k=x.k, G=fwd.G, Z=fwd.den, do=do, dht=dht, dv=dv, USE_DHT=use_dht, **common,
    )  # fmt: skip
    dGend = None
    if dht is not None and fwd.ht is not None:
        # Row m of S_T scales as exp(G_T,m): Σ_i S_T[m, i] dS_T[m, i] (+ z_T,m dz_T,m).
        dGend = (dht * fwd.ht).sum(-1)
        if dzt is not None and fwd.zt is not None:
            dGend = dGend + dzt * fwd.zt
        dGend = dGend.contiguous()
    dg = torch.empty(B, T, H, K, dtype=f32, device=device)
    gla_parallel_bwd_kernel_dg[(N, H, NK)](
        dGq=dGq, dGk=dGk, dGend=dGend, dg=dg, cu_seqlens=fwd.table.cu_seqlens, H=H, K=K, BT=64,
        BK=BK, USE_DHT=dGend is not None,
    )  # fmt: skip
    dh0 = dz0 = None
    if x.h0 is not None:
        dh0, dz0 = gla_parallel_bwd_dh0(x, fwd, do=do, delta=delta, dht=dht, dzt=dzt, dot_low=low)
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=dh0, dz0=dz0,
    )  # fmt: skip


__all__ = ["BLOCK_T", "gla_parallel_bwd", "gla_parallel_fwd"]
