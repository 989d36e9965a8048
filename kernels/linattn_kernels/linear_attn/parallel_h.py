# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel form's per-sequence reductions: the decay scans and the state reductions.

The state reductions, the final state S_T (z_T) and the gradient of S_0 (z_0), do not fit the
query-block kernels of `parallel`, whose programs own tokens: here a program owns one
``[BKS, BVS]`` (at most 64 x 64) tile of the state of one sequence-head and reduces over all its
tokens, with weights exp(G_T - G_j) (keys into S_T) and exp(G_t) (queries out of S_0) from the
same whole-sequence cumulative decay G. The scans, G = cumsum(g) and the reverse dg scan, own a
whole sequence-head each; `parallel` launches them.

The constexpr ``GATE`` picks the decay: 0 none, 1 a scalar g ``[B, T, H]``, 2 a vector g
``[B, T, H, K]``, whose G is scanned per key dimension (a program then owns BK dimensions of a
sequence-head) and whose weights are per row m of a state tile: exp(G_T,m - G_j,m) for keys
into S_T, exp(G_t,m) for queries out of S_0, exp(G_T,m) for S_0 into S_T (and dS_T into dS_0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import Inputs
from linattn_kernels.common.blocks import blocks
from linattn_kernels.common.decay import masked_decay
from linattn_kernels.common.division import divide_or_zero
from linattn_kernels.common.loads import (
    load_features,
    load_key_sum,
    load_per_token,
    load_rows,
    load_tile,
    operand,
    store_key_sum,
    store_per_token,
    store_rows,
    store_tile,
)
from linattn_kernels.common.results import Forward
from linattn_kernels.common.tables import ChunkTable, sequence_bounds


@triton.jit
def parallel_fwd_kernel_state(
    k, v, G, h0, z0, ht, zt, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, GATE: tl.constexpr,
    USE_H0: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """S_T = Σ_j exp(G_T - G_j) φ(k_j) v_j^T + exp(G_T) S_0 and z_T (grid: K x V tiles, N, H)."""
    i_kv = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = k.dtype.element_ty
    NV = tl.cdiv(V, BV)
    i_k = i_kv // NV
    i_v = i_kv % NV
    bos, L = sequence_bounds(cu_seqlens, i_n)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    if GATE == 1:
        # An empty sequence has G_T = 0: its final state is its initial state.
        b_Gend = tl.load(G + (bos + L - 1) * H + i_h, mask=L > 0, other=0.0)
    elif GATE == 2:
        # [BK]: G_T per dimension, 0 for an empty sequence. (The test is broadcast to a block
        # first: the interpreter turns scalar & block into ints.)
        m_end = m_k & (o_k * 0 + L > 0)
        b_Gend = tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_end, other=0.0)
    # [BK, BV], [BK]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    b_zk = tl.zeros([BK], dtype=tl.float32)
    for i_s in range(tl.cdiv(L, BT)):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        # [BT, BK], [BT, BV]
        b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)
        if GATE == 1:
            b_Gk = load_per_token(G, bos + o_s, m_s, i_h, H)
            b_k = b_k * masked_decay(b_Gend, b_Gk, m_s)[:, None]
        elif GATE == 2:
            b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_k = b_k * tl.exp(tl.where(m_s[:, None], b_Gend[None, :] - b_Gk, float("-inf")))
        b_h += tl.dot(tl.trans(operand(b_k, DOT_LOW, DT)), operand(b_v, DOT_LOW, DT))
        if NORMALIZE:
            b_zk += tl.sum(b_k, 0)
    if USE_H0:
        b_h0 = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_z0 = load_key_sum(z0, i_n * H + i_h, K, o_k, m_k)
        if GATE == 1:
            b_e = tl.exp(b_Gend)
            b_h0 = b_h0 * b_e
            if NORMALIZE:
                b_z0 = b_z0 * b_e
        elif GATE == 2:
            b_e = tl.exp(b_Gend)  # [BK]
            b_h0 = b_h0 * b_e[:, None]
            if NORMALIZE:
                b_z0 = b_z0 * b_e
        b_h += b_h0
        if NORMALIZE:
            b_zk += b_z0
    store_tile(ht, b_h, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    if NORMALIZE:
        store_key_sum(zt, b_zk, i_n * H + i_h, K, o_k, m_k, i_v)


@triton.jit
def parallel_bwd_kernel_dh0(
    q, G, Z, delta, do, dht, dzt, dh0, dz0, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, GATE: tl.constexpr,
    USE_DHT: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dS_0 = s Σ_t exp(G_t) φ(q_t) dN_t^T + exp(G_T) dS_T, and dz_0 (grid: K x V tiles, N, H)."""
    i_kv = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1).to(tl.int64)
    i_h = tl.program_id(2).to(tl.int64)
    DT = q.dtype.element_ty
    NV = tl.cdiv(V, BV)
    i_k = i_kv // NV
    i_v = i_kv % NV
    bos, L = sequence_bounds(cu_seqlens, i_n)
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
        # [BT, BK], [BT, BV]
        b_q, _ = load_features(q, bos + o_t, m_t, i_h, H, K, o_k, m_k, FEATURE)
        b_do = load_rows(do, bos + o_t, m_t, i_h, H, V, o_v, m_v)
        if GATE == 1:
            b_q = b_q * tl.exp(load_per_token(G, bos + o_t, m_t, i_h, H))[:, None]
        elif GATE == 2:
            b_Gq = load_rows(G, bos + o_t, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
            b_q = b_q * tl.exp(tl.where(m_t[:, None], b_Gq, float("-inf")))
        if NORMALIZE:
            # dN_t = do_t / Z_t and dZ_t = -δ_t / Z_t, both 0 where Z_t vanishes.
            b_den = load_per_token(Z, bos + o_t, m_t, i_h, H)
            b_delta = load_per_token(delta, bos + o_t, m_t, i_h, H)
            b_do = divide_or_zero(b_do, b_den[:, None])
            b_dz += tl.sum(b_q * divide_or_zero(-b_delta, b_den)[:, None], 0)
        b_dh += tl.dot(tl.trans(operand(b_q, DOT_LOW, DT)), operand(b_do, DOT_LOW, DT))
    b_dh = b_dh * scale
    b_dz = b_dz * scale
    if USE_DHT:
        b_dht = load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_dzt = load_key_sum(dzt, i_n * H + i_h, K, o_k, m_k)
        if GATE == 1:
            b_e = tl.exp(tl.load(G + (bos + L - 1) * H + i_h, mask=L > 0, other=0.0))
            b_dht = b_dht * b_e
            if NORMALIZE:
                b_dzt = b_dzt * b_e
        elif GATE == 2:
            m_end = m_k & (o_k * 0 + L > 0)
            b_e = tl.exp(tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_end, other=0.0))
            b_dht = b_dht * b_e[:, None]
            if NORMALIZE:
                b_dzt = b_dzt * b_e
        b_dh += b_dht
        if NORMALIZE:
            b_dz += b_dzt
    store_tile(dh0, b_dh, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    if NORMALIZE:
        store_key_sum(dz0, b_dz, i_n * H + i_h, K, o_k, m_k, i_v)


@triton.jit
def parallel_fwd_kernel_cumsum(
    g, G, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, GATE: tl.constexpr,
):  # fmt: skip
    """G_t = Σ_{s<=t} g_s within each sequence, in fp32 (grid: N, H, K-tiles of a vector gate).

    A vector gate is scanned per dimension: program (n, h, i_k) owns BK of them.
    """
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    o_b = tl.arange(0, BT)
    if GATE == 2:
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_carry = tl.zeros([BK], dtype=tl.float32)  # [BK]
    else:
        b_carry = 0.0
    for i_t in range(tl.cdiv(L, BT)):
        o_t = i_t * BT + o_b
        m_t = o_t < L
        # Selecting the last entry exactly (not re-summing g) keeps G_end equal to the stored G_T.
        if GATE == 2:
            # [BT, BK]
            b_G = tl.cumsum(load_rows(g, bos + o_t, m_t, i_h, H, K, o_k, m_k), 0) + b_carry[None, :]
            store_rows(G, b_G, bos + o_t, m_t, i_h, H, K, o_k, m_k)
            b_carry = tl.sum(tl.where(o_b[:, None] == BT - 1, b_G, 0.0), 0)
        else:
            # [BT]
            b_G = tl.cumsum(load_per_token(g, bos + o_t, m_t, i_h, H), 0) + b_carry
            store_per_token(G, b_G, bos + o_t, m_t, i_h, H)
            b_carry = tl.sum(tl.where(o_b == BT - 1, b_G, 0.0), 0)


@triton.jit
def parallel_bwd_kernel_dg(
    dGq, dGk, dGend, dg, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    USE_DHT: tl.constexpr, GATE: tl.constexpr,
):  # fmt: skip
    """dg_s = Σ_{t>=s} (q̃_t·dq̃_t - k̃_t·dk̃_t) + ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ (grid: N, H, K-tiles).

    A vector gate's scan runs per dimension, (q̃ ⊙ dq̃ - k̃ ⊙ dk̃)_tm with row m of the
    final-state term: program (n, h, i_k) owns BK dimensions.
    """
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_k = tl.program_id(2).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    o_b = tl.arange(0, BT)
    if GATE == 2:
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_carry = tl.zeros([BK], dtype=tl.float32)  # [BK]
        if USE_DHT:
            b_carry += load_key_sum(dGend, i_n * H + i_h, K, o_k, m_k)
    else:
        b_carry = 0.0
        if USE_DHT:
            b_carry = tl.load(dGend + i_n * H + i_h)
    NT = tl.cdiv(L, BT)
    for i in range(NT):
        o_t = (NT - 1 - i) * BT + o_b
        m_t = o_t < L
        # A reverse scan, not total - prefix, so short suffixes keep their own precision.
        if GATE == 2:
            # [BT, BK]
            b_d = load_rows(dGq, bos + o_t, m_t, i_h, H, K, o_k, m_k)
            b_d = b_d - load_rows(dGk, bos + o_t, m_t, i_h, H, K, o_k, m_k)
            b_dg = tl.cumsum(b_d, 0, reverse=True) + b_carry[None, :]
            store_rows(dg, b_dg, bos + o_t, m_t, i_h, H, K, o_k, m_k)
            b_carry = tl.sum(tl.where(o_b[:, None] == 0, b_dg, 0.0), 0)
        else:
            # [BT]
            b_d = load_per_token(dGq, bos + o_t, m_t, i_h, H)
            b_d = b_d - load_per_token(dGk, bos + o_t, m_t, i_h, H)
            b_dg = tl.cumsum(b_d, 0, reverse=True) + b_carry
            store_per_token(dg, b_dg, bos + o_t, m_t, i_h, H)
            b_carry = tl.sum(tl.where(o_b == 0, b_dg, 0.0), 0)


def parallel_fwd_h(
    x: Inputs, *, G: torch.Tensor | None, table: ChunkTable, dot_low: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reduce the final state S_T (and z_T when normalized) from the keys and values.

    Args:
        x: Prepared inputs.
        G: The whole-sequence cumulative decay ``[B, T, H]`` (``[B, T, H, K]`` for a vector
            gate) fp32, or `None` without decay.
        table: The table `parallel_fwd` launched on (its ``cu_seqlens`` are used).
        dot_low: Round ``tl.dot`` operands to the input dtype (`parallel`'s switch).

    Returns:
        ``(ht, zt)``: S_T ``[N, H, K, V]`` fp32 and z_T ``[N, H, K]`` fp32 (or `None`).
    """
    H, K, V, N = x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    device = x.q.device
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
    zt = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
    grid = (triton.cdiv(K, bl.BKS) * triton.cdiv(V, bl.BVS), N, H)
    parallel_fwd_kernel_state[grid](
        k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, ht=ht, zt=zt, cu_seqlens=table.cu_seqlens,
        H=H, K=K, V=V, BT=bl.BT, BK=bl.BKS, BV=bl.BVS, FEATURE=x.feature, NORMALIZE=x.normalize,
        GATE=x.gate, USE_H0=x.h0 is not None, DOT_LOW=dot_low,
    )  # fmt: skip
    return ht, zt


def parallel_bwd_dh0(
    x: Inputs,
    fwd: Forward,
    *,
    do: torch.Tensor,
    delta: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
    dot_low: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reduce the gradients of the initial state S_0 (and z_0 when normalized).

    Args:
        x: Prepared inputs (with an initial state).
        fwd: What `parallel_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, contiguous.
        delta: δ_t = do_t·o_t ``[B, T, H]`` fp32 from the dq pass (normalized only), or `None`.
        dht: Cotangent of S_T ``[N, H, K, V]`` fp32, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]`` fp32 (normalized only), or `None`.
        dot_low: Round ``tl.dot`` operands to the input dtype (`parallel`'s switch).

    Returns:
        ``(dh0, dz0)``: ``[N, H, K, V]`` and ``[N, H, K]`` (or `None`), fp32.
    """
    H, K, V, N = x.H, x.K, x.V, x.N
    assert fwd.table is not None
    bl = blocks(K, V)
    device = x.q.device
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
    dz0 = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
    grid = (triton.cdiv(K, bl.BKS) * triton.cdiv(V, bl.BVS), N, H)
    parallel_bwd_kernel_dh0[grid](
        q=x.q, G=fwd.G, Z=fwd.den, delta=delta, do=do, dht=dht, dzt=dzt, dh0=dh0, dz0=dz0,
        cu_seqlens=fwd.table.cu_seqlens, scale=x.scale, H=H, K=K, V=V, BT=bl.BT, BK=bl.BKS,
        BV=bl.BVS, FEATURE=x.feature, NORMALIZE=x.normalize, GATE=x.gate,
        USE_DHT=dht is not None, DOT_LOW=dot_low,
    )  # fmt: skip
    return dh0, dz0


__all__ = [
    "parallel_bwd_dh0",
    "parallel_bwd_kernel_dg",
    "parallel_fwd_h",
    "parallel_fwd_kernel_cumsum",
]
