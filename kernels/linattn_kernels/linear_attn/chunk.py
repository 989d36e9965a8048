# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Chunked causal linear attention (the training path): Triton forward and backward.

The sequence is cut into chunks of ``chunk_size`` tokens that never straddle a sequence boundary.
A sequential pass over chunks carries the state S (and the key sum z) and stores it at every
chunk start (`chunk_h`); a parallel pass then gives each chunk its output as an intra-chunk
masked quadratic plus the contribution of the stored state. Decay weights are exponentials of
differences of chunk-local cumulative sums of g, masked before the exponential. The backward
mirrors this: a reverse pass over chunks for dS (and dz), then parallel per-chunk kernels for dv
and for dq, dk and the decay gradient, and a reverse scan that turns per-token dL/dG into dg.
"""

from __future__ import annotations

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
from linattn_kernels.common.blocks import chunk_block, chunk_num_warps, dot_low
from linattn_kernels.common.decay import chunk_decay, masked_decay
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
from linattn_kernels.common.results import (
    Forward,
    Gradients,
    State,
    final_state,
    save_for_backward,
    saved_for_backward,
)
from linattn_kernels.common.tables import ChunkTable, chunk_bounds, chunk_table, sequence_bounds
from linattn_kernels.gla.chunk import gla_chunk_bwd, gla_chunk_fwd
from linattn_kernels.lifted import LIFTED_MAPS, lifted_attention, refuse_weights
from linattn_kernels.linear_attn.chunk_h import chunk_bwd_dh, chunk_fwd_h

CHUNK_SIZES = (16, 32, 64, 128)
"""The chunk sizes the kernels accept (powers of two, at least the 16 rows ``tl.dot`` needs)."""


@triton.jit
def chunk_fwd_kernel_o(
    q, k, v, g, h, hz, o, den, cu_seqlens, chunk_indices, scale, eps,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, FEATURE: tl.constexpr,
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
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
    m_causal = o_i[:, None] >= o_i[None, :]

    b_o = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    b_A = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT]
    b_qz = tl.zeros([BT], dtype=tl.float32)  # [BT]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_h = load_tile(h, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_qd = operand(b_q, DOT_LOW, DT)
        b_o += tl.dot(b_qd, operand(b_h, DOT_LOW, DT))
        b_A += tl.dot(b_qd, tl.trans(operand(b_k, DOT_LOW, DT)))
        if NORMALIZE:
            b_qz += tl.sum(b_q * load_key_sum(hz, i_c * H + i_h, K, o_k, m_k)[None, :], axis=1)
    if USE_G:
        b_G, _ = chunk_decay(g, rows, m_t, i_h, H, BT)
        b_o = b_o * tl.exp(b_G)[:, None]
        b_qz = b_qz * tl.exp(b_G)
        b_P = tl.where(m_causal, b_A * masked_decay(b_G[:, None], b_G[None, :], m_causal), 0.0)
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
    """dd = -(do · o) / D per token: the cotangent of the denominator D."""
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
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
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
    if USE_G:
        b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)

    b_At = tl.zeros([BT, BT], dtype=tl.float32)  # [BT, BT], A transposed: k_j · q_i
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)  # [BT, BV]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q, _ = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_k, _ = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
        b_At += tl.dot(operand(b_k, DOT_LOW, DT), tl.trans(operand(b_q, DOT_LOW, DT)))
        b_dh = load_tile(dh, i_c * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        if USE_G:
            b_k = b_k * tl.exp(b_GL - b_G)[:, None]
        b_dv += tl.dot(operand(b_k, DOT_LOW, DT), operand(b_dh, DOT_LOW, DT))
    if USE_G:
        b_Pt = tl.where(m_causal, b_At * masked_decay(b_G[None, :], b_G[:, None], m_causal), 0.0)
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
    USE_G: tl.constexpr, NORMALIZE: tl.constexpr, DOT_LOW: tl.constexpr,
):  # fmt: skip
    """dq, dk and this K block's partial dL/dG of one chunk (grid: NC, K-blocks, H)."""
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
    if USE_G:
        b_G, b_GL = chunk_decay(g, rows, m_t, i_h, H, BT)
        b_dqs = b_dqs * tl.exp(b_G)[:, None]
        b_dks = b_dks * tl.exp(b_GL - b_G)[:, None]
        b_dS = tl.where(m_causal, b_dP * masked_decay(b_G[:, None], b_G[None, :], m_causal), 0.0)
    else:
        b_dS = tl.where(m_causal, b_dP, 0.0)
    b_dS = b_dS * scale
    b_q, b_qx = load_features(q, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_k, b_kx = load_features(k, rows, m_t, i_h, H, K, o_k, m_k, FEATURE)  # [BT, BK]
    b_dS_op = operand(b_dS, DOT_LOW, DT)
    # dq~ and dk~: gradients with respect to the features φ(q), φ(k).
    b_dq = b_dqs * scale + tl.dot(b_dS_op, operand(b_k, DOT_LOW, DT))
    b_dk = b_dks + tl.dot(tl.trans(b_dS_op), operand(b_q, DOT_LOW, DT))
    if USE_G:
        # dL/dG_t = φ(q_t)·dφ(q_t) - φ(k_t)·dφ(k_t), a partial sum over this K block.
        b_dG = tl.sum(b_q * b_dq - b_k * b_dk, axis=1)
        tl.store(dgp + (i_k * T_total + rows) * H + i_h, b_dG, mask=m_t)
    store_rows(dq, b_dq * feature_map_grad(b_qx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)
    store_rows(dk, b_dk * feature_map_grad(b_kx, FEATURE), rows, m_t, i_h, H, K, o_k, m_k)


@triton.jit
def chunk_bwd_kernel_dg(dgp, fin, dg, cu_seqlens, T_total, H, NK, BT: tl.constexpr):
    """dg_s = Σ_{t >= s} dL/dG_t within each sequence, as a true reverse scan."""
    i_nh = tl.program_id(0).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos, L = sequence_bounds(cu_seqlens, i_n)
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
        # A masked row sum, not total - prefix, keeps each suffix accurate (docs/bug-classes.md).
        b_dg = tl.sum(tl.where(m_suffix, b_dG[None, :], 0.0), axis=1) + b_carry
        store_per_token(dg, b_dg, rows, m_t, i_h, H)
        b_carry = b_carry + tl.sum(b_dG, axis=0)


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


def chunk_fwd(x: Inputs, *, chunk_size: int) -> Forward:
    """Run the forward pass: the state at every chunk start, then every chunk's output.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).
        chunk_size: Tokens per chunk, one of `CHUNK_SIZES`.

    Returns:
        The output in the input dtype and the final state, plus what `chunk_bwd` reads: the
        fp32 output and the denominators (normalized only) and the chunk table.
    """
    if x.g is not None and x.g.ndim == 4:
        return gla_chunk_fwd(x, chunk_size=chunk_size)
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, chunk_size, device)
    low = dot_low(dtype)
    states = chunk_fwd_h(x, table=table, store_final=x.output_final_state, dot_low=low)
    BV = chunk_block(V)
    # The backward takes do · o from the unrounded output.
    o, den = forward_outputs(x, unrounded=x.normalize)
    chunk_fwd_kernel_o[(table.num_chunks, triton.cdiv(V, BV), H)](
        q=x.q, k=x.k, v=x.v, g=x.g, h=states.h, hz=states.hz, o=o, den=den,
        cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=chunk_size, BK=chunk_block(K), BV=BV, FEATURE=x.feature,
        USE_G=x.g is not None, NORMALIZE=x.normalize, DOT_LOW=low,
        num_warps=chunk_num_warps(chunk_size),
    )  # fmt: skip
    return Forward(
        o=finish_output(o, dtype), ht=states.ht, zt=states.zt, o_acc=o if x.normalize else None,
        den=den, table=table,
    )  # fmt: skip


def chunk_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the backward pass: recompute the chunk states, then dS, dv, dq and dk, and dg.

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `chunk_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Final-state cotangent ``[N, H, K, V]``, or `None` (zero).
        dzt: Final key-sum cotangent ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g, S_0 and z_0 (fp32).
    """
    if x.g is not None and x.g.ndim == 4:
        return gla_chunk_bwd(x, fwd, do, dht, dzt)
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    table = fwd.table
    assert table is not None
    N, NC, BT = table.num_sequences, table.num_chunks, table.chunk_size
    device, dtype = x.q.device, x.q.dtype
    BK, BV = chunk_block(K), chunk_block(V)
    NK = triton.cdiv(K, BK)
    use_g, low = x.g is not None, dot_low(dtype)
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    use_dht = dht is not None or dzt is not None
    if use_dht:
        dht = torch.zeros(N, H, K, V, dtype=torch.float32, device=device) if dht is None else dht
        dht = dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, dtype=torch.float32, device=device) if dzt is None else dzt
            dzt = dzt.float().contiguous()
    # S is recomputed rather than saved by the forward.
    states = chunk_fwd_h(x, table=table, store_final=use_g and use_dht, dot_low=low)
    dd = None
    if x.normalize:
        dd = torch.empty(B, T, H, dtype=torch.float32, device=device)
        chunk_bwd_kernel_dd[(triton.cdiv(B * T, BT), H)](
            o=fwd.o_acc, do=do, den=fwd.den, dd=dd, T_total=B * T, H=H, V=V, BT=BT, BV=BV,
            num_warps=chunk_num_warps(BT),
        )  # fmt: skip
    grads = chunk_bwd_dh(x, table=table, do=do, den=fwd.den, dd=dd, dht=dht, dzt=dzt, dot_low=low)
    common = {
        "g": x.g, "do": do, "den": fwd.den, "dh": grads.dh, "cu_seqlens": table.cu_seqlens,
        "chunk_indices": table.chunk_indices, "scale": x.scale, "H": H, "K": K, "V": V,
        "BT": BT, "BK": BK, "BV": BV, "FEATURE": x.feature, "USE_G": use_g,
        "NORMALIZE": x.normalize, "DOT_LOW": low, "num_warps": chunk_num_warps(BT),
    }  # fmt: skip
    dv = empty_output((B, T, H, V), dtype, device)
    chunk_bwd_kernel_dv[(NC, triton.cdiv(V, BV), H)](q=x.q, k=x.k, dv=dv, **common)
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dgp = torch.empty(NK, B * T, H, dtype=torch.float32, device=device) if use_g else None
    chunk_bwd_kernel_dqk[(NC, NK, H)](
        q=x.q, k=x.k, v=x.v, h=states.h, hz=states.hz, dd=dd, dhz=grads.dhz, dq=dq, dk=dk,
        dgp=dgp, T_total=B * T, **common,
    )  # fmt: skip
    dg = None
    if use_g:
        if use_dht:
            assert states.ht is not None
            assert dht is not None
            fin = (dht * states.ht).sum(dim=(-2, -1))
            if x.normalize:
                assert states.zt is not None
                assert dzt is not None
                fin = fin + (dzt * states.zt).sum(dim=-1)
        else:
            fin = torch.zeros(N, H, dtype=torch.float32, device=device)
        dg = torch.empty(B, T, H, dtype=torch.float32, device=device)
        chunk_bwd_kernel_dg[(N * H,)](
            dgp=dgp, fin=fin.contiguous(), dg=dg, cu_seqlens=table.cu_seqlens, T_total=B * T,
            H=H, NK=NK, BT=BT, num_warps=chunk_num_warps(BT),
        )  # fmt: skip
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=grads.dh0, dz0=grads.dz0,
    )  # fmt: skip


class ChunkLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `chunk_fwd`, keeps its result, runs `chunk_bwd`."""

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
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Tensors are passed beside ``x`` (which holds the same ones) so autograd tracks them."""
        fwd = chunk_fwd(x, chunk_size=chunk_size)
        save_for_backward(ctx, x, fwd)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for the options, absent inputs)."""
        x, fwd = saved_for_backward(ctx)
        return None, *chunk_bwd(x, fwd, do, dht, dzt), None


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
    initial_state: State | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = 64,
    feature_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention in the chunked form, differentiable in every tensor input.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay (<= 0): ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension: row m of the state decays
            by exp(g_t,m)), or `None` for no decay. Default: `None`.
        scale: The scale s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)^T z_t + eps; a row whose denominator is exactly 0
            returns 0. Default: `False`.
        eps: Denominator offset, added in fp32; must be 0 unless normalized. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel; or
            a lifted map ``"taylor2"``, ``"rebased"`` or ``"favor+"`` (F = 1 + K + K², K² or
            m features, at most 256), applied by `linattn_kernels.lifted.lifted_attention`
            in its own kernel before this form runs on fp32 features (the state and
            initial_state then have F rows; the scale of taylor2 and rebased multiplies q
            before φ). Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Return the final state. Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1); the state restarts at
            each boundary and empty sequences are allowed. Default: `None`.
        chunk_size: Tokens per chunk, a power of two in [16, 128]. Default: `64`.
        feature_weights: The projection W ``[m, K]`` of ``"favor+"`` (on q's device; it gets no
            gradient); must be `None` for every other map. Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``, else S_T ``[N, H, K, V]`` fp32, or ``(S_T, z_T)`` when
        normalized.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if feature_map in LIFTED_MAPS:
        return lifted_attention(
            chunked_linear_attention, q, k, v, g, scale=scale, normalize=normalize, eps=eps,
            feature_map=feature_map, feature_weights=feature_weights,
            initial_state=initial_state, output_final_state=output_final_state,
            cu_seqlens=cu_seqlens, chunk_size=chunk_size,
        )  # fmt: skip
    refuse_weights(feature_map, feature_weights)
    chunk_size = check_chunk_size(chunk_size)
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map=feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    o, ht, zt = ChunkLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0, chunk_size)
    return o, final_state(x, ht, zt)


def precision_recipe(dtype: torch.dtype, *, chunk_size: int = 64) -> dict[str, object]:
    """Describe how the kernels round for inputs of ``dtype`` in the current mode.

    The result is the keyword arguments of ``linattn_verify.recipe.PrecisionRecipe``. Compiled
    on CUDA, dots accumulate on tensor cores (``mma``), fp32 operands go in as tf32 and fp32
    division is ``div.full``. Compiled with bf16 inputs every dot operand is bf16, which rounds
    φ(q), φ(k), decayed keys, the stored state, P and dS: at most three such roundings meet any
    one product term, forward or backward. Under the interpreter dots and division are IEEE
    fp32 and no intermediate is rounded.

    A vector gate (g ``[B, T, H, K]``, `linattn_kernels.gla`) takes the same roundings per term
    (its scores are elementwise products summed over K, docs/error-model.md §2.7), so one
    recipe describes both gates.

    A lifted feature map (`linattn_kernels.lifted`) runs the fp32 path on fp32 features and
    rounds o once: the recipe of float32, exactly. For compiled bf16 inputs the bf16 recipe
    returned here over-covers it (three bf16 casts per term against at most four tf32 operand
    roundings); see lifted/README.md, "Precision recipes".

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
    low = dot_low(dtype)
    return {
        "form": "chunk",
        "chunk_size": chunk_size,
        "accumulation": "ieee" if interpreting else "mma",
        "dot_precision": "ieee" if interpreting or low else "tf32",
        "dots_on_path": 2,
        "intermediate_dtype": "input" if low else None,
        "casts_on_path": 3 if low else 0,
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
