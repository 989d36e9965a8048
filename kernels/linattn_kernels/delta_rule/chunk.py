# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule in the chunked WY / UT form, forward and backward, aimed at accuracy.

S_t = (I - β_t k_t k_t^T) diag(e^{g_t}) S_{t-1} + β_t k_t v_t^T and o_t = s S_t^T q_t, with no
gate, a scalar gate g ``[B, T, H]`` or a vector gate g ``[B, T, H, K]``. One program per
(sequence, head) walks the sequence chunk by chunk with the state in fp32 registers; inside a
chunk the triangular system L = I + strict_tril(β K K^T ⊙ e^{G_i - G_j}) is inverted by forward
substitution in fp32 and T = L^-1 is never stored or rounded, so W, U and the corrected values
Vn stay fp32 as well. The backward recomputes each chunk from the fp32 chunk-start states the
forward stored and runs the state cotangent backward across chunks. CHUNK.md beside this file
derives both passes and the accuracy argument.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import empty_output, finish_output
from linattn_kernels.common.delta_chunk import (
    dot32,
    last_row,
    load_gate,
    load_qk,
    pair_grads,
    pair_scores,
    unit_lower_inverse,
)
from linattn_kernels.common.loads import load_rows, load_tile, store_rows, store_tile
from linattn_kernels.common.tables import ChunkTable, chunk_table, sequence_bounds

L2NORM_EPS = 1e-6
"""eps of the in-kernel L2 norm x / sqrt(Σx² + eps) (FLA's ``use_qk_l2norm_in_kernel``)."""

CHUNK_SIZES = (16, 32, 64)
"""Chunk sizes the kernels take (powers of two; 16 is the least ``tl.dot`` accepts)."""

MAX_HEAD_DIM = 128
"""Largest K and V: the whole state [K, V] lives in one program's registers."""

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def chunk_delta_fwd_kernel(
    q, k, v, g, beta, h0, ht, h, o, cu_seqlens, chunk_offsets, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, GATE: tl.constexpr,
    L2NORM: tl.constexpr, EPS: tl.constexpr, USE_H0: tl.constexpr, STORE_HT: tl.constexpr,
    STORE_H: tl.constexpr,
):  # fmt: skip
    """o and the final state of one (sequence, head), chunk by chunk (grid: N, H)."""
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    c0 = tl.load(chunk_offsets + i_n)
    o_i = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    b_S = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    if USE_H0:
        b_S = load_tile(h0, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    for i_t in range(tl.cdiv(L, BT)):
        if STORE_H:
            # The chunk-start state, fp32, for the backward to recompute the chunk from.
            store_tile(h, b_S, (c0 + i_t) * H + i_h, K, V, o_k, o_v, m_k, m_v)
        o_t = i_t * BT + o_i
        m_t = o_t < L
        rows = bos + o_t
        b_q, _ = load_qk(q, rows, m_t, i_h, H, K, o_k, m_k, L2NORM, EPS, BT)  # [BT, BK]
        b_k, _ = load_qk(k, rows, m_t, i_h, H, K, o_k, m_k, L2NORM, EPS, BT)  # [BT, BK]
        b_v = load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_b = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)  # [BT]
        b_G, b_Gs = load_gate(g, rows, m_t, i_h, H, K, o_k, m_k, GATE, BT, BK)  # [BT, BK], [BT]
        b_GC = last_row(b_G, BT)  # [BK]
        # e^G <= 1 and e^{G_C - G} <= 1: every exponent is <= 0.
        b_qe = b_q * tl.exp(b_G)  # [BT, BK]
        b_ke = b_k * tl.exp(b_G)  # [BT, BK]
        b_ko = b_k * tl.exp(b_GC[None, :] - b_G)  # [BT, BK]
        b_A = b_b[:, None] * pair_scores(b_k, b_k, b_G, b_Gs, GATE, True, BT)  # [BT, BT]
        b_T = unit_lower_inverse(b_A, BT)  # [BT, BT], fp32, never stored
        b_W = dot32(b_T, b_b[:, None] * b_ke)  # [BT, BK]
        b_U = dot32(b_T, b_b[:, None] * b_v)  # [BT, BV]
        b_vn = b_U - dot32(b_W, b_S)  # [BT, BV]
        b_P = pair_scores(b_q, b_k, b_G, b_Gs, GATE, False, BT)  # [BT, BT]
        b_o = scale * (dot32(b_qe, b_S) + dot32(b_P, b_vn))  # [BT, BV]
        store_rows(o, b_o, rows, m_t, i_h, H, V, o_v, m_v)
        b_S = tl.exp(b_GC)[:, None] * b_S + dot32(tl.trans(b_ko), b_vn)
    if STORE_HT:
        store_tile(ht, b_S, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)


