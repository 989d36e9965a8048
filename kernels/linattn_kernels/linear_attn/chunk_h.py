# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk form's sequential passes over chunks: the state S (forward) and dS (backward).

One program per (sequence·head, K-block, V-block) walks the chunks of its sequence in order
(in reverse order for dS), carrying a ``[BK, BV]`` fp32 tile of the state, and stores it at
every chunk start (dS at every chunk end) for the parallel per-chunk kernels in `chunk`. With
``normalize`` the key sum z (and its cotangent) rides along as an extra value column.

The constexpr ``GATE`` picks the decay (0 none, 1 scalar g ``[B, T, H]``, 2 vector g
``[B, T, H, K]``). With a vector gate row m of the tile decays with its own chunk-local
cumulative sums: keys enter with exp(G_L,m - G_j,m), the carried state is multiplied by
exp(G_L,m), and (backward) queries reach dS with exp(G_t,m). Every exponent is <= 0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import Inputs
from linattn_kernels.common.blocks import chunk_block, chunk_num_warps
from linattn_kernels.common.decay import chunk_decay, vector_chunk_decay
from linattn_kernels.common.division import reciprocal
from linattn_kernels.common.loads import (
    load_features,
    load_key_sum,
    load_per_token,
    load_rows,
    load_tile,
    operand,
    store_key_sum,
    store_tile,
)
from linattn_kernels.common.tables import ChunkTable, sequence_bounds


