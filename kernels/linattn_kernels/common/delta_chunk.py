# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Device functions of the chunked delta rule: loads, pair scores, the triangular inverse.

Everything here works in fp32 registers. The gate is a constexpr ``GATE``: 0 none, 1 scalar
(g ``[tokens, H]``), 2 vector (g ``[tokens, H, K]``). Gates are returned as the chunk-local
cumulative sum G ``[BT, BK]`` (a scalar gate broadcast over the key dimension, so E = e^G and
its gradient read the same for both gates) and, for a scalar gate, also as ``[BT]``.
kernels/linattn_kernels/delta_rule/CHUNK.md derives what the functions compute.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_qk(
    x, rows, m_t, i_h, H, K, o_k, m_k, L2NORM: tl.constexpr, EPS: tl.constexpr, BT: tl.constexpr
):
    """Load a [BT, BK] block of q or k in fp32; with L2NORM return x / sqrt(Σx² + EPS).

    Returns ``(x̂, r)``: the (normalised) block and r = 1 / sqrt(Σx² + EPS) ``[BT]`` (1 without
    L2NORM), which the backward's Jacobian (I - x̂ x̂^T) r needs.
    """
    m = m_t[:, None] & m_k[None, :]
    b_x = tl.load(x + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
    b_x = b_x.to(tl.float32)  # [BT, BK]
    b_r = tl.full([BT], 1.0, dtype=tl.float32)  # [BT]
    if L2NORM:
        # A correctly rounded sqrt and divide (sqrt.approx / div.full would add ulps on a GPU).
        b_r = tl.div_rn(b_r, tl.sqrt_rn(tl.sum(b_x * b_x, axis=1) + EPS))
        b_x = b_x * b_r[:, None]
    return b_x, b_r


@triton.jit
def load_gate(
    g, rows, m_t, i_h, H, K, o_k, m_k, GATE: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr
):
    """Return the chunk-local cumulative gate: ``(G [BT, BK], Gs [BT])``.

    Padded rows load g = 0, so G at a padded row equals G at the chunk's last real row: the last
    row of G is the chunk total for every chunk, full or not. Gs is the scalar gate's G (zeros
    for the other gates).
    """
    b_Gs = tl.zeros([BT], dtype=tl.float32)  # [BT]
    b_G = tl.zeros([BT, BK], dtype=tl.float32)  # [BT, BK]
    if GATE == 1:
        b_g = tl.load(g + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
        b_Gs = tl.cumsum(b_g, axis=0)
        b_G = b_G + b_Gs[:, None]
    elif GATE == 2:
        m = m_t[:, None] & m_k[None, :]
        b_g = tl.load(g + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
        b_G = tl.cumsum(b_g.to(tl.float32), axis=0)
    return b_G, b_Gs


@triton.jit
def last_row(b_x, BT: tl.constexpr):
    """Row BT - 1 of a [BT, BK] block, as [BK] (the chunk total of a cumulative gate)."""
    o_i = tl.arange(0, BT)
    return tl.sum(tl.where((o_i == BT - 1)[:, None], b_x, 0.0), axis=0)


@triton.jit
def pair_scores(a, b, b_G, b_Gs, GATE: tl.constexpr, STRICT: tl.constexpr, BT: tl.constexpr):
    """P_ij = Σ_d a_id b_jd exp(G_id - G_jd) for j < i (STRICT) or j <= i, else 0 [BT, BT].

    Each weight is the exp of a masked difference (exponent <= 0): never e^G_i · e^-G_j, which
    overflows once |G| > 88 inside a chunk. A vector gate keeps its weight inside the d-sum.
    """
    o_i = tl.arange(0, BT)
    # j < i, or j <= i: the strict mask shifted by one diagonal.
    m_pair = o_i[:, None] > o_i[None, :] - (0 if STRICT else 1)
    if GATE == 2:
        b_w = tl.exp(tl.where(m_pair[:, :, None], b_G[:, None, :] - b_G[None, :, :], float("-inf")))
        b_P = tl.sum(a[:, None, :] * b[None, :, :] * b_w, axis=2)
    else:
        b_P = tl.dot(a, tl.trans(b), input_precision="ieee")
        if GATE == 1:
            b_P = b_P * tl.exp(tl.where(m_pair, b_Gs[:, None] - b_Gs[None, :], float("-inf")))
        else:
            b_P = tl.where(m_pair, b_P, 0.0)
    return b_P


@triton.jit
def pair_grads(dP, a, b, b_G, b_Gs, GATE: tl.constexpr, BT: tl.constexpr):
    """Pull a cotangent dP [BT, BT] of `pair_scores` back to (da, db) [BT, BK] each.

    dP must already be zero outside the pair mask. The gate's cotangent is a ⊙ da - b ⊙ db
    (per dimension), which the caller forms.
    """
    o_i = tl.arange(0, BT)
    m_pair = o_i[:, None] >= o_i[None, :]
    if GATE == 2:
        b_w = tl.exp(tl.where(m_pair[:, :, None], b_G[:, None, :] - b_G[None, :, :], float("-inf")))
        b_da = tl.sum(dP[:, :, None] * b[None, :, :] * b_w, axis=1)
        b_db = tl.sum(dP[:, :, None] * a[:, None, :] * b_w, axis=0)
    else:
        b_M = dP
        if GATE == 1:
            b_M = dP * tl.exp(tl.where(m_pair, b_Gs[:, None] - b_Gs[None, :], float("-inf")))
        b_da = tl.dot(b_M, b, input_precision="ieee")
        b_db = tl.dot(tl.trans(b_M), a, input_precision="ieee")
    return b_da, b_db


@triton.jit
def unit_lower_inverse(b_A, BT: tl.constexpr):
    """T = (I + A)^-1 for strictly lower A [BT, BT], by row-wise forward substitution in fp32.

    T_i = e_i - Σ_{j<i} A_ij T_j: rows j >= i of A are zero, so the sum may run over all of T.
    The result stays in fp32 registers (never stored), so its only error is the substitution's
    own, |T̂ - T| <= γ_BT |T| |A| |T| to first order (Higham, Thm 8.5).
    """
    o_i = tl.arange(0, BT)
    b_T = (o_i[:, None] == o_i[None, :]).to(tl.float32)  # [BT, BT]
    for i in range(1, BT):
        m_row = (o_i == i)[:, None]
        b_a = tl.sum(tl.where(m_row, b_A, 0.0), axis=0)  # [BT], row i of A
        b_T = tl.where(m_row, b_T - tl.sum(b_a[:, None] * b_T, axis=0)[None, :], b_T)
    return b_T


@triton.jit
def dot32(a, b):
    """An fp32 product with IEEE fp32 operands (no tf32 on a GPU), accumulated in fp32."""
    return tl.dot(a, b, input_precision="ieee")