@triton.jit
def chunk_delta_bwd_kernel(
    q, k, v, g, beta, h, do, dht, dq, dk, dv, dg, dbeta, dh0, cu_seqlens, chunk_offsets, scale,
    H, K, V,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, GATE: tl.constexpr,
    L2NORM: tl.constexpr, EPS: tl.constexpr, USE_DHT: tl.constexpr, STORE_DH0: tl.constexpr,
):  # fmt: skip
    """Every gradient of one (sequence, head), chunks in reverse order (grid: N, H).

    b_dS holds ∂loss/∂S at the end of the current chunk; each chunk is recomputed from its
    stored fp32 start state (CHUNK.md §4 derives every line).
    """
    i_n = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    bos, L = sequence_bounds(cu_seqlens, i_n)
    c0 = tl.load(chunk_offsets + i_n)
    NT = tl.cdiv(L, BT)
    o_i = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    m_strict = o_i[:, None] > o_i[None, :]
    m_causal = o_i[:, None] >= o_i[None, :]
    # [BT, BT]: row s sums the rows t >= s (a masked sum, not total - prefix).
    m_suffix = o_i[None, :] >= o_i[:, None]
    b_dS = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    if USE_DHT:
        b_dS = load_tile(dht, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)
    for i_s in range(NT):
        i_t = NT - 1 - i_s
        o_t = i_t * BT + o_i
        m_t = o_t < L
        rows = bos + o_t
        b_S = load_tile(h, (c0 + i_t) * H + i_h, K, V, o_k, o_v, m_k, m_v)  # [BK, BV]
        b_q, b_rq = load_qk(q, rows, m_t, i_h, H, K, o_k, m_k, L2NORM, EPS, BT)  # [BT, BK]
        b_k, b_rk = load_qk(k, rows, m_t, i_h, H, K, o_k, m_k, L2NORM, EPS, BT)  # [BT, BK]
        b_v = load_rows(v, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        b_b = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)  # [BT]
        b_G, b_Gs = load_gate(g, rows, m_t, i_h, H, K, o_k, m_k, GATE, BT, BK)
        b_GC = last_row(b_G, BT)  # [BK]
        b_E = tl.exp(b_G)  # [BT, BK]
        b_Eo = tl.exp(b_GC[None, :] - b_G)  # [BT, BK]
        b_eC = tl.exp(b_GC)  # [BK]
        b_qe = b_q * b_E
        b_ke = b_k * b_E
        b_ko = b_k * b_Eo
        # The forward, recomputed.
        b_Akk = pair_scores(b_k, b_k, b_G, b_Gs, GATE, True, BT)  # [BT, BT]
        b_T = unit_lower_inverse(b_b[:, None] * b_Akk, BT)  # [BT, BT]
        b_W = dot32(b_T, b_b[:, None] * b_ke)  # [BT, BK]
        b_U = dot32(b_T, b_b[:, None] * b_v)  # [BT, BV]
        b_vn = b_U - dot32(b_W, b_S)  # [BT, BV]
        b_P = pair_scores(b_q, b_k, b_G, b_Gs, GATE, False, BT)  # [BT, BT]
        b_do = load_rows(do, rows, m_t, i_h, H, V, o_v, m_v)  # [BT, BV]
        # Output and state update: o = s(Qe S + P Vn), S' = e^{G_C} S + Ko^T Vn.
        b_dvn = scale * dot32(tl.trans(b_P), b_do) + dot32(b_ko, b_dS)  # [BT, BV]
        b_dP = tl.where(m_causal, scale * dot32(b_do, tl.trans(b_vn)), 0.0)  # [BT, BT]
        b_dqe = scale * dot32(b_do, tl.trans(b_S))  # [BT, BK]
        b_dko = dot32(b_vn, tl.trans(b_dS))  # [BT, BK]
        # dG holds the terms each g_t reaches through G_s for s >= t (a suffix sum below).
        # e^{G_C} reaches every g of the chunk. Ko_i = K_i e^{G_C - G_i} reaches g_t for t > i
        # only: a strict prefix sum, so its +G_C and -G_i parts never cancel in floating point.
        b_dGC = b_eC * tl.sum(b_S * b_dS, axis=1)  # [BK]
        b_dGo = tl.sum(tl.where(m_strict[:, :, None], (b_ko * b_dko)[None, :, :], 0.0), axis=1)
        b_dG = b_qe * b_dqe  # [BT, BK]
        b_dq = b_dqe * b_E
        b_dk = b_dko * b_Eo
        # The state this chunk started from: via Qe S, e^{G_C} S and Vn = U - W S.
        b_dSp = scale * dot32(tl.trans(b_qe), b_do) + b_eC[:, None] * b_dS
        b_dSp -= dot32(tl.trans(b_W), b_dvn)
        # W = T Kb, U = T Vb (Kb = β Ke, Vb = β V): dKb = T^T dW, dVb = T^T dU, and through
        # T = L^-1, dA = -strict_tril(T^T (dW Kb^T + dU Vb^T) T^T)
        #              = -strict_tril(dKb W^T + dVb U^T).
        b_Tt = tl.trans(b_T)
        b_dkb = -dot32(b_Tt, dot32(b_dvn, tl.trans(b_S)))  # [BT, BK]
        b_dvb = dot32(b_Tt, b_dvn)  # [BT, BV]
        b_dA = dot32(b_dkb, tl.trans(b_W)) + dot32(b_dvb, tl.trans(b_U))
        b_dA = -tl.where(m_strict, b_dA, 0.0)  # [BT, BT]
        b_db = tl.sum(b_dA * b_Akk, axis=1) + tl.sum(b_dkb * b_ke, axis=1)
        b_db += tl.sum(b_dvb * b_v, axis=1)  # [BT]
        b_dv = b_b[:, None] * b_dvb
        b_dke = b_b[:, None] * b_dkb
        b_dk += b_dke * b_E
        b_dG += b_dke * b_ke
        # A = diag(β) Akk(k, k): k is both the row and the column operand.
        b_da, b_dc = pair_grads(b_b[:, None] * b_dA, b_k, b_k, b_G, b_Gs, GATE, BT)
        b_dk += b_da + b_dc
        b_dG += b_k * b_da - b_k * b_dc
        # The diagonal of P carries no gate weight (e^0): kept out of the gate's cotangent,
        # where its q ⊙ da and k ⊙ db parts would cancel only up to rounding.
        b_dPd = tl.sum(tl.where(m_causal & ~m_strict, b_dP, 0.0), axis=1)  # [BT]
        b_dq += b_dPd[:, None] * b_k
        b_dk += b_dPd[:, None] * b_q
        b_dP = tl.where(m_strict, b_dP, 0.0)
        b_da, b_dc = pair_grads(b_dP, b_q, b_k, b_G, b_Gs, GATE, BT)
        b_dq += b_da
        b_dk += b_dc
        b_dG += b_q * b_da - b_k * b_dc
        if L2NORM:
            # x̂ = x r: dx = r (dx̂ - x̂ (x̂ · dx̂)).
            b_dq = b_rq[:, None] * (b_dq - b_q * tl.sum(b_q * b_dq, axis=1)[:, None])
            b_dk = b_rk[:, None] * (b_dk - b_k * tl.sum(b_k * b_dk, axis=1)[:, None])
        store_rows(dq, b_dq, rows, m_t, i_h, H, K, o_k, m_k)
        store_rows(dk, b_dk, rows, m_t, i_h, H, K, o_k, m_k)
        store_rows(dv, b_dv, rows, m_t, i_h, H, V, o_v, m_v)
        tl.store(dbeta + rows * H + i_h, b_db.to(dbeta.dtype.element_ty), mask=m_t)
        if GATE > 0:
            # G_t = Σ_{s<=t} g_s inside the chunk and G_C includes every g of the chunk:
            # dg_t = Σ_{s>=t} dG_s + Σ_{i<t} (Ko ⊙ dKo)_i + dG_C, all chunk-local (the gate
            # crosses chunks only through e^{G_C}, whose cotangent dG_C is).
            b_dg = tl.sum(tl.where(m_suffix[:, :, None], b_dG[None, :, :], 0.0), axis=1)
            b_dg += b_dGo + b_dGC[None, :]  # [BT, BK]
            if GATE == 1:
                b_dgs = tl.sum(tl.where(m_k[None, :], b_dg, 0.0), axis=1)  # [BT]
                tl.store(dg + rows * H + i_h, b_dgs.to(dg.dtype.element_ty), mask=m_t)
            else:
                store_rows(dg, b_dg, rows, m_t, i_h, H, K, o_k, m_k)
        b_dS = b_dSp
    if STORE_DH0:
        store_tile(dh0, b_dS, i_n * H + i_h, K, V, o_k, o_v, m_k, m_v)


