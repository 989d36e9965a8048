# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parallel (tiled, flash-style) form of causal linear attention, forward and backward.

Per sequence and head, o = s (φ(Q)φ(K)^T ⊙ M ⊙ W) V + s exp(G) ⊙ φ(Q) S_0, with
W_tj = exp(G_t - G_j) from whole-sequence cumulative sums G of g, masked before the exp. One
program owns a block of BT queries and loops over key blocks up to the diagonal, so the T x T
matrix never exists. Normalized outputs divide by s Σ_j P_tj + s exp(G_t) φ(q_t)·z_0 + eps; a
row whose denominator is exactly zero returns 0 (and passes no gradient).

Every sequence, packed (``cu_seqlens``) or not, is addressed through a host-built table of
(sequence, query block) pairs, so no block ever mixes tokens of two sequences. The final state
S_T and the gradient of S_0 are tiled reductions of their own, in `parallel_h`. The derivation,
the rounding structure and the design notes live in this package's README.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import (
    INPUT_DTYPES,
    Inputs,
    empty_output,
    finish_output,
    forward_outputs,
    prepare,
)
from linattn_kernels.common.blocks import blocks, dot_low
from linattn_kernels.common.decay import masked_decay
from linattn_kernels.common.division import divide_or_zero, vanishes
from linattn_kernels.common.feature_maps import (
    SCORE_CODES,
    feature_map_grad,
    score_map,
    score_map_grad,
)
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
from linattn_kernels.common.results import (
    Forward,
    Gradients,
    State,
    final_state,
    save_for_backward,
    saved_for_backward,
)
from linattn_kernels.common.tables import chunk_bounds, chunk_table
from linattn_kernels.gla.parallel import gla_parallel_bwd, gla_parallel_fwd
from linattn_kernels.lifted import (
    LIFTED_MAPS,
    check_lifted_gate,
    lifted_attention,
    refuse_weights,
)
from linattn_kernels.linear_attn.parallel_h import (
    parallel_bwd_dh0,
    parallel_bwd_kernel_dg,
    parallel_fwd_h,
    parallel_fwd_kernel_cumsum,
)


