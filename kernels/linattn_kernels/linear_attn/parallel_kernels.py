# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel form's per-block kernels: o, and dq, dk/dv (and a vector gate's dv) per block.

One program owns a block of BT queries (or keys, in the dk/dv pass) of one sequence-head and
loops over the key (query) blocks on its side of the diagonal, so the T x T matrix never exists.
`parallel` holds the host launchers; the scans and the state reductions are in `parallel_h`.

Three constexprs select the path, and only the selected branches compile:

- ``GATE``: 0 no decay; 1 a scalar g ``[B, T, H]``, whose score block is the ``tl.dot``
  φ(Q)φ(K)^T weighted by exp(G_t - G_j); 2 a vector g ``[B, T, H, K]``, whose score
  A_tj = Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm) is a ``[BT, BT, BK]`` broadcast product summed
  over its last axis, over K tiles of BK (<= 64), every weight the exp of a masked difference
  (exponent <= 0). Nothing is ever factored as (q ⊙ e^G)(k ⊙ e^-G)^T: e^-G overflows once
  |G| > 88. With a vector gate the dq and dk programs own one K tile each (grid axis 2), so dv,
  which needs the score over every tile, is `parallel_bwd_kernel_dv`, a pass of its own.
- ``SCORE``: 0, or a fused score map κ (taylor2, rebased; README, "Score maps"), which takes a
  scalar gate or none.
