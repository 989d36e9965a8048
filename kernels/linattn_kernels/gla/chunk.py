# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Chunked form with a vector gate g ``[B, T, H, K]``: per-chunk kernels and host launchers.

The chunk states come from `linattn_kernels.gla.chunk_h`. Inside a chunk the decay differs per
key dimension, so the intra-chunk score is A_tj = Σ_m q̃_tm k̃_jm exp(G_tm - G_jm), built as a
``[BT, BT, BKA]`` broadcast product summed over its last axis (two multiplies per m and K - 1
additions, the count the error bound charges), each weight the exp of a masked difference of
chunk-local cumulative sums (exponent <= 0, -inf above the diagonal). It is never factored into
(q̃ ⊙ e^G)(k̃ ⊙ e^-G)^T, which overflows once |G| > 88 inside a chunk. The backward mirrors this
for dq̃, dk̃ (sums of the same broadcast over j or t) and keeps dL/dG per dimension; dg is its
reverse scan per (sequence, head, dimension).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import Inputs, empty_output, finish_output, forward_outputs
from linattn_kernels.common.blocks import chunk_block, chunk_num_warps, dot_low
from linattn_kernels.common.decay import vector_chunk_decay
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
from linattn_kernels.common.results import Forward, Gradients
from linattn_kernels.common.tables import chunk_bounds, chunk_table, sequence_bounds
from linattn_kernels.gla.chunk_h import gla_chunk_bwd_dh, gla_chunk_fwd_h


