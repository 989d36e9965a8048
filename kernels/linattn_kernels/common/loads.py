# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Masked loads and stores, and ``tl.dot`` operand casts, as Triton device functions.

Token tensors are ``[tokens, H, D]``: the packed view of ``[B, T, H, D]`` (or of a varlen batch),
addressed by absolute token indices ``rows``. States are ``[slots, K, V]`` and key sums
``[slots, K]``, one slot per (sequence or chunk, head). Callers pass int64 indices (program ids
converted before any multiply), so no address wraps. Every load names ``other=0.0`` and comes
back in fp32 at once: bf16 arithmetic is wrong under the interpreter, and accumulation is fp32.

Under the interpreter every device-function call re-patches ``triton.language`` (a fraction of
a millisecond each), so these helpers spell their loads out rather than call one another.
"""

from __future__ import annotations

import triton
import triton.language as tl

from linattn_kernels.common.feature_maps import feature_map


@triton.jit
def load_rows(x, rows, m_rows, i_h, H, D, o_d, m_d):
    """Load a [BT, BD] block of a [tokens, H, D] tensor in fp32 (zeros outside the masks)."""
    m = m_rows[:, None] & m_d[None, :]
    b_x = tl.load(x + (rows[:, None] * H + i_h) * D + o_d[None, :], mask=m, other=0.0)
    return b_x.to(tl.float32)


@triton.jit
def load_features(x, rows, m_rows, i_h, H, K, o_k, m_k, FEATURE: tl.constexpr):
    """Load a [BT, BK] block of q or k; return (φ(x) with padding zeroed, x), both fp32."""
    m = m_rows[:, None] & m_k[None, :]
    b_x = tl.load(x + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.0)
    b_x = b_x.to(tl.float32)
    # Padding must be zeroed after φ, not by the masked load: elu1(0) = 1 would add phantom keys.
    return tl.where(m, feature_map(b_x, FEATURE), 0.0), b_x


@triton.jit
def store_rows(x, b_x, rows, m_rows, i_h, H, D, o_d, m_d):
    """Store a [BT, BD] block into a [tokens, H, D] tensor, rounded to the tensor's dtype."""
    p = x + (rows[:, None] * H + i_h) * D + o_d[None, :]
    tl.store(p, b_x.to(x.dtype.element_ty), mask=m_rows[:, None] & m_d[None, :])


@triton.jit
def load_per_token(x, rows, m_rows, i_h, H):
    """Load [BT] entries of a [tokens, H] tensor (decays, denominators) in fp32, 0 outside."""
    return tl.load(x + rows * H + i_h, mask=m_rows, other=0.0).to(tl.float32)


@triton.jit
def store_per_token(x, b_x, rows, m_rows, i_h, H):
    """Store [BT] entries into a [tokens, H] tensor."""
    tl.store(x + rows * H + i_h, b_x.to(x.dtype.element_ty), mask=m_rows)


@triton.jit
def load_tile(x, i_s, K, V, o_k, o_v, m_k, m_v):
    """Load the [BK, BV] tile (o_k, o_v) of slot ``i_s`` of a [slots, K, V] state in fp32."""
    p = x + (i_s * K + o_k[:, None]) * V + o_v[None, :]
    return tl.load(p, mask=m_k[:, None] & m_v[None, :], other=0.0).to(tl.float32)


@triton.jit
def store_tile(x, b_x, i_s, K, V, o_k, o_v, m_k, m_v):
    """Store a [BK, BV] tile into slot ``i_s`` of a [slots, K, V] state, in its dtype."""
    p = x + (i_s * K + o_k[:, None]) * V + o_v[None, :]
    tl.store(p, b_x.to(x.dtype.element_ty), mask=m_k[:, None] & m_v[None, :])


@triton.jit
def load_key_sum(x, i_s, K, o_k, m_k):
    """Load the [BK] slice o_k of slot ``i_s`` of a [slots, K] key sum in fp32."""
    return tl.load(x + i_s * K + o_k, mask=m_k, other=0.0).to(tl.float32)


@triton.jit
def store_key_sum(x, b_x, i_s, K, o_k, m_k, i_v):
    """Store a [BK] key-sum slice from the first V-block program only (z does not depend on V)."""
    # The test is broadcast to a block first: the interpreter turns scalar & block into ints.
    tl.store(x + i_s * K + o_k, b_x.to(x.dtype.element_ty), mask=m_k & (o_k * 0 + i_v == 0))


@triton.jit
def operand(b_x, DOT_LOW: tl.constexpr, DT: tl.constexpr):
    """A ``tl.dot`` operand: fp32 (tf32 on CUDA), or rounded to DT, the input dtype, if DOT_LOW."""
    if DOT_LOW:
        return b_x.to(DT)
    else:  # noqa: RET505  (compiled, a return after the if must match the cast's dtype)
        return b_x
