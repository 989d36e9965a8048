# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Decay weights as Triton device functions: chunk-local cumulative sums and masked exponentials."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def chunk_decay(g, rows, m_rows, i_h, H, BT: tl.constexpr):
    """Return the chunk-local cumulative sums G [BT] of g and their value G_L at the chunk end."""
    b_g = tl.load(g + rows * H + i_h, mask=m_rows, other=0.0).to(tl.float32)
    b_G = tl.cumsum(b_g, axis=0)
    # Padding rows load g = 0, so the last row of the block holds G at the last real token.
    b_GL = tl.sum(tl.where(tl.arange(0, BT) == BT - 1, b_G, 0.0), axis=0)
    return b_G, b_GL


@triton.jit
def masked_decay(b_Ga, b_Gb, mask):
    """exp(Ga - Gb) where ``mask``, else 0 (the operands already broadcast to the mask's shape).

    The exponent is masked to -inf *before* the exp: outside the mask (above a causal diagonal)
    Ga - Gb > 0 may overflow, and inf * 0 would be NaN.
    """
    return tl.exp(tl.where(mask, b_Ga - b_Gb, float("-inf")))


@triton.jit
def vector_chunk_decay(g, rows, m_rows, i_h, H, K, o_k, m_k, BT: tl.constexpr):
    """Chunk-local cumulative sums G [BT, BK] of a vector gate, and G_L [BK] at the chunk end.

    ``g`` is ``[tokens, H, K]``; every key dimension is scanned on its own. Padding rows and
    lanes load g = 0, so the last row holds G at the last real token.
    """
    m = m_rows[:, None] & m_k[None, :]
    b_g = tl.load(g + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
    b_G = tl.cumsum(b_g.to(tl.float32), axis=0)
    b_GL = tl.sum(tl.where(tl.arange(0, BT)[:, None] == BT - 1, b_G, 0.0), axis=0)
    return b_G, b_GL