def score_block(K: int, chunk_size: int) -> int:
    """The K tile of the ``[BT, BT, BKA]`` intra-chunk products: at most 16384 elements, >= 16.

    (16 is the least ``tl.dot`` accepts for the state products that share the tile.)
    """
    return min(chunk_block(K), max(16, 16384 // (chunk_size * chunk_size)))


@triton.jit
def gla_chunk_fwd_kernel_o(
    q, k, v, g, h, hz, o, den, cu_seqlens, chunk_indices, scale, eps,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """o (and D) of one chunk: s ((φ(Q) ⊙ e^G) S + A V), A with per-m weights (grid: NC, V, H)."""
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
    # [BT, BT, 1]: query t (axis 0) sees key j (axis 1) when j <= t.
    m_causal = (o_i[:, None] >= o_i[None, :])[:, :, None]

    b_o = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    b_A = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT]
    b_qz = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_G, _ = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)  # [BT, BK]
        # [BT, BT, BK]: w_tjm = exp(G_tm - G_jm), masked to -inf before the exp.
        b_w = tl.exp(tl.where(m_causal, b_G[:, None, :] - b_G[None, :, :], float("-inf")))
        b_A += tl.sum(b_q[:, None, :] * b_k[None, :, :] * b_w, axis=2)
        # exp(G_tm) <= 1: query t reads the chunk-start state per dimension.
        b_qg = b_q * tl.exp(tl.where(m_t[:, None], b_G, float("-inf")))  # [BT, BK]
        b_h = load_tile(h, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_o += tl.dot(operand(b_qg, DOT_LOW, DT), operand(b_h, DOT_LOW, DT))
        if NORMALIZE:
            b_qz += tl.sum(b_qg * load_key_sum(hz, i_c * H + i_h, K, o_k, m_k)[None, :], axis=1)
    b_v = load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_o += tl.dot(operand(b_A, DOT_LOW, DT), operand(b_v, DOT_LOW, DT))
    b_o = b_o * scale
    if NORMALIZE:
        b_den = scale * (b_qz + tl.sum(b_A, axis=1)) + eps
        b_o = divide_or_zero(b_o, b_den[:, None])
        m_den = m_t & (tl.zeros([BT], dtype=tl.int64) + i_v == 0)
        store_per_token(den, b_den, rows, m_den, i_h, H)
    store_rows(o, b_o, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def gla_chunk_bwd_kernel_dv(
    q, k, g, do, den, dh, dv, cu_seqlens, chunk_indices, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dv of one chunk: (φ(K) ⊙ e^{G_L - G}) dS + s (A^T / D) dO (grid: NC, V, H)."""
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
    # [BT, BT, 1], transposed: key j (axis 0) is seen by query t (axis 1) when t >= j.
    m_causal = (o_i[:, None] <= o_i[None, :])[:, :, None]

    b_At = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT], A^T
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)
        # [BT, BT, BK]: w_tjm at [j, t, m].
        b_w = tl.exp(tl.where(m_causal, b_G[None, :, :] - b_G[:, None, :], float("-inf")))
        b_At += tl.sum(b_k[:, None, :] * b_q[None, :, :] * b_w, axis=2)
        b_kg = b_k * tl.exp(tl.where(m_t[:, None], b_GL[None, :] - b_G, float("-inf")))
        b_dh = load_tile(dh, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_dv += tl.dot(operand(b_kg, DOT_LOW, DT), operand(b_dh, DOT_LOW, DT))
    # Column t of A^T carries s (/ D_t when normalized): the weight of do_t.
    b_f = tl.full([BT], scale, dtype=tl.float32)  # [BT]
    if NORMALIZE:
        b_f = b_f * reciprocal(load_per_token(den, rows, m_t, i_h, H))
    b_Pt = b_At * b_f[None, :]
    b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
    b_dv += tl.dot(operand(b_Pt, DOT_LOW, DT), operand(b_do, DOT_LOW, DT))
    store_rows(dv, b_dv, rows, m_t, i_h, H, V, o_v, m_v)


@triton.jit
def gla_chunk_bwd_kernel_dqk(
    q, k, v, g, h, hz, do, den, dd, dh, dhz, dq, dk, dG, cu_seqlens, chunk_indices, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, dk and dL/dG per dimension of one chunk and K block (grid: NC, K-blocks, H)."""
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
    m_causal = o_i[:, None] >= o_i[None, :]  # [BT, BT]

    b_dP = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT] do_t · v_j
    b_dqs = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK] do_t S^T, state part of dq
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
        # With z as an extra value column: dP_tj = do_t · v_j / D_t + dd_t.
        b_r = reciprocal(load_per_token(den, rows, m_t, i_h, H))
        b_dd = load_per_token(dd, rows, m_t, i_h, H)
        b_hz = load_key_sum(hz, i_c * H + i_h, K, o_k, m_k)
        b_dhz = load_key_sum(dhz, i_c * H + i_h, K, o_k, m_k)
        b_dP = b_dP * b_r[:, None] + b_dd[:, None]
        b_dqs = b_dqs * b_r[:, None] + b_dd[:, None] * b_hz[None, :]
        b_dks = b_dks + b_dhz[None, :]
    b_G, b_GL = vector_chunk_decay(g, rows, m_t, i_h, H, K, o_k, m_k, BT)  # [BT, BK], [BK]
    b_dqs = b_dqs * tl.exp(tl.where(m_t[:, None], b_G, float("-inf")))
    b_dks = b_dks * tl.exp(tl.where(m_t[:, None], b_GL[None, :] - b_G, float("-inf")))
    b_dS = tl.where(m_causal, b_dP, 0.0) * scale  # [BT, BT]
    # [BT, BT, BK]: w_tjm, query t on axis 0, key j on axis 1.
    b_w = tl.exp(tl.where(m_causal[:, :, None], b_G[:, None, :] - b_G[None, :, :], float("-inf")))
    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_k, b_kx = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    # dq̃_tm = s Σ_j dP_tj k̃_jm w_tjm (+ state), dk̃_jm = s Σ_t dP_tj q̃_tm w_tjm (+ state).
    b_dq = b_dqs * scale + tl.sum(b_dS[:, :, None] * b_k[None, :, :] * b_w, axis=1)
    b_dk = b_dks + tl.sum(b_dS[:, :, None] * b_q[:, None, :] * b_w, axis=0)
    # dL/dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm: this program owns dimensions o_k outright.
    store_rows(dG, b_q * b_dq - b_k * b_dk, rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def gla_chunk_bwd_kernel_dg(dG, fin, dg, cu_seqlens, H, K, BT: tl.constexpr, BK: tl.constexpr):
    """dg_sm = Σ_{t >= s} dL/dG_tm per sequence and dimension, a true reverse scan.

    Grid: N·H, K-blocks. The carry starts at the final-state term of each dimension.
    """
    i_nh = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos, L = sequence_bounds(cu_seqlens, i_n)
    NT = tl.cdiv(L, BT)
    o_i = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    # [BT, BT, 1]: row s sums the entries t >= s.
    m_suffix = (o_i[None, :] >= o_i[:, None])[:, :, None]
    b_carry = load_key_sum(fin, i_nh, K, o_k, m_k)  # [BK]
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        o_t = i_t * BT + o_i
        m_t = o_t < L
        rows = bos + o_t
        b_dG = load_rows(dG, rows, m_t, i_h, H, K, o_k, m_k)  # [BT, BK]
        # A masked row sum, not total - prefix, keeps each suffix accurate (docs/bug-classes.md).
        b_dg = tl.sum(tl.where(m_suffix, b_dG[None, :, :], 0.0), axis=1) + b_carry[None, :]
        store_rows(dg, b_dg, rows, m_t, i_h, H, K, o_k, m_k)
        b_carry = b_carry + tl.sum(b_dG, axis=0)


def gla_chunk_fwd(x: Inputs, *, chunk_size: int) -> Forward:
    """Run the vector-gate forward: chunk states, then every chunk's output.

    Args:
        x: Prepared inputs with g ``[B, T, H, K]``.
        chunk_size: Tokens per chunk (checked by the caller).

    Returns:
        The `Forward`, as `linattn_kernels.linear_attn.chunk.chunk_fwd`'s.
    """
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, chunk_size, device)
    low = dot_low(dtype)
    states = gla_chunk_fwd_h(x, table=table, store_final=x.output_final_state, dot_low=low)
    BV = chunk_block(V)
    o, den = forward_outputs(x, unrounded=x.normalize)
    gla_chunk_fwd_kernel_o[(table.num_chunks, triton.cdiv(V, BV), H)](
        q=x.q, k=x.k, v=x.v, g=x.g, h=states.h, hz=states.hz, o=o, den=den,
        cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=chunk_size, BK=score_block(K, chunk_size), BV=BV, FEATURE=x.feature,
        NORMALIZE=x.normalize, DOT_LOW=low, num_warps=chunk_num_warps(chunk_size),
    )  # fmt: skip
    return Forward(
        o=finish_output(o, dtype), ht=states.ht, zt=states.zt, o_acc=o if x.normalize else None,
        den=den, table=table,
    )  # fmt: skip


def gla_chunk_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the vector-gate backward: states, dS, dv, dq/dk/dL/dG, then the dg scan.

    Args:
        x: The prepared inputs of the forward pass (4-D g).
        fwd: What `gla_chunk_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Final-state cotangent ``[N, H, K, V]``, or `None` (zero).
        dzt: Final key-sum cotangent ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g ``[B, T, H, K]``, S_0 and z_0 (fp32).
    """
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    table = fwd.table
    assert table is not None
    N, NC, BT = table.num_sequences, table.num_chunks, table.chunk_size
    device, dtype = x.q.device, x.q.dtype
    BK, BV = score_block(K, BT), chunk_block(V)
    low = dot_low(dtype)
    f32 = torch.float32
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    use_dht = dht is not None or dzt is not None
    if use_dht:
        dht = torch.zeros(N, H, K, V, dtype=f32, device=device) if dht is None else dht
        dht = dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, dtype=f32, device=device) if dzt is None else dzt
            dzt = dzt.float().contiguous()
    # S is recomputed rather than saved by the forward.
    states = gla_chunk_fwd_h(x, table=table, store_final=use_dht, dot_low=low)
    dd = None
    if x.normalize:
        assert fwd.o_acc is not None
        assert fwd.den is not None
        # dd_t = -(do_t · o_t) / D_t, and 0 where D_t vanishes (as the kernels' `vanishes`).
        zero = fwd.den.abs() < torch.finfo(f32).tiny
        dd = torch.where(
            zero, 0.0, -(do.float() * fwd.o_acc).sum(-1) / torch.where(zero, 1.0, fwd.den)
        ).contiguous()
    grads = gla_chunk_bwd_dh(
        x, table=table, do=do, den=fwd.den, dd=dd, dht=dht, dzt=dzt, dot_low=low
    )  # fmt: skip
    common = {
        "g": x.g, "do": do, "den": fwd.den, "dh": grads.dh, "cu_seqlens": table.cu_seqlens,
        "chunk_indices": table.chunk_indices, "scale": x.scale, "H": H, "K": K, "V": V,
        "BT": BT, "BK": BK, "BV": BV, "FEATURE": x.feature, "NORMALIZE": x.normalize,
        "DOT_LOW": low, "num_warps": chunk_num_warps(BT),
    }  # fmt: skip
    dv = empty_output((B, T, H, V), dtype, device)
    gla_chunk_bwd_kernel_dv[(NC, triton.cdiv(V, BV), H)](q=x.q, k=x.k, dv=dv, **common)
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dG = torch.empty(B, T, H, K, dtype=f32, device=device)
    gla_chunk_bwd_kernel_dqk[(NC, triton.cdiv(K, BK), H)](
        q=x.q, k=x.k, v=x.v, h=states.h, hz=states.hz, dd=dd, dhz=grads.dhz, dq=dq, dk=dk,
        dG=dG, **common,
    )  # fmt: skip
    if use_dht:
        assert states.ht is not None
        assert dht is not None
        # dimension m of S_T carries e^{G_T,m}: Σ_i S_T[m, i] dS_T[m, i] (+ z_T,m dz_T,m).
        fin = (dht * states.ht).sum(dim=-1)
        if x.normalize:
            assert states.zt is not None
            assert dzt is not None
            fin = fin + dzt * states.zt
    else:
        fin = torch.zeros(N, H, K, dtype=f32, device=device)
    dg = torch.empty(B, T, H, K, dtype=f32, device=device)
    BKG = chunk_block(K)
    gla_chunk_bwd_kernel_dg[(N * H, triton.cdiv(K, BKG))](
        dG=dG, fin=fin.contiguous(), dg=dg, cu_seqlens=table.cu_seqlens, H=H, K=K, BT=BT,
        BK=BKG, num_warps=chunk_num_warps(BT),
    )  # fmt: skip
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=grads.dh0, dz0=grads.dz0,
    )  # fmt: skip


__all__ = ["gla_chunk_bwd", "gla_chunk_fwd", "score_block"]
