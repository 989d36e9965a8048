# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recurrent (token-by-token) form of causal linear attention, forward and backward.

One program per (sequence, head, V-block) keeps a ``[BK, BV]`` fp32 state tile (and the fp32
key sum z ``[BK]``) in registers and walks the sequence one token at a time, O(T·K·V) work, no
``tl.dot``. The backward pass is two kernels: a forward-time pass that recomputes the states
and gives dq (and the q-part of dL/dG), and a reverse-time pass over the state cotangent that
gives dk, dv, d S_0 (d z_0) and dg as a running reverse sum. The maths is in the README.

The constexpr ``GATE`` picks the decay: 0 none, 1 a scalar g ``[B, T, H]`` (one factor per token
scales the whole tile), 2 a vector g ``[B, T, H, K]`` (row m of the tile decays by its own
exp(g_t,m), and dL/dG and dg stay per key dimension). Only the given gate's branches compile.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import (
    INPUT_DTYPES,
    VECTOR_GATE,
    Inputs,
    empty_output,
    finish_output,
    forward_outputs,
    prepare,
)
from linattn_kernels.common.blocks import recurrent_blocks
from linattn_kernels.common.division import divide_or_zero
from linattn_kernels.common.feature_maps import feature_map, feature_map_grad
from linattn_kernels.common.loads import load_key_sum, load_tile, store_key_sum, store_tile
from linattn_kernels.common.results import (
    Forward,
    Gradients,
    State,
    final_state,
    save_for_backward,
    saved_for_backward,
)
from linattn_kernels.lifted import LIFTED_MAPS, lifted_attention, refuse_weights


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
def _initial_state(
    h0, z0, i_nh, K, V, o_k, o_v, m_k, m_v,
    USE_H0: tl.constexpr, NORMALIZE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):  # fmt: skip
    """The fp32 state tile [BK, BV] and key sum [BK] to start from: S_0 (z_0), or zeros."""
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    b_z = tl.zeros([BK], dtype=tl.float32)
    if USE_H0:
        b_h += load_tile(h0, i_nh, K, V, o_k, o_v, m_k, m_v)
        if NORMALIZE:
            b_z += load_key_sum(z0, i_nh, K, o_k, m_k)
    return b_h, b_z