def _gate_code(g: torch.Tensor | None) -> int:
    return 0 if g is None else 1 if g.ndim == 3 else 2


def _blocks(K: int, V: int) -> tuple[int, int]:
    # Whole head dims per program (the state is one register tile), >= 16 for tl.dot.
    return max(16, triton.next_power_of_2(K)), max(16, triton.next_power_of_2(V))


def chunk_delta_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    *,
    scale: float,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    table: ChunkTable,
    use_qk_l2norm_in_kernel: bool,
    store_states: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the forward on contiguous, validated inputs.

    Args:
        q: Queries ``[B, T, H, K]``.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Gate ``[B, T, H]``, ``[B, T, H, K]`` or `None`.
        beta: Write strengths ``[B, T, H]``.
        scale: Scale of q.
        initial_state: S_0 ``[N, H, K, V]`` fp32, or `None`.
        output_final_state: Return S_T.
        table: The chunk table (`chunk_table`).
        use_qk_l2norm_in_kernel: L2-normalise q and k in the kernel.
        store_states: Keep every chunk-start state (fp32) for the backward.

    Returns:
        ``(o, final_state, h)``: o ``[B, T, H, V]`` in the input dtype; S_T ``[N, H, K, V]``
        fp32 or `None`; the chunk-start states ``[NC, H, K, V]`` fp32 or `None`.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = table.num_sequences
    BK, BV = _blocks(K, V)
    f32 = torch.float32
    # Under the interpreter a bf16 store truncates: bf16 results are stored as fp32 and
    # rounded to nearest on the host (`empty_output`, `finish_output`), as a GPU's store would.
    o = empty_output((B, T, H, V), q.dtype, q.device)
    ht = torch.empty(N, H, K, V, dtype=f32, device=q.device) if output_final_state else None
    h = torch.empty(table.num_chunks, H, K, V, dtype=f32, device=q.device) if store_states else None
    chunk_delta_fwd_kernel[(N, H)](
        q=q, k=k, v=v, g=g, beta=beta, h0=initial_state, ht=ht, h=h, o=o,
        cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets, scale=scale,
        H=H, K=K, V=V, BT=table.chunk_size, BK=BK, BV=BV, GATE=_gate_code(g),
        L2NORM=use_qk_l2norm_in_kernel, EPS=L2NORM_EPS, USE_H0=initial_state is not None,
        STORE_HT=output_final_state, STORE_H=store_states,
    )  # fmt: skip
    return finish_output(o, q.dtype), ht, h