@triton.jit
def parallel_fwd_kernel(
    q, k, v, G, h0, z0, o, Z, chunk_indices, cu_seqlens, scale, eps,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
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
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK]
    b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)
    b_qd = operand(b_q, DOT_LOW, DT)
    if USE_G:
        b_Gq = load_per_token(G, rows, m_t, i_h, H)
    # [BT, BV], [BT]
    b_n = tl.zeros([BT, BV], dtype=tl.float32)
    b_z = tl.zeros([BT], dtype=tl.float32)
    for i_s in range(i_t + 1):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)
        # [BT, BT]
        b_a = tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT)))
        if SCORE > 0:
            # κ(0) = 1 for taylor2, so the mask must come after κ (README, "Score maps").
            b_a = score_map(b_a * scale, SCORE)
        m_a = (o_t[:, None] >= o_s[None, :]) & m_t[:, None]
        if USE_G:
            b_Gk = load_per_token(G, bos + o_s, m_s, i_h, H)
            b_a = tl.where(m_a, b_a * masked_decay(b_Gq[:, None], b_Gk[None, :], m_a), 0.0)
        else:
            b_a = tl.where(m_a, b_a, 0.0)
        if NORMALIZE:
            b_z += tl.sum(b_a, 1)
        b_n += tl.dot(operand(b_a, DOT_LOW, DT), operand(b_v, DOT_LOW, DT))
    if USE_H0:
        # [BT, BV]: exp(G_t) φ(q_t)^T S_0, and [BT]: exp(G_t) φ(q_t)·z_0 (scaled with the rest)
        b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
        b_hn = tl.dot(b_qd, operand(b_h0, DOT_LOW, DT))
        if NORMALIZE:
            b_hz = tl.sum(b_q * load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)[None, :], 1)
        if USE_G:
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
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, the query part of dL/dG (q̃·dq̃, or Σ_j κ_tj dκ_tj) and δ_t = do_t·o_t per query block."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_t, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    rows = bos + o_t
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)
    b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)
    b_dod = operand(b_do, DOT_LOW, DT)
    if NORMALIZE:
        b_den = load_per_token(Z, rows, m_t, i_h, H)
        b_delta = tl.sum(b_do * load_rows(o, rows, m_t, i_h, H, V, o_v, m_v), 1)
        store_per_token(delta, b_delta, rows, m_t, i_h, H)
    if USE_G:
        b_Gq = load_per_token(G, rows, m_t, i_h, H)
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
        if USE_G:
            b_Gk = load_per_token(G, bos + o_s, m_s, i_h, H)
            b_dp = tl.where(m_a, b_dp * masked_decay(b_Gq[:, None], b_Gk[None, :], m_a), 0.0)
        else:
            b_dp = tl.where(m_a, b_dp, 0.0)
        if SCORE > 0:
            # x_tj = s q_t·k_j recomputed (the forward kept no T x T tile); dκ_tj is b_dp.
            b_x = tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT))) * scale
            if USE_G:
                b_dGs += tl.sum(score_map(b_x, SCORE) * b_dp, 1)
            b_dp = b_dp * score_map_grad(b_x, SCORE)
        b_dq += tl.dot(operand(b_dp, DOT_LOW, DT), operand(b_k, DOT_LOW, DT))
    if USE_H0:
        b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
        # [BT, BK]: S_0 dN_t + z_0 dZ_t with dN_t = do_t / Z_t and dZ_t = -δ_t / Z_t
        b_dqh = tl.dot(b_dod, tl.trans(operand(b_h0, DOT_LOW, DT)))
        if NORMALIZE:
            b_z0 = load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)
            b_dqh = divide_or_zero(b_dqh - b_delta[:, None] * b_z0[None, :], b_den[:, None])
        if USE_G:
            b_dqh = b_dqh * tl.exp(b_Gq)[:, None]
        b_dq += b_dqh
    b_dq = b_dq * scale
    if USE_G:
        if SCORE > 0:
            store_per_token(dGq, b_dGs, rows, m_t, i_h, H)
        else:
            store_per_token(dGq, tl.sum(b_q * b_dq, 1), rows, m_t, i_h, H)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def parallel_bwd_kernel_dkv(
    q, k, v, G, Z, delta, do, dht, dzt, dk, dv, dGk, chunk_indices, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, SCORE: tl.constexpr, NORMALIZE: tl.constexpr, USE_G: tl.constexpr,
    USE_DHT: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dk, dv and the key part of dL/dG (k̃·dk̃, or Σ_t κ_tj dκ_tj) for one key block."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    DT = q.dtype.element_ty
    i_n, i_s, bos, L = chunk_bounds(chunk_indices, cu_seqlens, i_c)
    o_s = i_s * BT + tl.arange(0, BT)
    m_s = o_s < L
    rows = bos + o_s
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # [BT, BK], [BT, BV]
    b_k, b_kx = load_features(k, rows, m_s, i_h, H, K, o_k, m_k, FEATURE)
    b_v = load_rows(v, rows, m_s, i_h, H, V, o_v, m_v)
    b_kd = operand(b_k, DOT_LOW, DT)
    b_vd = operand(b_v, DOT_LOW, DT)
    if USE_G:
        b_Gk = load_per_token(G, rows, m_s, i_h, H)
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
            b_at = b_at / b_safe[None, :]
            b_dpt = (b_dpt - b_delta[None, :]) / b_safe[None, :]
        if USE_G:
            b_Gq = load_per_token(G, bos + o_t, m_t, i_h, H)
            b_w = masked_decay(b_Gq[None, :], b_Gk[:, None], m_a)
            b_at = b_at * b_w
            b_dpt = b_dpt * b_w
        b_at = tl.where(m_a, b_at, 0.0)
        b_dpt = tl.where(m_a, b_dpt, 0.0)
        if SCORE > 0:
            # b_dpt is dκ (zero outside the mask); b_kap the unweighted, unnormalized κ.
            if USE_G:
                b_dGs += tl.sum(b_kap * b_dpt, 1)
            b_dpt = b_dpt * score_map_grad(b_xt, SCORE)
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
        b_dvf = tl.dot(b_kd, b_dhtd)
        if NORMALIZE:
            b_dkf = b_dkf + load_key_sum(dzt, i_n * H + i_h, K, o_k, m_k)[None, :]
        if USE_G:
            b_we = masked_decay(tl.load(G + (bos + L - 1) * H + i_h), b_Gk, m_s)
            b_dkf = b_dkf * b_we[:, None]
            b_dvf = b_dvf * b_we[:, None]
        b_dk += b_dkf
        b_dv += b_dvf
    if USE_G:
        if SCORE > 0:
            store_per_token(dGk, b_dGs, rows, m_s, i_h, H)
        else:
            store_per_token(dGk, tl.sum(b_k * b_dk, 1), rows, m_s, i_h, H)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_s, i_h, H, K, o_k, m_k)
    store_rows(dv, b_dv, rows, m_s, i_h, H, V, o_v, m_v)