@triton.jit
def recurrent_fwd_kernel(
    q, k, v, g, o, den, h0, z0, ht, zt, cu_seqlens,
    scale, eps, T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, GATE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
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
    # Row of (token, head) in the [B*T, H] layout; an int64 tensor, so offsets stay 64-bit.
    i_th = bos * H + i_nh % H

    # [BK, BV], [BK]
    b_h, b_z = _initial_state(h0, z0, i_nh, K, V, o_k, o_v, m_k, m_v, USE_H0, NORMALIZE, BK, BV)
    for _ in range(eos - bos):
        # The per-token loop spells its loads out: under the interpreter every device-function
        # call costs a re-patch of triton.language, T times per program here. Loads become fp32
        # at once: bf16 arithmetic is wrong under the interpreter. [BK], [BK], [BV]
        b_q = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        # Padding lanes are zeroed after φ: elu1(0) = 1 would otherwise leak into the sums.
        b_q = tl.where(m_k, feature_map(b_q, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        if GATE == 1:
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_h = b_h * b_a
            b_z = b_z * b_a
        elif GATE == 2:
            # One factor per key dimension; padded lanes load g = 0 and multiply zeros. [BK]
            b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))
            b_h = b_h * b_a[:, None]
            b_z = b_z * b_a
        b_h += b_k[:, None] * b_v[None, :]
        # [BV]
        b_o = tl.sum(b_q[:, None] * b_h, axis=0)
        if NORMALIZE:
            b_z += b_k
            b_den = tl.sum(b_q * b_z, axis=0) + eps
            # A denominator of exactly 0 returns 0 (semantics.py).
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
def recurrent_bwd_kernel_dq(
    q, k, v, g, do, den, dden, h0, z0, dht, dzt, dq, dgq, dgt, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, GATE: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    USE_DHT: tl.constexpr, USE_DZT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Forward in time: recompute S_t (z_t); this V-block's dq and q̃·dq̃ (grid: V-blocks, N·H).

    q̃·dq̃ is summed over K for a scalar gate and kept per dimension (q̃ ⊙ dq̃) for a vector gate.
    """
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

    # [BK, BV], [BK]
    b_h, b_z = _initial_state(h0, z0, i_nh, K, V, o_k, o_v, m_k, m_v, USE_H0, NORMALIZE, BK, BV)
    for _ in range(eos - bos):
        b_x = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = tl.where(m_k, feature_map(b_x, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        if GATE == 1:
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_h = b_h * b_a
            b_z = b_z * b_a
        elif GATE == 2:
            b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))
            b_h = b_h * b_a[:, None]
            b_z = b_z * b_a
        b_h += b_k[:, None] * b_v[None, :]
        if NORMALIZE:
            b_z += b_k
            b_do = divide_or_zero(b_do, tl.load(den + i_th))
        # d q̃_t = S_t dN_t (+ dZ_t z_t): [BK]
        b_dq = tl.sum(b_h * b_do[None, :], axis=1)
        if NORMALIZE:
            b_dq += b_first * tl.load(dden + i_th) * b_z
        if GATE == 1:
            # q̃_t · d q̃_t, this V-block's share of dL/dG_t.
            tl.store(dgq + i_v * TOTAL + i_th, tl.sum(b_q * b_dq, axis=0))
        elif GATE == 2:
            # q̃_t ⊙ d q̃_t: this V-block's share of dL/dG_t per dimension.
            tl.store(dgq + (i_v * TOTAL + i_th) * K + o_k, b_q * b_dq, mask=m_k)
        b_dq = b_dq * scale * feature_map_grad(b_x, FEATURE)
        tl.store(dq + (i_v * TOTAL + i_th) * K + o_k, b_dq, mask=m_k)
        i_th += H

    if GATE > 0:
        # dS_T reaches G_T through S_T = e^{G_T}(...): <dS_T, S_T> + <dz_T, z_T>, per row m
        # (S_T,m = e^{G_T,m}(...)) for a vector gate. [BK]
        b_dgt = tl.zeros([BK], dtype=tl.float32)
        if USE_DHT:
            b_dgt += tl.sum(load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v) * b_h, axis=1)
        if USE_DZT:
            b_dgt += b_first * load_key_sum(dzt, i_nh, K, o_k, m_k) * b_z
        if GATE == 1:
            tl.store(dgt + i_v * tl.num_programs(1) + i_nh, tl.sum(b_dgt, axis=0))
        else:
            tl.store(dgt + (i_v * tl.num_programs(1) + i_nh) * K + o_k, b_dgt, mask=m_k)


@triton.jit
def recurrent_bwd_kernel_dkv(
    q, k, v, g, do, den, dden, dht, dzt, dgq, dgt, dk, dv, dg, dh0, dz0, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, GATE: tl.constexpr, NORMALIZE: tl.constexpr, STORE_DH0: tl.constexpr,
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
    # Walk backwards from the last token (an empty sequence never loads from there).
    i_th = (eos - 1) * H + i_nh % H

    # dS_T and dz_T seed the reverse recurrence. [BK, BV], [BK]
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)
    b_dz = tl.zeros([BK], dtype=tl.float32)
    if USE_DHT:
        b_dh += load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v)
    if USE_DZT:
        b_dz += load_key_sum(dzt, i_nh, K, o_k, m_k)
    # dg_t = Σ_{i >= t} dL/dG_i, accumulated while walking backwards (per dimension for a
    # vector gate: [BK]).
    if GATE == 2:
        b_dg = tl.load(dgt + (i_v * tl.num_programs(1) + i_nh) * K + o_k, mask=m_k, other=0.0)
    else:
        b_dg = tl.zeros([1], dtype=tl.float32)
        if GATE == 1:
            b_dg += tl.load(dgt + i_v * tl.num_programs(1) + i_nh)

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
        # dS_t = a_{t+1} dS_{t+1} + q̃_t dN_t^T
        b_dh += b_q[:, None] * b_do[None, :]
        # d k̃_t = dS_t v_t (+ dz_t): [BK]; dv_t = dS_t^T k̃_t: [BV]
        b_dk = tl.sum(b_dh * b_v[None, :], axis=1)
        if NORMALIZE:
            b_dk += b_first * b_dz
        b_dv = tl.sum(b_dh * b_k[:, None], axis=0)
        if GATE == 1:
            b_dg += tl.load(dgq + i_v * TOTAL + i_th) - tl.sum(b_k * b_dk, axis=0)
            tl.store(dg + i_v * TOTAL + i_th + tl.arange(0, 1), b_dg)
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_dh = b_dh * b_a
            b_dz = b_dz * b_a
        elif GATE == 2:
            # dS_t = diag(a_{t+1}) dS_{t+1} + ...: the carry and the decay are per dimension.
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


def recurrent_fwd(x: Inputs, *, for_backward: bool = False) -> Forward:
    """Run the forward kernel.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).
        for_backward: Also keep what `recurrent_bwd` reads (normalized only: the fp32 output
            and the denominators). Default: `False`.

    Returns:
        The output in the input dtype and the final state, plus the fp32 output and the
        denominators when normalized ``for_backward``.
    """
    T, H, K, V, N = x.T, x.H, x.K, x.V, x.N
    device, dtype = x.q.device, x.q.dtype
    BK, BV, num_warps = recurrent_blocks(K, V)
    # The backward needs dZ_t = -do_t·o_t / Z_t from the unrounded output.
    keep = x.normalize and for_backward
    o, den = forward_outputs(x, unrounded=keep)
    ht = zt = None
    if x.output_final_state:
        ht = torch.empty(N, H, K, V, dtype=torch.float32, device=device)
        zt = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.normalize else None
    recurrent_fwd_kernel[(triton.cdiv(V, BV), N * H)](
        q=x.q, k=x.k, v=x.v, g=x.g, o=o, den=den, h0=x.h0, z0=x.z0, ht=ht, zt=zt,
        cu_seqlens=x.cu_seqlens, scale=x.scale, eps=x.eps, T=T, H=H, K=K, V=V, BK=BK, BV=BV,
        FEATURE=x.feature, GATE=x.gate, NORMALIZE=x.normalize, USE_H0=x.h0 is not None,
        STORE_FINAL=x.output_final_state, STORE_DEN=keep, IS_VARLEN=x.cu_seqlens is not None,
        num_warps=num_warps,
    )  # fmt: skip
    return Forward(o=finish_output(o, dtype), ht=ht, zt=zt, o_acc=o if keep else None, den=den)


def recurrent_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the two backward kernels; sum the V-blocks' partial dq, dk and dg.

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `recurrent_fwd` returned (with ``for_backward`` when normalized).
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Cotangent of S_T ``[N, H, K, V]``, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g (g's shape), S_0 and z_0 (fp32).
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
        # dZ_t = -(do_t · N_t) / Z_t^2 = -(do_t · o_t) / Z_t, and 0 where Z_t vanishes (o_t := 0;
        # below fp32's smallest normal, as the kernels decide with `vanishes`).
        zero = fwd.den.abs() < torch.finfo(torch.float32).tiny
        dden = torch.where(
            zero, 0.0, -(do.float() * fwd.o_acc).sum(-1) / torch.where(zero, 1.0, fwd.den)
        ).contiguous()
    use_g = x.g is not None
    # dL/dG and dg per token and head, and per key dimension too for a vector gate.
    per_key = (K,) if x.gate == VECTOR_GATE else ()
    dq = torch.empty(NV, B, T, H, K, dtype=torch.float32, device=device)
    dk = torch.empty(NV, B, T, H, K, dtype=torch.float32, device=device)
    dv = empty_output((B, T, H, V), dtype, device)
    dgq = torch.empty(NV, B, T, H, *per_key, dtype=torch.float32, device=device) if use_g else None
    dgt = torch.empty(NV, N, H, *per_key, dtype=torch.float32, device=device) if use_g else None
    dg = torch.empty(NV, B, T, H, *per_key, dtype=torch.float32, device=device) if use_g else None
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=device) if x.h0 is not None else None
    dz0 = torch.empty(N, H, K, dtype=torch.float32, device=device) if x.z0 is not None else None
    common = {
        "q": x.q, "k": x.k, "v": x.v, "g": x.g, "do": do, "den": fwd.den, "dden": dden,
        "dht": dht, "dzt": dzt, "dgq": dgq, "dgt": dgt, "cu_seqlens": x.cu_seqlens,
        "scale": x.scale, "T": T, "TOTAL": B * T * H, "H": H, "K": K, "V": V, "BK": BK, "BV": BV,
        "FEATURE": x.feature, "GATE": x.gate, "NORMALIZE": x.normalize,
        "USE_DHT": dht is not None, "USE_DZT": dzt is not None,
        "IS_VARLEN": x.cu_seqlens is not None, "num_warps": num_warps,
    }  # fmt: skip
    grid = (NV, N * H)
    recurrent_bwd_kernel_dq[grid](h0=x.h0, z0=x.z0, dq=dq, USE_H0=x.h0 is not None, **common)
    recurrent_bwd_kernel_dkv[grid](
        dk=dk, dv=dv, dg=dg, dh0=dh0, dz0=dz0, STORE_DH0=x.h0 is not None, **common
    )  # fmt: skip
    return Gradients(
        dq=dq.sum(0).to(dtype),
        dk=dk.sum(0).to(dtype),
        dv=finish_output(dv, dtype),
        dg=None if dg is None else dg.sum(0),
        dh0=dh0,
        dz0=dz0,
    )


class RecurrentLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `recurrent_fwd`, keeps its result, runs `recurrent_bwd`."""

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
        fwd = recurrent_fwd(x, for_backward=any(ctx.needs_input_grad[1:]))
        save_for_backward(ctx, x, fwd)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for ``x`` and absent inputs)."""
        x, fwd = saved_for_backward(ctx)
        return None, *recurrent_bwd(x, fwd, do, dht, dzt)


def recurrent_linear_attention(
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
    """Causal linear attention, token by token, with the state in registers.

    Per sequence and head: S_t = diag(a_t) S_{t-1} + φ(k_t) v_t^T, z_t = diag(a_t) z_{t-1}
    + φ(k_t), a_t = exp(g_t) (a scalar gate, or one per key dimension); o_t = s φ(q_t)^T S_t,
    or normalized o_t = s φ(q_t)^T S_t / (s φ(q_t)^T z_t + eps) with o_t = 0 where that
    denominator is exactly 0. Differentiable in q, k, v, g and the initial state.

    Args:
        q: Queries ``[B, T, H, K]``, float32, float16 or bfloat16.
        k: Keys ``[B, T, H, K]``, q's dtype.
        v: Values ``[B, T, H, V]``, q's dtype.
        g: Natural-log decay (<= 0): ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension), or `None` for no decay.
            Default: `None`.
        scale: s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by the key-sum denominator. Default: `False`.
        eps: Added in fp32 to the denominator; must be 0 unless normalized. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel; or
            a lifted map ``"taylor2"``, ``"rebased"`` or ``"favor+"`` (F = 1 + K + K², K² or
            m features, at most 256), applied by `linattn_kernels.lifted.lifted_attention`
            in its own kernel before this form runs on fp32 features (the state and
            initial_state then have F rows; the scale of taylor2 and rebased multiplies q
            before φ). Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Also return S_T (or ``(S_T, z_T)``) in fp32. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (integers, B == 1). Default: `None`.
        feature_weights: The projection W ``[m, K]`` of ``"favor+"`` (on q's device; it gets no
            gradient); must be `None` for every other map. Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in q's dtype; final_state `None` unless
        ``output_final_state``.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if feature_map in LIFTED_MAPS:
        return lifted_attention(
            recurrent_linear_attention, q, k, v, g, scale=scale, normalize=normalize, eps=eps,
            feature_map=feature_map, feature_weights=feature_weights,
            initial_state=initial_state, output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
        )  # fmt: skip
    refuse_weights(feature_map, feature_weights)
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map=feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    o, ht, zt = RecurrentLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0)
    return o, final_state(x, ht, zt)


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Describe how this kernel rounds, as `linattn_verify.linear_attn.recipe.PrecisionRecipe`
    keywords.

    Everything stays fp32 after the loads (no intermediate casts, no ``tl.dot``); the decay is a
    product of per-step factors exp(g_t) (per key dimension for a vector gate, which rounds the
    same way: docs/error-model.md §2.7); eps is added in fp32. Division is numpy's correctly
    rounded one under the interpreter and ``div.full.f32`` (2 ulp) when compiled for CUDA.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16); it does not change the recipe.

    Returns:
        The recipe's keyword arguments for the current mode (interpreter or CUDA).

    Raises:
        ValueError: if ``dtype`` is not an input dtype the kernel accepts.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype float32, float16 or bfloat16 but got dtype={dtype}.")
    return {
        "form": "recurrent",
        "accumulation": "ieee",
        "dot_precision": "ieee",
        "dots_on_path": 0,
        "intermediate_dtype": None,
        "casts_on_path": 0,
        "decay_scan": "per_step",
        "division": "rn" if _backend.INTERPRETING else "full",
        "naive_elu1": False,
        "eps_dtype": "float32",
    }


__all__ = [
    "RecurrentLinearAttentionFunction",
    "precision_recipe",
    "recurrent_bwd",
    "recurrent_fwd",
    "recurrent_linear_attention",
]