- ``FEATURE``: the elementwise map φ applied on load (identity under a score map).
"""

from __future__ import annotations

import triton
import triton.language as tl

from linattn_kernels.common.decay import masked_decay
from linattn_kernels.common.division import divide_or_zero, vanishes
from linattn_kernels.common.feature_maps import feature_map_grad, score_map, score_map_grad
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
from linattn_kernels.common.tables import chunk_bounds


@triton.jit
def parallel_fwd_kernel(
    q, k, v, G, h0, z0, o, Z, chunk_indices, cu_seqlens, scale, eps,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, GATE: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
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

    if GATE != 2:
        # One K tile holds the whole head dim: φ(q) is loaded once. [BT, BK]
        o_k = tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)
        b_qd = operand(b_q, DOT_LOW, DT)
        if GATE == 1:
            b_Gq = load_per_token(G, rows, m_t, i_h, H)
    # [BT, BV], [BT]
    b_n = tl.zeros([BT, BV], dtype=tl.float32)
    b_z = tl.zeros([BT], dtype=tl.float32)
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        if GATE == 2:
            # [BT, BT], summed over the K tiles
            b_a = tl.zeros([BT, BT], dtype=tl.float32)
            for i_k in range(tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
                b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)
                b_Gq = load_rows(G, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
                b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
                # [BT, BT, BK]: w_tjm = exp(G_tm - G_jm), masked to -inf before the exp.
                b_w = tl.exp(
                    tl.where(m_a[:, :, None], b_Gq[:, None, :] - b_Gk[None, :, :], float("-inf"))
                )
                b_a += tl.sum(b_q[:, None, :] * b_k[None, :, :] * b_w, axis=2)
        else:
            b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)
            # [BT, BT]
            b_a = tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT)))
            if SCORE > 0:
                # κ(0) = 1 for taylor2, so the mask must come after κ (README, "Score maps").
                b_a = score_map(b_a * scale, SCORE)
            if GATE == 1:
                b_Gk = load_per_token(G, bos + o_s, m_s, i_h, H)
                b_a = tl.where(m_a, b_a * masked_decay(b_Gq[:, None], b_Gk[None, :], m_a), 0.0)
            else:
                b_a = tl.where(m_a, b_a, 0.0)
        if NORMALIZE:
            b_z += tl.sum(b_a, 1)
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)
        b_n += tl.dot(operand(b_a, DOT_LOW, DT), operand(b_v, DOT_LOW, DT))
    if USE_H0:
        # [BT, BV]: exp(G_t) φ(q_t)^T S_0, and [BT]: exp(G_t) φ(q_t)·z_0 (scaled with the rest)
        if GATE == 2:
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
        else:
            b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
            b_hn = tl.dot(b_qd, operand(b_h0, DOT_LOW, DT))
            if NORMALIZE:
                b_hz = tl.sum(b_q * load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)[None, :], 1)
            if GATE == 1:
                b_e = tl.exp(b_Gq)
                b_hn = b_hn * b_e[:, None]
                if NORMALIZE:
                    b_hz = b_hz * b_e
            b_n += b_hn
            if NORMALIZE:
                b_z += b_hz
    # A score map has the scale inside κ(s q·k) already: o and Z take no outer scale.
    b_o = b_n if SCORE > 0 else b_n * scale
    if NORMALIZE:
        # eps is added in fp32, after any scale: Z = s φ(q)·z + eps exactly as the semantics say.
        b_den = b_z + eps if SCORE > 0 else b_z * scale + eps
        b_o = divide_or_zero(b_o, b_den[:, None])
        store_per_token(Z, b_den, rows, m_t, i_h, H)
    store_rows(o, b_o, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def parallel_bwd_kernel_dq(
    q, k, v, G, h0, z0, o, Z, do, dq, dGq, delta, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, GATE: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, the query part of dL/dG (q̃·dq̃, or Σ_j κ_tj dκ_tj) and δ_t = do_t·o_t per query block.

    Grid: blocks, H, K tiles (one K tile but for a vector gate, whose dL/dG part is q̃ ⊙ dq̃ and
    whose δ the host computes: this pass only reads it).
    """
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    rows = bos + o_t
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)
    b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)
    b_dod = operand(b_do, DOT_LOW, DT)
    if NORMALIZE:
        b_den = load_per_token(Z, rows, m_t, i_h, H)
        if GATE == 2:
            b_delta = load_per_token(delta, rows, m_t, i_h, H)
        else:
            b_delta = tl.sum(b_do * load_rows(o, rows, m_t, i_h, H, V, o_v, m_v), 1)
            store_per_token(delta, b_delta, rows, m_t, i_h, H)
    if GATE == 1:
        b_Gq = load_per_token(G, rows, m_t, i_h, H)
    elif GATE == 2:
        b_Gq = load_rows(G, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    if SCORE > 0:
        # κ is not homogeneous: dL/dG needs Σ_j κ_tj dκ_tj itself, not q̃·dq̃.
        b_qd = operand(b_q, DOT_LOW, DT)
        # [BT]
        b_dGs = tl.zeros([BT], dtype=tl.float32)
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)
        # [BT, BT]: dA_tj = do_t·v_j, or (do_t·v_j - δ_t) / Z_t when normalized
        b_dp = tl.dot(b_dod, tl.trans(operand(b_v, DOT_LOW, DT)))
        if NORMALIZE:
            b_dp = divide_or_zero(b_dp - b_delta[:, None], b_den[:, None])
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        if GATE == 1:
            b_Gk = load_per_token(G, bos + o_s, m_s, i_h, H)
            b_dp = tl.where(m_a, b_dp * masked_decay(b_Gq[:, None], b_Gk[None, :], m_a), 0.0)
        else:
            b_dp = tl.where(m_a, b_dp, 0.0)
        if SCORE > 0:
            # x_tj = s q_t·k_j recomputed (the forward kept no T x T tile); dκ_tj is b_dp.
            b_x = tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT))) * scale
            if GATE == 1:
                b_dGs += tl.sum(score_map(b_x, SCORE) * b_dp, 1)
            b_dp = b_dp * score_map_grad(b_x, SCORE)
        if GATE == 2:
            b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
            # [BT, BT, BK]
            b_w = tl.exp(
                tl.where(m_a[:, :, None], b_Gq[:, None, :] - b_Gk[None, :, :], float("-inf"))
            )
            b_dq += tl.sum(b_dp[:, :, None] * b_k[None, :, :] * b_w, axis=1)
        else:
            b_dq += tl.dot(operand(b_dp, DOT_LOW, DT), operand(b_k, DOT_LOW, DT))
    if USE_H0:
        b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
        # [BT, BK]: S_0 dN_t + z_0 dZ_t with dN_t = do_t / Z_t and dZ_t = -δ_t / Z_t
        b_dqh = tl.dot(b_dod, tl.trans(operand(b_h0, DOT_LOW, DT)))
        if NORMALIZE:
            b_z0 = load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)
            b_dqh = divide_or_zero(b_dqh - b_delta[:, None] * b_z0[None, :], b_den[:, None])
        if GATE == 1:
            b_dqh = b_dqh * tl.exp(b_Gq)[:, None]
        elif GATE == 2:
            b_dqh = b_dqh * tl.exp(tl.where(m_t[:, None], b_Gq, float("-inf")))
        b_dq += b_dqh
    b_dq = b_dq * scale
    if GATE == 1:
        if SCORE > 0:
            store_per_token(dGq, b_dGs, rows, m_t, i_h, H)
        else:
            store_per_token(dGq, tl.sum(b_q * b_dq, 1), rows, m_t, i_h, H)
    elif GATE == 2:
        store_rows(dGq, b_q * b_dq, rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def parallel_bwd_kernel_dkv(
    q, k, v, G, Z, delta, do, dht, dzt, dk, dv, dGk, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, GATE: tl.constexpr,
    USE_DHT: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dk, dv and the key part of dL/dG (k̃·dk̃, or Σ_t κ_tj dκ_tj) for one key block.

    Grid: blocks, H, K tiles. A vector gate's programs own one K tile each and give dk and
    k̃ ⊙ dk̃ only; its dv is `parallel_bwd_kernel_dv`.
    """
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_s, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_s = i_s * BT + tl.arange(0, BT)
    m_s = o_s < L
    rows = bos + o_s
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_k, b_kx = load_features(k, rows, m_s, i_h, H, K, o_k, m_k, FEATURE)
    b_v = load_rows(v, rows, m_s, i_h, H, V, o_v, m_v)
    b_kd = operand(b_k, DOT_LOW, DT)
    b_vd = operand(b_v, DOT_LOW, DT)
    if GATE == 1:
        b_Gk = load_per_token(G, rows, m_s, i_h, H)
    elif GATE == 2:
        b_Gk = load_rows(G, rows, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)
    if SCORE > 0:
        # [BT]
        b_dGs = tl.zeros([BT], dtype=tl.float32)
    for i_t in range(i_s, tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        b_q, _ = load_features(q, bos + o_t, m_t, i_h, H, K, o_k, m_k, FEATURE)
        b_dod = operand(load_rows(do, bos + o_t, m_t, i_h, H, V, o_v, m_v), DOT_LOW, DT)
        # [BT(keys), BT(queries)]: the transposed score and gradient blocks
        if GATE != 2:
            b_at = tl.dot(b_kd, tl.trans(operand(b_q, DOT_LOW, DT)))
        b_dpt = tl.dot(b_vd, tl.trans(b_dod))
        if SCORE > 0:
            b_xt = b_at * scale
            b_kap = score_map(b_xt, SCORE)
            b_at = b_kap
        m_a = (o_t[None, :] >= o_s[:, None]) & m_t[None, :]
        if NORMALIZE:
            b_den = load_per_token(Z, bos + o_t, m_t, i_h, H)
            b_delta = load_per_token(delta, bos + o_t, m_t, i_h, H)
            b_safe = tl.where(vanishes(b_den), 1.0, b_den)
            m_a = m_a & (~vanishes(b_den))[None, :]
            # dv takes P_tj / Z_t; dk takes dA_tj = (do_t·v_j - δ_t) / Z_t, as the dq pass does.
            if GATE != 2:
                b_at = b_at / b_safe[None, :]
            b_dpt = (b_dpt - b_delta[None, :]) / b_safe[None, :]
        if GATE == 1:
            b_Gq = load_per_token(G, bos + o_t, m_t, i_h, H)
            b_w = masked_decay(b_Gq[None, :], b_Gk[:, None], m_a)
            b_at = b_at * b_w
            b_dpt = b_dpt * b_w
        if GATE != 2:
            b_at = tl.where(m_a, b_at, 0.0)
        b_dpt = tl.where(m_a, b_dpt, 0.0)
        if SCORE > 0:
            # b_dpt is dκ (zero outside the mask); b_kap the unweighted, unnormalized κ.
            if GATE == 1:
                b_dGs += tl.sum(b_kap * b_dpt, 1)
            b_dpt = b_dpt * score_map_grad(b_xt, SCORE)
        if GATE == 2:
            b_Gq = load_rows(G, bos + o_t, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            # [BT(keys), BT(queries), BK]: w_tjm at [j, t, m]
            b_w = tl.exp(
                tl.where(m_a[:, :, None], b_Gq[None, :, :] - b_Gk[:, None, :], float("-inf"))
            )
            b_dk += tl.sum(b_dpt[:, :, None] * b_q[None, :, :] * b_w, axis=1)
        else:
            b_dv += tl.dot(operand(b_at, DOT_LOW, DT), b_dod)
            b_dk += tl.dot(operand(b_dpt, DOT_LOW, DT), operand(b_q, DOT_LOW, DT))
    b_dk = b_dk * scale
    # A score map's dv has no outer scale: dv_j = Σ_t κ_tj w_tj / Z_t do_t.
    if SCORE == 0:
        b_dv = b_dv * scale
    if USE_DHT:
        # The final state S_T = Σ_j exp(G_T - G_j) φ(k_j) v_j^T + ... sends dS_T back to every key.
        # [BK, BV]
        b_dhtd = operand(load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v), DOT_LOW, DT)
        b_dkf = tl.dot(b_vd, tl.trans(b_dhtd))
        if NORMALIZE:
            b_dkf = b_dkf + load_key_sum(dzt, i_n * H + i_h, K, o_k, m_k)[None, :]
        if GATE == 2:
            # [BK]: G_T per dimension, so key j's weight is exp(G_T,m - G_j,m) per row m.
            b_Gend = tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_k, other=0.0)
            b_dk += b_dkf * tl.exp(tl.where(m_s[:, None], b_Gend[None, :] - b_Gk, float("-inf")))
        else:
            b_dvf = tl.dot(b_kd, b_dhtd)
            if GATE == 1:
                b_we = masked_decay(tl.load(G + (bos + L - 1) * H + i_h), b_Gk, m_s)
                b_dkf = b_dkf * b_we[:, None]
                b_dvf = b_dvf * b_we[:, None]
            b_dk += b_dkf
            b_dv += b_dvf
    if GATE == 1:
        if SCORE > 0:
            store_per_token(dGk, b_dGs, rows, m_s, i_h, H)
        else:
            store_per_token(dGk, tl.sum(b_k * b_dk, 1), rows, m_s, i_h, H)
    elif GATE == 2:
        store_rows(dGk, b_k * b_dk, rows, m_s, i_h, H, K, o_k, m_k)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_s, i_h, H, K, o_k, m_k)
    if GATE != 2:
        store_rows(dv, b_dv, rows, m_s, i_h, H, V, o_v, m_v)


@triton.jit
def parallel_bwd_kernel_dv(
    q, k, G, Z, do, dht, dv, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_DHT: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """A vector gate's dv of one key block (grid: blocks, H).

    dv_j = s Σ_t A_tj / Z_t do_t + Σ_m e^{G_T,m - G_j,m} k̃_jm dS_T[m, :], the score A summed
    over all K tiles here (the dk/dv pass owns one tile per program).
    """
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


__all__ = [
    "parallel_bwd_kernel_dkv",
    "parallel_bwd_kernel_dq",
    "parallel_bwd_kernel_dv",
    "parallel_fwd_kernel",
]