def _map_codes(x: Inputs) -> dict[str, int]:
    """The kernels' ``FEATURE`` and ``SCORE`` constexprs (a score map loads q, k as identity)."""
    if x.feature in SCORE_CODES.values():
        return {"FEATURE": 0, "SCORE": x.feature}
    return {"FEATURE": x.feature, "SCORE": 0}


def parallel_fwd(x: Inputs) -> Forward:
    """Run the forward kernels: decay cumsum, output, and the final state when asked.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).

    Returns:
        The output in the input dtype and the final state, plus what `parallel_bwd` reads: the
        fp32 output and the denominators (normalized only), the cumulative decay G and the
        table of query blocks.
    """
    if x.g is not None and x.g.ndim == 4:
        return gla_parallel_fwd(x)
    if x.feature in SCORE_CODES.values() and (x.h0 is not None or x.output_final_state):
        # The state of a score map has F = K² (+ K + 1) rows: `lifted_attention` computes it.
        raise ValueError("A score map's initial or final state goes through lifted_attention.")
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, bl.BT, device)
    low = dot_low(dtype)
    G = None
    if x.g is not None:
        G = torch.empty(B, T, H, dtype=torch.float32, device=device)
        parallel_fwd_kernel_cumsum[(N, H)](g=x.g, G=G, cu_seqlens=table.cu_seqlens, H=H, BT=64)
    o_acc, Z = forward_outputs(x, unrounded=x.normalize)
    parallel_fwd_kernel[(table.num_chunks, H)](
        q=x.q, k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, o=o_acc, Z=Z,
        chunk_indices=table.chunk_indices, cu_seqlens=table.cu_seqlens, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=bl.BT, BK=bl.BK, BV=bl.BV, NORMALIZE=x.normalize, USE_G=G is not None,
        USE_H0=x.h0 is not None, DOT_LOW=low, **_map_codes(x),
    )  # fmt: skip
    ht = zt = None
    if x.output_final_state:
        ht, zt = parallel_fwd_h(x, G=G, table=table, dot_low=low)
    return Forward(
        o=finish_output(o_acc, dtype), ht=ht, zt=zt, o_acc=o_acc if x.normalize else None, den=Z,
        G=G, table=table,
    )  # fmt: skip