@triton.jit
def chunk_fwd_kernel_h(
    k, v, g, h0, z0, h, hz, ht, zt, cu_seqlens, chunk_offsets,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    GATE: tl.constexpr, USE_H0: tl.constexpr, STORE_FINAL: tl.constexpr,
    NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """S (and z) at every chunk start, and S_T (z_T) (grid: N·H, K-blocks, V-blocks)."""
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_v = tl.program_id(2).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    DT = k.dtype.element_ty
    bos, L = sequence_bounds(cu_seqlens, i_n)
    boh = tl.load(chunk_offsets + i_n)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_z = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_H0:
        b_h += load_tile(h0, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_z += load_key_sum(z0, i_nh, K, o_k, m_k)
    for i_t in range(tl.cdiv(L, BT)):
        i_c = boh + i_t
        store_tile(h, b_h, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(hz, b_z, i_c * H + i_h, K, o_k, m_k, i_v)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        rows = bos + o_t
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_v = load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        if GATE == 1:
            b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)
            # exp(G_L - G_j) <= 1: the weight of key j at the chunk end, never a quotient.
            b_k = b_k * tl.exp(b_GL - b_G)[:, None]
            b_h = b_h * tl.exp(b_GL)
            b_z = b_z * tl.exp(b_GL)
        elif GATE == 2:
            # [BT, BK], [BK]
            b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)
            # exp(G_L,m - G_j,m) <= 1 per dimension: the weight of key j at the chunk end.
            b_k = b_k * tl.exp(tl.where(m_t[:, None], b_GL[None, :] - b_G, float("-inf")))
            b_h = b_h * tl.exp(b_GL)[:, None]
            b_z = b_z * tl.exp(b_GL)
        b_h += tl.dot(tl.trans(operand(b_k, DOT_LOW, DT)), operand(b_v, DOT_LOW, DT))
        if NORMALIZE:
            b_z += tl.sum(b_k, axis=0)
    if STORE_FINAL:
        store_tile(ht, b_h, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(zt, b_z, i_nh, K, o_k, m_k, i_v)


@triton.jit
def chunk_bwd_kernel_dh(
    q, g, do, den, dd, dht, dzt, dh, dhz, dh0, dz0, cu_seqlens, chunk_offsets, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    GATE: tl.constexpr, USE_DHT: tl.constexpr, STORE_DH0: tl.constexpr,
    NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dS (and dz) at every chunk end, and dS_0 (dz_0) (grid: N·H, K-blocks, V-blocks)."""
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_v = tl.program_id(2).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    DT = q.dtype.element_ty
    bos, L = sequence_bounds(cu_seqlens, i_n)
    boh = tl.load(chunk_offsets + i_n)
    NT = tl.cdiv(L, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    # b_dh is dL/dS at the end of the current chunk, seeded with the final-state cotangent.
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_dz = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_DHT:
        b_dh += load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_dz += load_key_sum(dzt, i_nh, K, o_k, m_k)
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        i_c = boh + i_t
        store_tile(dh, b_dh, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(dhz, b_dz, i_c * H + i_h, K, o_k, m_k, i_v)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        rows = bos + o_t
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        if GATE == 2:
            # [BT, BK], [BK]
            b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)
            # exp(G_t,m) <= 1: how query t's dimension m reads the state at the chunk start.
            b_q = b_q * tl.exp(tl.where(m_t[:, None], b_G, float("-inf")))
        # Per-row weight of do_t in dS: s exp(G_t) (/ D_t when normalized); a vector gate's
        # exp(G_t,m) is in b_q already.
        b_f = tl.full([BT], scale, dtype=tl.float32)  # [BT]
        if NORMALIZE:
            b_fz = scale * load_per_token(dd, rows, m_t, i_h, H)
            b_f = b_f * reciprocal(load_per_token(den, rows, m_t, i_h, H))
        if GATE == 1:
            b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)
            b_f = b_f * tl.exp(b_G)
            b_dh = b_dh * tl.exp(b_GL)
            if NORMALIZE:
                b_fz = b_fz * tl.exp(b_G)
                b_dz = b_dz * tl.exp(b_GL)
        elif GATE == 2:
            b_dh = b_dh * tl.exp(b_GL)[:, None]
            if NORMALIZE:
                b_dz = b_dz * tl.exp(b_GL)
        b_qf = operand(b_q * b_f[:, None], DOT_LOW, DT)
        b_dh += tl.dot(tl.trans(b_qf), operand(b_do, DOT_LOW, DT))
        if NORMALIZE:
            b_dz += tl.sum(b_q * b_fz[:, None], axis=0)
    if STORE_DH0:
        store_tile(dh0, b_dh, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(dz0, b_dz, i_nh, K, o_k, m_k, i_v)


class ChunkStates(NamedTuple):
    """What `chunk_fwd_h` returns: the state at every chunk start, and the final state.

    Attributes:
        h: ``[NC, H, K, V]``, fp32 (the input dtype when dots take low-precision operands).
        hz: ``[NC, H, K]`` fp32 key sums (normalized only), or `None`.
        ht: S_T ``[N, H, K, V]`` fp32, or `None` unless asked for.
        zt: z_T ``[N, H, K]`` fp32 (normalized only), or `None`.
    """

    h: torch.Tensor
    hz: torch.Tensor | None
    ht: torch.Tensor | None
    zt: torch.Tensor | None


class ChunkStateGrads(NamedTuple):
    """What `chunk_bwd_dh` returns: dS at every chunk end, and the initial-state gradients.

    Attributes:
        dh: ``[NC, H, K, V]``, fp32 (the input dtype when dots take low-precision operands).
        dhz: ``[NC, H, K]`` fp32 (normalized only), or `None`.
        dh0: dS_0 ``[N, H, K, V]`` fp32, or `None` without an initial state.
        dz0: dz_0 ``[N, H, K]`` fp32, or `None`.
    """

    dh: torch.Tensor
    dhz: torch.Tensor | None
    dh0: torch.Tensor | None
    dz0: torch.Tensor | None


def chunk_fwd_h(x: Inputs, *, table: ChunkTable, store_final: bool, dot_low: bool) -> ChunkStates:
    """Compute the state at every chunk start (and the final state) by a pass over chunks.

    Args:
        x: Prepared inputs.
        table: The chunk table.
        store_final: Whether to return S_T (and z_T).
        dot_low: Round ``tl.dot`` operands to the input dtype (`chunk`'s switch).

    Returns:
        The `ChunkStates`.
    """
    H, K, V = x.H, x.K, x.V
    N, NC, device = table.num_sequences, table.num_chunks, x.k.device
    BK, BV = chunk_block(K), chunk_block(V)
    h = torch.empty(NC, H, K, V, dtype=x.k.dtype if dot_low else torch.float32, device=device)
    hz = torch.empty(NC, H, K, dtype=torch.float32, device=device) if x.normalize else None
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device) if store_final else None
    zt = (
        torch.empty(N, H, K, dtype=torch.float32, device=device)
        if store_final and x.normalize
        else None
    )
    chunk_fwd_kernel_h[(N * H, triton.cdiv(K, BK), triton.cdiv(V, BV))](
        k=x.k, v=x.v, g=x.g, h0=x.h0, z0=x.z0, h=h, hz=hz, ht=ht, zt=zt,
        cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets,
        H=H, K=K, V=V, BT=table.chunk_size, BK=BK, BV=BV, FEATURE=x.feature,
        GATE=x.gate, USE_H0=x.h0 is not None, STORE_FINAL=store_final,
        NORMALIZE=x.normalize, DOT_LOW=dot_low, num_warps=chunk_num_warps(table.chunk_size),
    )  # fmt: skip
    return ChunkStates(h=h, hz=hz, ht=ht, zt=zt)


def chunk_bwd_dh(
    x: Inputs,
    *,
    table: ChunkTable,
    do: torch.Tensor,
    den: torch.Tensor | None,
    dd: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
    dot_low: bool,
) -> ChunkStateGrads:
    """Compute dS at every chunk end (and dS_0) by a reverse pass over chunks.

    Args:
        x: Prepared inputs.
        table: The chunk table.
        do: Output cotangent ``[B, T, H, V]``, contiguous.
        den: The forward's denominators ``[B, T, H]`` fp32 (normalized only), or `None`.
        dd: The denominators' cotangents ``[B, T, H]`` fp32 (normalized only), or `None`.
        dht: Final-state cotangent ``[N, H, K, V]`` fp32, or `None` (zero).
        dzt: Final key-sum cotangent ``[N, H, K]`` fp32, or `None` (zero).
        dot_low: Round ``tl.dot`` operands to the input dtype (`chunk`'s switch).

    Returns:
        The `ChunkStateGrads`.
    """
    H, K, V = x.H, x.K, x.V
    N, NC, BT, device = table.num_sequences, table.num_chunks, table.chunk_size, x.q.device
    BK, BV = chunk_block(K), chunk_block(V)
    dh = torch.empty(NC, H, K, V, dtype=x.q.dtype if dot_low else torch.float32, device=device)
    dhz = torch.empty(NC, H, K, dtype=torch.float32, device=device) if x.normalize else None
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=device) if x.h0 is not None else None
    dz0 = (
        torch.empty(N, H, K, dtype=torch.float32, device=device)
        if x.h0 is not None and x.normalize
        else None
    )
    chunk_bwd_kernel_dh[(N * H, triton.cdiv(K, BK), triton.cdiv(V, BV))](
        q=x.q, g=x.g, do=do, den=den, dd=dd, dht=dht, dzt=dzt, dh=dh, dhz=dhz, dh0=dh0, dz0=dz0,
        cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets, scale=x.scale,
        H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, FEATURE=x.feature, GATE=x.gate,
        USE_DHT=dht is not None or dzt is not None, STORE_DH0=x.h0 is not None,
        NORMALIZE=x.normalize, DOT_LOW=dot_low, num_warps=chunk_num_warps(BT),
    )  # fmt: skip
    return ChunkStateGrads(dh=dh, dhz=dhz, dh0=dh0, dz0=dz0)


__all__ = ["ChunkStateGrads", "ChunkStates", "chunk_bwd_dh", "chunk_fwd_h"]
