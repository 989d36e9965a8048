# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Tile sizes, warps and the dot-operand dtype each form launches with (host side, no autotuning).

Every tile that meets ``tl.dot`` is a power of two >= 16, the smallest it accepts.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from linattn_kernels import _backend


def dot_low(dtype: torch.dtype) -> bool:
    """Whether ``tl.dot`` operands are rounded to the input dtype: bf16 inputs, compiled only.

    bf16 keeps fp32's exponent range, so rounding P, dS, the features or the state to it cannot
    overflow. fp16 cannot promise that (|P| and 1/D-scaled gradients exceed 65504, long-sequence
    states too), so fp16 and fp32 inputs keep fp32 operands (tf32 on NVIDIA, which has fp16's
    precision with fp32's range). The interpreter computes bf16 arithmetic on raw bits, so it
    never casts to bf16 there (docs/interpreter.md).
    """
    return dtype == torch.bfloat16 and not _backend.INTERPRETING


class Blocks(NamedTuple):
    """Parallel-form tiles: BT tokens, BK/BV the padded head dims, BKS/BVS the state tiles."""

    BT: int
    BK: int
    BV: int
    BKS: int
    BVS: int


def blocks(K: int, V: int) -> Blocks:
    """Pick the parallel form's tiles: whole head dims, a smaller BT for wide heads.

    Args:
        K: The key head dimension.
        V: The value head dimension.

    Returns:
        The `Blocks`.
    """
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    widest = max(BK, BV)
    BT = 64 if widest <= 64 else 32 if widest <= 128 else 16
    return Blocks(BT=BT, BK=BK, BV=BV, BKS=min(BK, 64), BVS=min(BV, 64))


def chunk_block(n: int) -> int:
    """The chunk form's tile width for a head dim ``n``: a power of two in [16, 64]."""
    return min(64, max(16, triton.next_power_of_2(n)))


def chunk_score_block(K: int, chunk_size: int) -> int:
    """The chunk form's K tile with a vector gate, whose scores are ``[C, C, BK]`` products.

    At most 16384 elements per product (BK = 64 at C = 16, 16 above), and at least 16, the
    least ``tl.dot`` accepts for the state products that share the tile.
    """
    return min(chunk_block(K), max(16, 16384 // (chunk_size * chunk_size)))


VECTOR_PARALLEL_BT = 32 if _backend.INTERPRETING else 16
"""The parallel form's query and key block with a vector gate: ``[16, 16, 64]`` score products
on a GPU (registers); 32 under the interpreter, where each program costs Python overhead and the
larger block halved the time of a T = 24 call (measured 0.43 s -> 0.23 s forward + backward)."""


def chunk_num_warps(chunk_size: int) -> int:
    """Warps per chunk-form program: [128, 128] fp32 tiles need eight to stay in registers."""
    return 8 if chunk_size >= 128 else 4


def recurrent_blocks(K: int, V: int) -> tuple[int, int, int]:
    """Return the recurrent form's ``(BK, BV, num_warps)``: K whole, V split to fit registers.

    Args:
        K: The key head dimension.
        V: The value head dimension.

    Returns:
        ``(BK, BV, num_warps)``.
    """
    BK = max(16, triton.next_power_of_2(K))
    # At most 8192 fp32 state elements per program: 32 registers per thread with 8 warps
    # (4 warps left the backward kernels at the 255-register limit for K = 256 on sm_90).
    BV = max(16, min(triton.next_power_of_2(V), 64, 8192 // BK))
    tile = BK * BV
    return BK, BV, 8 if tile >= 8192 else 4 if tile >= 2048 else 2
