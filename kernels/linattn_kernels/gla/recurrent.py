# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recurrent form with a vector gate g ``[B, T, H, K]``: forward and backward kernels.

As `linattn_kernels.linear_attn.recurrent`, one program per (sequence, head, V-block) walks the
tokens with a ``[BK, BV]`` fp32 state tile in registers, but the decay is a vector:
S_t = diag(exp(g_t)) S_{t-1} + φ(k_t) v_t^T (z_t likewise). The backward keeps dL/dG per key
dimension, dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm, and dg is its reverse scan per dimension. The
launchers are called by the scalar form's, which keep the autograd Function and the public API.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import Inputs, empty_output, finish_output, forward_outputs
from linattn_kernels.common.blocks import recurrent_blocks
from linattn_kernels.common.division import divide_or_zero
from linattn_kernels.common.feature_maps import feature_map, feature_map_grad
from linattn_kernels.common.loads import load_key_sum, load_tile, store_key_sum, store_tile
from linattn_kernels.common.results import Forward, Gradients


@triton.jit
def _span(cu_seqlens, i_n, T, IS_VARLEN: tl.constexpr):
    """The first and one-past-last token (int64) of sequence ``i_n``."""
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * T
        eos = bos + T
    return bos, eos


@triton.jit
def gla_recurrent_fwd_kernel(
    q, k, v, g, o, den, h0, z0, ht, zt, cu_seqlens,
    scale, eps, T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    STORE_FINAL: tl.constexpr, STORE_DEN: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """o_t = s φ(q_t)^T S_t (/ Z_t), and S_T (z_T) (grid: V-blocks, N·H)."""
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    bos, eos = _span(cu_seqlens, i_nh // H, T, IS_VARLEN)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    i_th = bos * H + i_nh % H

    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_z = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_H0:
        b_h += load_tile(h0, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_z += load_key_sum(z0, i_nh, K, o_k, m_k)
    for _ in range(eos - bos):
        b_q = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)  # [BK]
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)  # [BK]
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)  # [BV]
        b_q = tl.where(m_k, feature_map(b_q, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        # One factor per key dimension; padded lanes load g = 0 and multiply zeros.
        b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))  # [BK]
        b_h = b_h * b_a[:, None]
        b_h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_q[:, None] * b_h, axis=0)  # [BV]
        if NORMALIZE:
            b_z = b_z * b_a + b_k
            b_den = tl.sum(b_q * b_z, axis=0) + eps
            b_o = divide_or_zero(b_o, b_den)
            if STORE_DEN:
                tl.store(den + i_th, b_den, mask=i_v == 0)
        tl.store(o + i_th * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
        i_th += H

    if STORE_FINAL:
        store_tile(ht, b_h, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(zt, b_z, i_nh, K, o_k, m_k, i_v)


@triton.jit
def gla_recurrent_bwd_kernel_dq(
    q, k, v, g, do, den, dden, h0, z0, dht, dzt, dq, dgq, dgt, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    USE_DHT: tl.constexpr, USE_DZT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Forward in time: S_t (z_t), this V-block's dq and q̃ ⊙ dq̃ (grid: V-blocks, N·H)."""
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    bos, eos = _span(cu_seqlens, i_nh // H, T, IS_VARLEN)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    # The key-sum terms are V-independent: only the first V-block adds them.
    b_first = (i_v == 0).to(tl.float32)
    i_th = bos * H + i_nh % H

    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_z = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_H0:
        b_h += load_tile(h0, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_z += load_key_sum(z0, i_nh, K, o_k, m_k)
    for _ in range(eos - bos):
        b_x = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = tl.where(m_k, feature_map(b_x, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))
        b_h = b_h * b_a[:, None]
        b_h += b_k[:, None] * b_v[None, :]
        if NORMALIZE:
            b_z = b_z * b_a + b_k
            b_do = divide_or_zero(b_do, tl.load(den + i_th))
        # d q̃_t = S_t dN_t (+ dZ_t z_t): [BK]
        b_dq = tl.sum(b_h * b_do[None, :], axis=1)
        if NORMALIZE:
            b_dq += b_first * tl.load(dden + i_th) * b_z
        # q̃_t ⊙ d q̃_t per dimension, this V-block's share of dL/dG_t.
        tl.store(dgq + (i_v * TOTAL + i_th) * K + o_k, b_q * b_dq, mask=m_k)
        b_dq = b_dq * scale * feature_map_grad(b_x, FEATURE)
        tl.store(dq + (i_v * TOTAL + i_th) * K + o_k, b_dq, mask=m_k)
        i_th += H

    # S_T,m = e^{G_T,m}(...): dimension m's <dS_T, S_T> + dz_T z_T.
    b_dgt = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_DHT:
        b_dgt += tl.sum(load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v) * b_h, axis=1)
    if USE_DZT:
        b_dgt += b_first * load_key_sum(dzt, i_nh, K, o_k, m_k) * b_z
    tl.store(dgt + (i_v * tl.num_programs(1) + i_nh) * K + o_k, b_dgt, mask=m_k)


@triton.jit
def gla_recurrent_bwd_kernel_dkv(
    q, k, v, g, do, den, dden, dht, dzt, dgq, dgt, dk, dv, dg, dh0, dz0, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, NORMALIZE: tl.constexpr, STORE_DH0: tl.constexpr,
    USE_DHT: tl.constexpr, USE_DZT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Backward in time: dS_t, this V-block's dk, dv and dg, and dS_0 (grid: V-blocks, N·H)."""
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    bos, eos = _span(cu_seqlens, i_nh // H, T, IS_VARLEN)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    b_first = (i_v == 0).to(tl.float32)
    i_th = (eos - 1) * H + i_nh % H

    b_dh = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    b_dz = tl.zeros([BK], dtype=tl.float32)  # [BK]
    if USE_DHT:
        b_dh += load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v)
    if USE_DZT:
        b_dz += load_key_sum(dzt, i_nh, K, o_k, m_k)
    # dg_t,m = Σ_{i >= t} dL/dG_i,m: a carry per dimension, accumulated walking backwards.
    b_dg = tl.load(dgt + (i_v * tl.num_programs(1) + i_nh) * K + o_k, mask=m_k, other=0.0)

    for _ in range(eos - bos):
        b_x = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_q = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = tl.where(m_k, feature_map(b_q, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_x, FEATURE), 0.0)
        if NORMALIZE:
            b_do = divide_or_zero(b_do, tl.load(den + i_th))
            b_dz += tl.load(dden + i_th) * b_q
        # dS_t = diag(a_{t+1}) dS_{t+1} + q̃_t dN_t^T
        b_dh += b_q[:, None] * b_do[None, :]
        b_dk = tl.sum(b_dh * b_v[None, :], axis=1)  # [BK]
        if NORMALIZE:
            b_dk += b_first * b_dz
        b_dv = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV]
        b_dgq = tl.load(dgq + (i_v * TOTAL + i_th) * K + o_k, mask=m_k, other=0.0)
        b_dg += b_dgq - b_k * b_dk
        tl.store(dg + (i_v * TOTAL + i_th) * K + o_k, b_dg, mask=m_k)
        b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))
        b_dh = b_dh * b_a[:, None]
        b_dz = b_dz * b_a
        p_dk = dk + (i_v * TOTAL + i_th) * K + o_k
        tl.store(p_dk, b_dk * feature_map_grad(b_x, FEATURE), mask=m_k)
        tl.store(dv + i_th * V + o_v, b_dv.to(dv.dtype.element_ty), mask=m_v)
        i_th -= H

    if STORE_DH0:
        store_tile(dh0, b_dh, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            store_key_sum(dz0, b_dz, i_nh, K, o_k, m_k, i_v)


def gla_recurrent_fwd(x: Inputs, *, for_backward: bool = False) -> Forward:
    """Run the vector-gate forward kernel (``x.g`` is ``[B, T, H, K]``).

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`) with a 4-D g.
        for_backward: Also keep the fp32 output and the denominators (normalized only).
            Default: `False`.

    Returns:
        The `Forward`, as `linattn_kernels.linear_attn.recurrent.recurrent_fwd`'s.
    """
    T, H, K, V, N = x.T, x.H, x.K, x.V, x.N
    device, dtype = x.q.device, x.q.dtype
    BK, BV, num_warps = recurrent_blocks(K, V)
    keep = x.normalize and for_backward
    o, den = forward_outputs(x, unrounded=keep)
    ht = zt = None
    if x.output_final_state:
        ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
        zt = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
    gla_recurrent_fwd_kernel[(triton.cdiv(V, BV), N * H)](
        q=x.q, k=x.k, v=x.v, g=x.g, o=o, den=den, h0=x.h0, z0=x.z0, ht=ht, zt=zt,
        cu_seqlens=x.cu_seqlens, scale=x.scale, eps=x.eps, T=T, H=H, K=K, V=V, BK=BK, BV=BV,
        FEATURE=x.feature, NORMALIZE=x.normalize, USE_H0=x.h0 is not None,
        STORE_FINAL=x.output_final_state, STORE_DEN=keep, IS_VARLEN=x.cu_seqlens is not None,
        num_warps=num_warps,
    )  # fmt: skip
    return Forward(o=finish_output(o, dtype), ht=ht, zt=zt, o_acc=o if keep else None, den=den)


def gla_recurrent_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the two vector-gate backward kernels; sum the V-blocks' partial dq, dk and dg.

    Args:
        x: The prepared inputs of the forward pass (4-D g).
        fwd: What `gla_recurrent_fwd` returned (with ``for_backward`` when normalized).
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Cotangent of S_T ``[N, H, K, V]``, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g ``[B, T, H, K]``, S_0 and z_0 (fp32).
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    device, dtype = x.q.device, x.q.dtype
    BK, BV, num_warps = recurrent_blocks(K, V)
    NV = triton.cdiv(V, BV)
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    dht = None if dht is None else dht.contiguous()
    dzt = dzt.contiguous() if x.normalize and dzt is not None else None
    dden = None
    if x.normalize:
        assert fwd.o_acc is not None
        assert fwd.den is not None
        # dZ_t = -(do_t · o_t) / Z_t, and 0 where Z_t vanishes (as the kernels' `vanishes`).
        zero = fwd.den.abs() < torch.finfo(torch.float32).tiny
        dden = torch.where(
            zero, 0.0, -(do.float() * fwd.o_acc).sum(-1) / torch.where(zero, 1.0, fwd.den)
        ).contiguous()
    f32 = torch.float32
    dq = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dk = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dgq = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dg = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dgt = torch.empty(NV, N, H, K, dtype=f32, device=device)
    dv = empty_output((B, T, H, V), dtype, device)
    dh0 = torch.empty(N, H, K, V, dtype=f32, device=device) if x.h0 is not None else None
    dz0 = torch.empty(N, H, K, dtype=f32, device=device) if x.z0 is not None else None
    common = {
        "q": x.q, "k": x.k, "v": x.v, "g": x.g, "do": do, "den": fwd.den, "dden": dden,
        "dht": dht, "dzt": dzt, "dgq": dgq, "dgt": dgt, "cu_seqlens": x.cu_seqlens,
        "scale": x.scale, "T": T, "TOTAL": B * T * H, "H": H, "K": K, "V": V, "BK": BK, "BV": BV,
        "FEATURE": x.feature, "NORMALIZE": x.normalize,
        "USE_DHT": dht is not None, "USE_DZT": dzt is not None,
        "IS_VARLEN": x.cu_seqlens is not None, "num_warps": num_warps,
    }  # fmt: skip
    grid = (NV, N * H)
    gla_recurrent_bwd_kernel_dq[grid](h0=x.h0, z0=x.z0, dq=dq, USE_H0=x.h0 is not None, **common)
    gla_recurrent_bwd_kernel_dkv[grid](
        dk=dk, dv=dv, dg=dg, dh0=dh0, dz0=dz0, STORE_DH0=x.h0 is not None, **common
    )  # fmt: skip
    return Gradients(
        dq=dq.sum(0).to(dtype),
        dk=dk.sum(0).to(dtype),
        dv=finish_output(dv, dtype),
        dg=dg.sum(0),
        dh0=dh0,
        dz0=dz0,
    )


__all__ = ["gla_recurrent_bwd", "gla_recurrent_fwd"]