def parallel_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the backward kernels: dq, then dk and dv, then dg and dS_0 (dz_0).

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `parallel_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Cotangent of S_T ``[N, H, K, V]``, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g, S_0 and z_0 (fp32).
    """
    if x.g is not None and x.g.ndim == 4:
        return gla_parallel_bwd(x, fwd, do, dht, dzt)
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    assert fwd.table is not None
    bl = blocks(K, V)
    device, dtype = x.q.device, x.q.dtype
    use_g, use_dht, low = x.g is not None, dht is not None or dzt is not None, dot_low(dtype)
    if use_dht:
        dht = torch.zeros(N, H, K, V, device=device) if dht is None else dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, device=device) if dzt is None else dzt.float().contiguous()
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    common = {
        "chunk_indices": fwd.table.chunk_indices, "cu_seqlens": fwd.table.cu_seqlens,
        "scale": x.scale, "H": H, "K": K, "V": V, "BT": bl.BT, "BK": bl.BK, "BV": bl.BV,
        "NORMALIZE": x.normalize, "USE_G": use_g, "DOT_LOW": low, **_map_codes(x),
    }  # fmt: skip
    grid = (fwd.table.num_chunks, H)
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dv = empty_output((B, T, H, V), dtype, device)
    dGq = torch.empty(B, T, H, dtype=torch.float32, device=device) if use_g else None
    dGk = torch.empty(B, T, H, dtype=torch.float32, device=device) if use_g else None
    delta = torch.empty(B, T, H, dtype=torch.float32, device=device) if x.normalize else None
    parallel_bwd_kernel_dq[grid](
        q=x.q, k=x.k, v=x.v, G=fwd.G, h0=x.h0, z0=x.z0, o=fwd.o_acc, Z=fwd.den, do=do, dq=dq,
        dGq=dGq, delta=delta, USE_H0=x.h0 is not None, **common,
    )  # fmt: skip
    parallel_bwd_kernel_dkv[grid](
        q=x.q, k=x.k, v=x.v, G=fwd.G, Z=fwd.den, delta=delta, do=do, dht=dht, dzt=dzt, dk=dk,
        dv=dv, dGk=dGk, USE_DHT=use_dht, **common,
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
            dGq=dGq, dGk=dGk, dGend=dGend, dg=dg, cu_seqlens=fwd.table.cu_seqlens, H=H, BT=64,
            USE_DHT=use_dht,
        )  # fmt: skip
    dh0 = dz0 = None
    if x.h0 is not None:
        dh0, dz0 = parallel_bwd_dh0(x, fwd, do=do, delta=delta, dht=dht, dzt=dzt, dot_low=low)
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=dh0, dz0=dz0,
    )  # fmt: skip


class ParallelLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `parallel_fwd`, keeps its result, runs `parallel_bwd`."""

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
        save_for_backward(ctx, x, fwd)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for ``x`` and absent inputs)."""
        x, fwd = saved_for_backward(ctx)
        return None, *parallel_bwd(x, fwd, do, dht, dzt)


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
    feature_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention in the parallel (tiled quadratic) form, differentiable.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay (<= 0): ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension: the score weights become
            Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm)), or `None` for no decay. Default: `None`.
        scale: s; `None` means K^-1/2 (K of the input, whatever the map). Default: `None`.
        normalize: Divide by s φ(q_t)·z_t + eps (a zero denominator gives 0). Default: `False`.
        eps: Denominator offset, added in fp32; normalized only. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel; or a
            lifted map (R^K -> R^F): ``"taylor2"`` (weight κ(s q·k), κ(x) = 1 + x + x²/2,
            F = 1 + K + K²) or ``"rebased"`` (κ(x) = x², F = K²), whose scale multiplies the
            query before the map, so no outer scale applies; or ``"favor+"`` (φ(x) =
            exp(W x - |x|²/2)/√m, F = m, outer scale s). The two score maps are fused (κ of
            the K-dim score, no features) unless there is an initial or a final state; those
            cases and favor+ lift q and k first (`linattn_kernels.lifted`). A lifted map takes
            a scalar gate or none. Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized (F rows instead of K for a lifted map). Default: `None`.
        output_final_state: Also return S_T (fp32), or ``(S_T, z_T)`` when normalized.
            Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1). Default: `None`.
        feature_weights: favor+'s projection W ``[m, K]`` on q's device (required there, and
            refused with any other map). Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``.

    Raises:
        ValueError: naming the argument that is malformed and what was expected.
    """
    if feature_map in LIFTED_MAPS:
        check_lifted_gate(g, feature_map)
        if feature_map == "favor+" or initial_state is not None or output_final_state:
            return lifted_attention(
                parallel_linear_attention, q, k, v, g, scale=scale, normalize=normalize, eps=eps,
                feature_map=feature_map, feature_weights=feature_weights,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens,
            )  # fmt: skip
    refuse_weights(feature_map, feature_weights)
    score = SCORE_CODES.get(feature_map)
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps,
        feature_map="identity" if score is not None else feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    if score is not None:
        x = replace(x, feature=score)
    o, ht, zt = ParallelLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0)
    return o, final_state(x, ht, zt)


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Return the `linattn_verify.recipe.PrecisionRecipe` keyword arguments for this kernel.

    The recipe describes the current mode: under the interpreter every tl.dot is exact-product
    fp32 with round-to-nearest division; on CUDA fp32 operands go through tf32, accumulation is
    tensor-core (MMA) and division is ``div.full.f32``; bf16 inputs on CUDA round φ(q), φ(k) and
    P (and in the backward dP, P/Z, dN) to bf16, at most three such roundings per term.

    A vector gate (g ``[B, T, H, K]``, `linattn_kernels.gla`) takes the same roundings per term
    (its scores are elementwise products summed over K, docs/error-model.md §2.7), so one
    recipe describes both gates.

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


__all__ = [
    "ParallelLinearAttentionFunction",
    "blocks",
    "parallel_bwd",
    "parallel_fwd",
    "parallel_linear_attention",
    "precision_recipe",
]