def chunk_delta_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    h: torch.Tensor,
    do: torch.Tensor,
    dht: torch.Tensor | None,
    *,
    scale: float,
    table: ChunkTable,
    use_qk_l2norm_in_kernel: bool,
    want_dh0: bool,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None
]:
    """Launch the backward: dq, dk, dv (input dtype), dg (g's dtype), dβ (β's dtype), dS_0.

    Args:
        q: Queries of the forward ``[B, T, H, K]``.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Gate of the forward, or `None`.
        beta: Write strengths ``[B, T, H]``.
        h: The forward's chunk-start states ``[NC, H, K, V]`` fp32.
        do: Output cotangent ``[B, T, H, V]``.
        dht: Final-state cotangent ``[N, H, K, V]``, or `None` (zero).
        scale: Scale of q.
        table: The forward's chunk table.
        use_qk_l2norm_in_kernel: The forward normalised q and k in the kernel.
        want_dh0: Return dS_0 ``[N, H, K, V]`` fp32 (else its slot is `None`).

    Returns:
        ``(dq, dk, dv, dg, dbeta, dh0)``; dg is `None` without a gate, dh0 without ``want_dh0``.
    """
    H, K = q.shape[2:]
    V = v.shape[-1]
    N = table.num_sequences
    BK, BV = _blocks(K, V)
    f32 = torch.float32
    dq, dk = empty_output(q.shape, q.dtype, q.device), empty_output(k.shape, k.dtype, k.device)
    dv = empty_output(v.shape, v.dtype, v.device)
    dbeta = empty_output(beta.shape, beta.dtype, beta.device)
    dg = None if g is None else empty_output(g.shape, g.dtype, g.device)
    dh0 = torch.empty(N, H, K, V, dtype=f32, device=q.device) if want_dh0 else None
    chunk_delta_bwd_kernel[(N, H)](
        q=q, k=k, v=v, g=g, beta=beta, h=h, do=do.contiguous(),
        dht=None if dht is None else dht.float().contiguous(), dq=dq, dk=dk, dv=dv, dg=dg,
        dbeta=dbeta, dh0=dh0, cu_seqlens=table.cu_seqlens, chunk_offsets=table.chunk_offsets,
        scale=scale, H=H, K=K, V=V, BT=table.chunk_size, BK=BK, BV=BV, GATE=_gate_code(g),
        L2NORM=use_qk_l2norm_in_kernel, EPS=L2NORM_EPS, USE_DHT=dht is not None,
        STORE_DH0=want_dh0,
    )  # fmt: skip
    dq, dk, dv = finish_output(dq, q.dtype), finish_output(dk, k.dtype), finish_output(dv, v.dtype)
    dbeta = finish_output(dbeta, beta.dtype)
    dg = None if g is None or dg is None else finish_output(dg, g.dtype)
    return dq, dk, dv, dg, dbeta, dh0


