# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel form's state reductions with a vector gate: S_T (z_T) and the gradient of S_0.

As `linattn_kernels.linear_attn.parallel_h`, one program owns a ``[BK, BV]`` tile of one
sequence-head's state and reduces over all its tokens, but row m of the tile takes its own
weights from the whole-sequence cumulative sums of dimension m: exp(G_T,m - G_j,m) for keys
into S_T, exp(G_t,m) for queries out of S_0, exp(G_T,m) for S_0 into S_T (and dS_T into dS_0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import Inputs
from linattn_kernels.common.blocks import blocks
from linattn_kernels.common.division import divide_or_zero
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
from linattn_kernels.common.results import Forward
from linattn_kernels.common.tables import ChunkTable, sequence_bounds


@triton.jit
def gla_parallel_fwd_kernel_state(
    k, v, G, h0, z0, ht, zt, cu_seqlens,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """S_T = Σ_j (φ(k_j) ⊙ e^{G_T - G_j}) v_j^T + diag(e^{G_T}) S_0 (grid: K x V tiles, N, H)."""
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
    # [BK]: G_T per dimension; an empty sequence has G_T = 0 and passes S_0 through. (The test
    # is broadcast to a block first: the interpreter turns scalar & block into ints.)
    m_end = m_k & (o_k * 0 + L > 0)
    b_Gend = tl.load(G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_end, other=0.0)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_zk = tl.zeros([BK], dtype=tl.float32)  # [BK]
    for i_s in range(tl.cdiv(L, BT)):
        o_s = i_s * BT + tl.arange(0, BT)
        m_s = o_s < L
        b_k, _ = load_features(k, bos + o_s, m_s, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_v = load_rows(v, bos + o_s, m_s, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_Gk = load_rows(G, bos + o_s, m_s, i_h, H, K, o_k, m_k)  # [BT, BK]
        b_k = b_k * tl.exp(tl.where(m_s[:, None], b_Gend[None, :] - b_Gk, float("-inf")))
        b_h += tl.dot(tl.trans(operand(b_k, DOT_LOW, DT)), operand(b_v, DOT_LOW, DT))
        if NORMALIZE:
            b_zk += tl.sum(b_k, 0)
    if USE_H0:
        b_e = tl.exp(b_Gend)  # [BK]
        b_h += load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v) * b_e[:, None]
        if NORMALIZE:
            b_zk += load_key_sum(z0, i_n * H + i_h, K, o_k, m_k) * b_e
    store_tile(ht, b_h, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    if NORMALIZE:
        store_key_sum(zt, b_zk, i_n * H + i_h, K, o_k, m_k, i_v)


@triton.jit
def gla_parallel_bwd_kernel_dh0(
    q, G, Z, delta, do, dht, dzt, dh0, dz0, cu_seqlens, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_DHT: tl.constexpr,
    DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dS_0 = s Σ_t (φ(q_t) ⊙ e^{G_t}) dN_t^T + diag(e^{G_T}) dS_T, dz_0 (grid: tiles, N, H)."""
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
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_dz = tl.zeros([BK], dtype=tl.float32)  # [BK]
    for i_t in range(tl.cdiv(L, BT)):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < L
        b_q, _ = load_features(q, bos + o_t, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_do = load_rows(do, bos + o_t, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_Gq = load_rows(G, bos + o_t, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
        b_q = b_q * tl.exp(tl.where(m_t[:, None], b_Gq, float("-inf")))
        if NORMALIZE:
            b_den = load_per_token(Z, bos + o_t, m_t, i_h, H)
            b_delta = load_per_token(delta, bos + o_t, m_t, i_h, H)
            b_do = divide_or_zero(b_do, b_den[:, None])
            b_dz += tl.sum(b_q * divide_or_zero(-b_delta, b_den)[:, None], 0)
        b_dh += tl.dot(tl.trans(operand(b_q, DOT_LOW, DT)), operand(b_do, DOT_LOW, DT))
    b_dh = b_dh * scale
    b_dz = b_dz * scale
    if USE_DHT:
        b_Gend = tl.load(
            G + ((bos + L - 1) * H + i_h) * K + o_k, mask=m_k & (o_k * 0 + L > 0), other=0.0
        )
        b_e = tl.exp(b_Gend)  # [BK]
        b_dh += load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v) * b_e[:, None]
        if NORMALIZE:
            b_dz += load_key_sum(dzt, i_n * H + i_h, K, o_k, m_k) * b_e
    store_tile(dh0, b_dh, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    if NORMALIZE:
        store_key_sum(dz0, b_dz, i_n * H + i_h, K, o_k, m_k, i_v)


def gla_parallel_fwd_h(
    x: Inputs, *, G: torch.Tensor, table: ChunkTable, dot_low: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reduce the final state S_T (and z_T when normalized) with a vector gate.

    Args:
        x: Prepared inputs with g ``[B, T, H, K]``.
        G: The whole-sequence cumulative sums ``[B, T, H, K]`` fp32.
        table: The table `gla_parallel_fwd` launched on (its ``cu_seqlens`` are used).
        dot_low: Round ``tl.dot`` operands to the input dtype.

    Returns:
        ``(ht, zt)``: S_T ``[N, H, K, V]`` fp32 and z_T ``[N, H, K]`` fp32 (or `None`).
    """
    H, K, V, N = x.H, x.K, x.V, x.N
    bl = blocks(K, V)
    device = x.q.device
    ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
    zt = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
    grid = (triton.cdiv(K, bl.BKS) * triton.cdiv(V, bl.BVS), N, H)
    gla_parallel_fwd_kernel_state[grid](
        k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, ht=ht, zt=zt, cu_seqlens=table.cu_seqlens,
        H=H, K=K, V=V, BT=bl.BT, BK=bl.BKS, BV=bl.BVS, FEATURE=x.feature, NORMALIZE=x.normalize,
        USE_H0=x.h0 is not None, DOT_LOW=dot_low,
    )  # fmt: skip
    return ht, zt


def gla_parallel_bwd_dh0(
    x: Inputs,
    fwd: Forward,
    *,
    do: torch.Tensor,
    delta: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
    dot_low: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reduce the gradients of S_0 (and z_0 when normalized) with a vector gate.

    Args:
        x: Prepared inputs (with an initial state and g ``[B, T, H, K]``).
        fwd: What `gla_parallel_fwd` returned (``G`` is ``[B, T, H, K]``).
        do: Output cotangent ``[B, T, H, V]``, contiguous.
        delta: δ_t = do_t·o_t ``[B, T, H]`` fp32 (normalized only), or `None`.
        dht: Cotangent of S_T ``[N, H, K, V]`` fp32, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]`` fp32 (normalized only), or `None`.
        dot_low: Round ``tl.dot`` operands to the input dtype.

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
    gla_parallel_bwd_kernel_dh0[grid](
        q=x.q, G=fwd.G, Z=fwd.den, delta=delta, do=do, dht=dht, dzt=dzt, dh0=dh0, dz0=dz0,
        cu_seqlens=fwd.table.cu_seqlens, scale=x.scale, H=H, K=K, V=V, BT=bl.BT, BK=bl.BKS,
        BV=bl.BVS, FEATURE=x.feature, NORMALIZE=x.normalize, USE_DHT=dht is not None,
        DOT_LOW=dot_low,
    )  # fmt: skip
    return dh0, dz0


__all__ = ["gla_parallel_bwd_dh0", "gla_parallel_fwd_h"]
