# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recurrent (token-by-token) form of causal linear attention, forward and backward.

One program per (sequence, head, V-block) keeps a ``[BK, BV]`` fp32 state tile (and the fp32
key sum z ``[BK]``) in registers and walks the sequence one token at a time, O(T·K·V) work, no
``tl.dot``. The backward pass is two kernels: a forward-time pass that recomputes the states
and gives dq (and the q-part of dL/dG), and a reverse-time pass over the state cotangent that
gives dk, dv, d S_0 (d z_0) and dg as a running reverse sum. The maths is in the README.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from linattn_kernels import _backend
from linattn_kernels.common.args import empty_output, finish_output, prepare
from linattn_kernels.common.feature_maps import feature_map, feature_map_grad, vanishes

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@triton.jit
def recurrent_fwd_kernel(
    q, k, v, g, o, den, h0, z0, ht, zt, cu_seqlens,
    scale, eps, T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, USE_G: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    STORE_FINAL: tl.constexpr, STORE_DEN: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * T
        eos = bos + T
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]

    # Row of (token, head) in the [B*T, H] layout; an int64 tensor, so offsets stay 64-bit.
    i_th = bos * H + i_h

    # [BK, BV]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    # [BK]
    b_z = tl.zeros([BK], dtype=tl.float32)
    if USE_H0:
        p_h0 = h0 + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
        b_h += tl.load(p_h0, mask=m_h, other=0.0).to(tl.float32)
        if NORMALIZE:
            b_z += tl.load(z0 + i_nh * K + o_k, mask=m_k, other=0.0).to(tl.float32)

    for _ in range(eos - bos):
        # Loads become fp32 at once: bf16 arithmetic is wrong under the interpreter.
        b_q = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        # Padding lanes are zeroed after φ: elu1(0) = 1 would otherwise leak into the sums.
        b_q = tl.where(m_k, feature_map(b_q, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        if USE_G:
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_h = b_h * b_a
            b_z = b_z * b_a
        b_h += b_k[:, None] * b_v[None, :]
        # [BV]
        b_o = tl.sum(b_q[:, None] * b_h, axis=0)
        if NORMALIZE:
            b_z += b_k
            b_den = tl.sum(b_q * b_z, axis=0) + eps
            # A denominator of exactly 0 returns 0 (semantics.py); the safe divisor keeps the
            # discarded lanes free of inf/NaN.
            b_o = tl.where(vanishes(b_den), 0.0, b_o / tl.where(vanishes(b_den), 1.0, b_den))
            if STORE_DEN:
                tl.store(den + i_th, b_den, mask=i_v == 0)
        tl.store(o + i_th * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
        i_th += H

    if STORE_FINAL:
        p_ht = ht + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
        tl.store(p_ht, b_h, mask=m_h)
        if NORMALIZE:
            tl.store(zt + i_nh * K + o_k, b_z, mask=o_k < tl.where(i_v == 0, K, 0))


@triton.jit
def recurrent_bwd_kernel_dq(
    q, k, v, g, do, den, dden, h0, z0, dht, dzt, dq, dgq, dgt, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, USE_G: tl.constexpr, NORMALIZE: tl.constexpr, USE_H0: tl.constexpr,
    USE_DHT: tl.constexpr, USE_DZT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * T
        eos = bos + T
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    # The key-sum terms are V-independent: only the first V-block adds them.
    b_first = (i_v == 0).to(tl.float32)

    i_th = bos * H + i_h

    # [BK, BV]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    # [BK]
    b_z = tl.zeros([BK], dtype=tl.float32)
    if USE_H0:
        p_h0 = h0 + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
        b_h += tl.load(p_h0, mask=m_h, other=0.0).to(tl.float32)
        if NORMALIZE:
            b_z += tl.load(z0 + i_nh * K + o_k, mask=m_k, other=0.0).to(tl.float32)

    for _ in range(eos - bos):
        b_x = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = tl.where(m_k, feature_map(b_x, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_k, FEATURE), 0.0)
        if USE_G:
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_h = b_h * b_a
            b_z = b_z * b_a
        b_h += b_k[:, None] * b_v[None, :]
        if NORMALIZE:
            b_z += b_k
            b_den = tl.load(den + i_th)
            b_do = tl.where(vanishes(b_den), 0.0, b_do / tl.where(vanishes(b_den), 1.0, b_den))
        # d q̃_t = S_t dN_t (+ dZ_t z_t): [BK]
        b_dq = tl.sum(b_h * b_do[None, :], axis=1)
        if NORMALIZE:
            b_dq += b_first * tl.load(dden + i_th) * b_z
        if USE_G:
            # q̃_t · d q̃_t, this V-block's share of dL/dG_t.
            tl.store(dgq + i_v * TOTAL + i_th, tl.sum(b_q * b_dq, axis=0))
        b_dq = b_dq * scale * feature_map_grad(b_x, FEATURE)
        tl.store(dq + (i_v * TOTAL + i_th) * K + o_k, b_dq, mask=m_k)
        i_th += H

    if USE_G:
        # dS_T reaches G_T through S_T = e^{G_T}(...): <dS_T, S_T> + <dz_T, z_T>.
        b_dgt = tl.zeros([BK], dtype=tl.float32)
        if USE_DHT:
            p_dht = dht + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
            b_dgt += tl.sum(tl.load(p_dht, mask=m_h, other=0.0).to(tl.float32) * b_h, axis=1)
        if USE_DZT:
            b_dzt = tl.load(dzt + i_nh * K + o_k, mask=m_k, other=0.0).to(tl.float32)
            b_dgt += b_first * b_dzt * b_z
        tl.store(dgt + i_v * tl.num_programs(1) + i_nh, tl.sum(b_dgt, axis=0))


@triton.jit
def recurrent_bwd_kernel_dkv(
    q, k, v, g, do, den, dden, dht, dzt, dgq, dgt, dk, dv, dg, dh0, dz0, cu_seqlens,
    scale, T, TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    FEATURE: tl.constexpr, USE_G: tl.constexpr, NORMALIZE: tl.constexpr, STORE_DH0: tl.constexpr,
    USE_DHT: tl.constexpr, USE_DZT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * T
        eos = bos + T
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    b_first = (i_v == 0).to(tl.float32)

    # Walk backwards from the last token (an empty sequence never loads from there).
    i_th = (eos - 1) * H + i_h

    # dS_T and dz_T seed the reverse recurrence. [BK, BV], [BK]
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)
    b_dz = tl.zeros([BK], dtype=tl.float32)
    if USE_DHT:
        p_dht = dht + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
        b_dh += tl.load(p_dht, mask=m_h, other=0.0).to(tl.float32)
    if USE_DZT:
        b_dz += tl.load(dzt + i_nh * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    # dg_t = Σ_{i >= t} dL/dG_i, accumulated while walking backwards.
    b_dg = tl.zeros([1], dtype=tl.float32)
    if USE_G:
        b_dg += tl.load(dgt + i_v * tl.num_programs(1) + i_nh)

    for _ in range(eos - bos):
        b_x = tl.load(k + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_q = tl.load(q + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = tl.where(m_k, feature_map(b_q, FEATURE), 0.0) * scale
        b_k = tl.where(m_k, feature_map(b_x, FEATURE), 0.0)
        if NORMALIZE:
            b_den = tl.load(den + i_th)
            b_do = tl.where(vanishes(b_den), 0.0, b_do / tl.where(vanishes(b_den), 1.0, b_den))
            b_dz += tl.load(dden + i_th) * b_q
        # dS_t = a_{t+1} dS_{t+1} + q̃_t dN_t^T
        b_dh += b_q[:, None] * b_do[None, :]
        # d k̃_t = dS_t v_t (+ dz_t): [BK]; dv_t = dS_t^T k̃_t: [BV]
        b_dk = tl.sum(b_dh * b_v[None, :], axis=1)
        if NORMALIZE:
            b_dk += b_first * b_dz
        b_dv = tl.sum(b_dh * b_k[:, None], axis=0)
        if USE_G:
            b_dg += tl.load(dgq + i_v * TOTAL + i_th) - tl.sum(b_k * b_dk, axis=0)
            tl.store(dg + i_v * TOTAL + i_th + tl.arange(0, 1), b_dg)
            b_a = tl.exp(tl.load(g + i_th).to(tl.float32))
            b_dh = b_dh * b_a
            b_dz = b_dz * b_a
        tl.store(
            dk + (i_v * TOTAL + i_th) * K + o_k, b_dk * feature_map_grad(b_x, FEATURE), mask=m_k
        )
        tl.store(dv + i_th * V + o_v, b_dv.to(dv.dtype.element_ty), mask=m_v)
        i_th -= H

    if STORE_DH0:
        p_dh0 = dh0 + (i_nh * K + o_k[:, None]) * V + o_v[None, :]
        tl.store(p_dh0, b_dh, mask=m_h)
        if NORMALIZE:
            tl.store(dz0 + i_nh * K + o_k, b_dz, mask=o_k < tl.where(i_v == 0, K, 0))


def _blocks(K: int, V: int) -> tuple[int, int, int]:
    """Return ``(BK, BV, num_warps)``: K whole in one block, V split so the tile fits registers."""
    BK = max(16, triton.next_power_of_2(K))
    # At most 8192 fp32 state elements per program: 32 registers per thread with 8 warps
    # (4 warps left the backward kernels at the 255-register limit for K = 256 on sm_90).
    BV = max(16, min(triton.next_power_of_2(V), 64, 8192 // BK))
    tile = BK * BV
    return BK, BV, 8 if tile >= 8192 else 4 if tile >= 2048 else 2


def _num_sequences(B: int, cu_seqlens: torch.Tensor | None) -> int:
    return B if cu_seqlens is None else cu_seqlens.numel() - 1


def recurrent_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    *,
    scale: float,
    feature: int,
    normalize: bool,
    eps: float,
    h0: torch.Tensor | None,
    z0: torch.Tensor | None,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
    save_for_backward: bool = False,
) -> tuple[
    torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None
]:
    """Run the forward kernel on prepared (contiguous, validated) inputs.

    Args:
        q: Queries ``[B, T, H, K]`` in the input dtype.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: fp32 log decay ``[B, T, H]`` or `None`.
        scale: The resolved scale s.
        feature: The feature-map code (`linattn_kernels.common.feature_maps.FEATURE_CODES`).
        normalize: Divide by s φ(q)^T z + eps.
        eps: The denominator offset, added in fp32.
        h0: fp32 S_0 ``[N, H, K, V]`` or `None`.
        z0: fp32 z_0 ``[N, H, K]`` (normalized with an initial state) or `None`.
        output_final_state: Return S_T (and z_T).
        cu_seqlens: int64 ``[N+1]`` sequence boundaries or `None`.
        save_for_backward: Also return what the backward pass needs. Default: `False`.

    Returns:
        ``(o, o32, den, ht, zt)``: o ``[B, T, H, V]`` in the input dtype; for a normalized
        problem with ``save_for_backward`` the fp32 output ``o32`` and denominators ``den``
        ``[B, T, H]`` (else `None`); S_T ``[N, H, K, V]`` and z_T ``[N, H, K]`` in fp32 (or
        `None`).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = _num_sequences(B, cu_seqlens)
    BK, BV, num_warps = _blocks(K, V)
    keep = normalize and save_for_backward
    # The backward needs dZ_t = -do_t·o_t / Z_t from the unrounded output.
    o = (
        torch.empty((*q.shape[:3], V), dtype=torch.float32, device=q.device)
        if keep
        else empty_output((*q.shape[:3], V), q.dtype, q.device)
    )
    den = torch.empty(B, T, H, dtype=torch.float32, device=q.device) if keep else None
    ht = (
        torch.empty(N, H, K, V, dtype=torch.float32, device=q.device)
        if output_final_state
        else None
    )
    zt = (
        torch.empty(N, H, K, dtype=torch.float32, device=q.device)
        if output_final_state and normalize
        else None
    )
    grid = (triton.cdiv(V, BV), N * H)
    recurrent_fwd_kernel[grid](
        q=q, k=k, v=v, g=g, o=o, den=den, h0=h0, z0=z0, ht=ht, zt=zt, cu_seqlens=cu_seqlens,
        scale=scale, eps=eps, T=T, H=H, K=K, V=V, BK=BK, BV=BV, FEATURE=feature,
        USE_G=g is not None, NORMALIZE=normalize, USE_H0=h0 is not None,
        STORE_FINAL=output_final_state, STORE_DEN=keep, IS_VARLEN=cu_seqlens is not None,
        num_warps=num_warps,
    )  # fmt: skip
    if keep:
        return o.to(q.dtype), o, den, ht, zt
    return finish_output(o, q.dtype), None, None, ht, zt


def recurrent_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    do: torch.Tensor,
    *,
    scale: float,
    feature: int,
    normalize: bool,
    h0: torch.Tensor | None,
    z0: torch.Tensor | None,
    o32: torch.Tensor | None,
    den: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
) -> tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor | None,
    torch.Tensor | None,
    torch.Tensor | None,
]:
    """Run the two backward kernels on prepared inputs and the output cotangent.

    Args:
        q, k, v, g, scale, feature, normalize, h0, z0, cu_seqlens: As for `recurrent_fwd`.
        do: Output cotangent ``[B, T, H, V]``.
        o32: The fp32 output ``[B, T, H, V]`` from `recurrent_fwd` (normalized only).
        den: The fp32 denominators ``[B, T, H]`` from `recurrent_fwd` (normalized only).
        dht: Cotangent of S_T ``[N, H, K, V]`` or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]`` or `None` (zero).

    Returns:
        ``(dq, dk, dv, dg, dh0, dz0)``: dq, dk, dv in the input dtype; dg ``[B, T, H]``,
        dh0 ``[N, H, K, V]`` and dz0 ``[N, H, K]`` in fp32, each `None` where the input was.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = _num_sequences(B, cu_seqlens)
    BK, BV, num_warps = _blocks(K, V)
    NV = triton.cdiv(V, BV)
    dev = q.device
    do = do.contiguous()
    dden = None
    if normalize:
        assert o32 is not None
        assert den is not None
        # dZ_t = -(do_t · N_t) / Z_t^2 = -(do_t · o_t) / Z_t, and 0 where Z_t vanishes (o_t := 0;
        # below fp32's smallest normal, as the kernels decide with `vanishes`).
        zero = den.abs() < torch.finfo(torch.float32).tiny
        dden = torch.where(
            zero, 0.0, -(do.float() * o32).sum(-1) / torch.where(zero, 1.0, den)
        ).contiguous()
    dq = torch.empty(NV, B, T, H, K, dtype=torch.float32, device=dev)
    dk = torch.empty(NV, B, T, H, K, dtype=torch.float32, device=dev)
    dv = empty_output((B, T, H, V), q.dtype, dev)
    use_g = g is not None
    dgq = torch.empty(NV, B, T, H, dtype=torch.float32, device=dev) if use_g else None
    dgt = torch.empty(NV, N, H, dtype=torch.float32, device=dev) if use_g else None
    dg = torch.empty(NV, B, T, H, dtype=torch.float32, device=dev) if use_g else None
    dh0 = torch.empty(N, H, K, V, dtype=torch.float32, device=dev) if h0 is not None else None
    dz0 = torch.empty(N, H, K, dtype=torch.float32, device=dev) if z0 is not None else None
    use_dzt = normalize and dzt is not None
    grid = (NV, N * H)
    common: dict[str, Any] = dict(  # noqa: C408  (keyword style, as at every launch)
        q=q, k=k, v=v, g=g, do=do, den=den, dden=dden, dht=dht, dzt=dzt if use_dzt else None,
        dgq=dgq, dgt=dgt, cu_seqlens=cu_seqlens, scale=scale, T=T, TOTAL=B * T * H, H=H, K=K,
        V=V, BK=BK, BV=BV, FEATURE=feature, USE_G=use_g, NORMALIZE=normalize,
        USE_DHT=dht is not None, USE_DZT=use_dzt, IS_VARLEN=cu_seqlens is not None,
        num_warps=num_warps,
    )  # fmt: skip
    recurrent_bwd_kernel_dq[grid](h0=h0, z0=z0, dq=dq, USE_H0=h0 is not None, **common)
    recurrent_bwd_kernel_dkv[grid](
        dk=dk, dv=dv, dg=dg, dh0=dh0, dz0=dz0, STORE_DH0=h0 is not None, **common
    )
    return (
        dq.sum(0).to(q.dtype),
        dk.sum(0).to(k.dtype),
        finish_output(dv, v.dtype),
        None if dg is None else dg.sum(0),
        dh0,
        dz0,
    )


class RecurrentLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward and backward launchers, and what passes between them."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        h0: torch.Tensor | None,
        z0: torch.Tensor | None,
        scale: float,
        feature: int,
        normalize: bool,
        eps: float,
        output_final_state: bool,
        cu_seqlens: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        o, o32, den, ht, zt = recurrent_fwd(
            q, k, v, g, scale=scale, feature=feature, normalize=normalize, eps=eps, h0=h0,
            z0=z0, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
            save_for_backward=any(ctx.needs_input_grad[:6]),
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, g, h0, z0, o32, den, cu_seqlens)
        ctx.options = (scale, feature, normalize)
        # Unused outputs reach backward as None, so absent cotangents cost no kernel work.
        ctx.set_materialize_grads(False)
        return o, ht, zt

    @staticmethod
    def backward(
        ctx: Any,
        do: torch.Tensor | None,
        dht: torch.Tensor | None,
        dzt: torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, h0, z0, o32, den, cu_seqlens = ctx.saved_tensors
        scale, feature, normalize = ctx.options
        if do is None:
            do = torch.zeros((*q.shape[:3], v.shape[-1]), dtype=torch.float32, device=q.device)
        dq, dk, dv, dg, dh0, dz0 = recurrent_bwd(
            q, k, v, g, do, scale=scale, feature=feature, normalize=normalize, h0=h0, z0=z0,
            o32=o32, den=den, dht=None if dht is None else dht.contiguous(),
            dzt=None if dzt is None else dzt.contiguous(), cu_seqlens=cu_seqlens,
        )  # fmt: skip
        return dq, dk, dv, dg, dh0, dz0, None, None, None, None, None, None


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
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention, token by token, with the state in registers.

    Per sequence and head: S_t = a_t S_{t-1} + φ(k_t) v_t^T, z_t = a_t z_{t-1} + φ(k_t),
    a_t = exp(g_t); o_t = s φ(q_t)^T S_t, or normalized o_t = s φ(q_t)^T S_t / (s φ(q_t)^T z_t
    + eps) with o_t = 0 where that denominator is exactly 0. Differentiable in q, k, v, g and
    the initial state.

    Args:
        q: Queries ``[B, T, H, K]``, float32, float16 or bfloat16.
        k: Keys ``[B, T, H, K]``, q's dtype.
        v: Values ``[B, T, H, V]``, q's dtype.
        g: Natural-log decay ``[B, T, H]`` (<= 0), or `None` for no decay. Default: `None`.
        scale: s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by the key-sum denominator. Default: `False`.
        eps: Added in fp32 to the denominator; must be 0 unless normalized. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied to q and k inside the
            kernel. Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Also return S_T (or ``(S_T, z_T)``) in fp32. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (integers, B == 1). Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in q's dtype; final_state `None` unless
        ``output_final_state``.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map=feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    o, ht, zt = RecurrentLinearAttentionFunction.apply(
        x.q, x.k, x.v, x.g, x.h0, x.z0, x.scale, x.feature, x.normalize, x.eps,
        x.output_final_state, x.cu_seqlens,
    )  # fmt: skip
    if not x.output_final_state:
        return o, None
    return (o, (ht, zt)) if x.normalize else (o, ht)


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Describe how this kernel rounds, as `linattn_verify.recipe.PrecisionRecipe` keywords.

    Everything stays fp32 after the loads (no intermediate casts, no ``tl.dot``); the decay is a
    product of per-step factors exp(g_t); eps is added in fp32. Division is numpy's correctly
    rounded one under the interpreter and ``div.full.f32`` (2 ulp) when compiled for CUDA.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16); it does not change the recipe.

    Returns:
        The recipe's keyword arguments for the current mode (interpreter or CUDA).

    Raises:
        ValueError: if ``dtype`` is not an input dtype the kernel accepts.
    """
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
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