class ChunkDeltaRuleFunction(torch.autograd.Function):
    """Autograd of `chunk_delta_fwd` / `chunk_delta_bwd` (sequencing and ``ctx`` only)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        beta: torch.Tensor,
        scale: float,
        initial_state: torch.Tensor | None,
        output_final_state: bool,
        table: ChunkTable,
        use_qk_l2norm_in_kernel: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        store = any(ctx.needs_input_grad)
        o, ht, h = chunk_delta_fwd(
            q, k, v, g, beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, table=table,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, store_states=store,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, g, beta, h)
        ctx.scale, ctx.table, ctx.l2norm = scale, table, use_qk_l2norm_in_kernel
        ctx.has_h0 = initial_state is not None
        return o, ht

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor, dht: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, beta, h = ctx.saved_tensors
        dq, dk, dv, dg, dbeta, dh0 = chunk_delta_bwd(
            q, k, v, g, beta, h, do, dht, scale=ctx.scale, table=ctx.table,
            use_qk_l2norm_in_kernel=ctx.l2norm, want_dh0=ctx.has_h0,
        )  # fmt: skip
        return dq, dk, dv, dg, dbeta, None, dh0, None, None, None


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    chunk_size: int,
) -> int:
    """Validate the call and return N, the number of sequences.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if not isinstance(q, torch.Tensor) or q.ndim != 4:
        raise ValueError(f"Expected q of shape [B, T, H, K] but got {getattr(q, 'shape', q)!r}.")
    B, T, H, K = q.shape
    V = v.shape[-1] if isinstance(v, torch.Tensor) and v.ndim == 4 else -1
    if k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"Expected k {tuple(q.shape)} and v [B, T, H, V] matching q but got k "
            f"{tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(
            f"Expected q, k, v of one dtype among float32, float16, bfloat16 but got "
            f"{q.dtype}, {k.dtype}, {v.dtype}."
        )
    if not 1 <= min(K, V) <= max(K, V) <= MAX_HEAD_DIM:
        raise ValueError(f"Got K={K}, V={V}, but head dims must lie in [1, {MAX_HEAD_DIM}].")
    if beta.shape != (B, T, H):
        raise ValueError(f"Expected beta of shape {(B, T, H)} but got {tuple(beta.shape)}.")
    if g is not None and g.shape not in ((B, T, H), (B, T, H, K)):
        raise ValueError(
            f"Expected g of shape {(B, T, H)} or {(B, T, H, K)} (or None) but got {tuple(g.shape)}."
        )
    if isinstance(chunk_size, bool) or chunk_size not in CHUNK_SIZES:
        raise ValueError(
            f"Got chunk_size={chunk_size!r}, but chunk_size must be one of {CHUNK_SIZES}."
        )
    if cu_seqlens is not None:
        if B != 1 or cu_seqlens.ndim != 1 or cu_seqlens.numel() < 2:
            raise ValueError(
                f"Expected B == 1 and cu_seqlens [N+1] with cu_seqlens but got B={B}, "
                f"cu_seqlens of shape {tuple(cu_seqlens.shape)}."
            )
        N = cu_seqlens.numel() - 1
    else:
        N = B
    if initial_state is not None and initial_state.shape != (N, H, K, V):
        raise ValueError(
            f"Expected initial_state of shape {(N, H, K, V)} but got {tuple(initial_state.shape)}."
        )
    return N


def chunk_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the (gated) delta rule in the chunked WY / UT form; differentiable.

    S_t = (I - β_t k_t k_t^T) diag(e^{g_t}) S_{t-1} + β_t k_t v_t^T, o_t = s S_t^T q_t, with the
    triangular inverse, W, U and the corrected values kept in fp32 (CHUNK.md).

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16).
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log gate ``[B, T, H]`` (scalar) or ``[B, T, H, K]`` (vector), <= 0, or
            `None` (no gate).
        beta: Write strengths ``[B, T, H]``, in [0, 1] or [0, 2).
        scale: Scale of q; `None` means K^-1/2. Default: `None`.
        initial_state: S_0 ``[N, H, K, V]`` (read in fp32). Default: `None`.
        output_final_state: Return S_T. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1). Default: `None`.
        use_qk_l2norm_in_kernel: Replace q, k by x / sqrt(Σx² + 1e-6) in the kernel.
            Default: `False`.
        chunk_size: Tokens per chunk, one of 16, 32, 64. Default: `64`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the dtype of q; S_T ``[N, H, K, V]`` fp32,
        or `None` unless ``output_final_state``.

    Raises:
        ValueError: naming the first malformed argument.
    """
    N = _check(q, k, v, g, beta, initial_state, cu_seqlens, chunk_size)
    B, T, _, K = q.shape
    table = chunk_table(cu_seqlens, B, T, chunk_size, q.device)
    assert table.num_sequences == N
    h0 = None if initial_state is None else initial_state.float().contiguous()
    o, ht = ChunkDeltaRuleFunction.apply(
        q.contiguous(), k.contiguous(), v.contiguous(), None if g is None else g.contiguous(),
        beta.contiguous(), K**-0.5 if scale is None else float(scale), h0, output_final_state,
        table, use_qk_l2norm_in_kernel,
    )  # fmt: skip
    return o, ht


__all__ = [
    "CHUNK_SIZES",
    "L2NORM_EPS",
    "MAX_HEAD_DIM",
    "ChunkDeltaRuleFunction",
    "chunk_delta_bwd",
    "chunk_delta_fwd",
    "chunk_delta_rule",
]
