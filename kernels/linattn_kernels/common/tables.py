# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Where every block of tokens lives: the host-built table the parallel and chunk forms launch on.

Dense batches are B packed sequences of length T, so dense and varlen inputs take one code path,
and no block ever mixes tokens of two sequences. The two device functions at the end read it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class ChunkTable:
    """Where every chunk (block of ``chunk_size`` tokens) lives on the packed token axis.

    Attributes:
        cu_seqlens: Sequence boundaries ``[N+1]`` int64 on the inputs' device; without
            ``cu_seqlens`` the B rows are sequences of length T.
        chunk_indices: ``[NC, 2]`` int64: (sequence, chunk within the sequence) per chunk.
        chunk_offsets: ``[N]`` int64: the first global chunk of each sequence.
        num_chunks: NC, the total number of chunks (empty sequences have none).
        chunk_size: BT.
    """

    cu_seqlens: torch.Tensor
    chunk_indices: torch.Tensor
    chunk_offsets: torch.Tensor
    num_chunks: int
    chunk_size: int

    @property
    def num_sequences(self) -> int:
        """N."""
        return int(self.chunk_offsets.numel())


def chunk_table(
    cu_seqlens: torch.Tensor | None, B: int, T: int, chunk_size: int, device: torch.device
) -> ChunkTable:
    """Build the chunk index table on the host; chunks never straddle a sequence boundary.

    Args:
        cu_seqlens: Packed boundaries ``[N+1]`` (int) or `None` for B sequences of length T.
        B: Batch size.
        T: Tokens per batch row.
        chunk_size: Tokens per chunk.
        device: Where the kernels run.

    Returns:
        The `ChunkTable`.
    """
    if cu_seqlens is None:
        return _uniform_chunk_table(B, T, chunk_size, device)
    return _build_chunk_table(cu_seqlens.to("cpu", torch.int64), chunk_size, device)


@functools.lru_cache(maxsize=64)
def _uniform_chunk_table(B: int, T: int, chunk_size: int, device: torch.device) -> ChunkTable:
    # Cached: without varlen the table depends on the shape only, so a training loop builds
    # and copies it to the device once.
    bounds = torch.arange(B + 1, dtype=torch.int64) * T
    return _build_chunk_table(bounds, chunk_size, device)


def _build_chunk_table(bounds: torch.Tensor, chunk_size: int, device: torch.device) -> ChunkTable:
    counts = (bounds[1:] - bounds[:-1] + chunk_size - 1) // chunk_size  # [N]
    offsets = torch.cumsum(counts, 0) - counts
    total = int(counts.sum())
    seq = torch.repeat_interleave(torch.arange(counts.numel(), dtype=torch.int64), counts)
    local = torch.arange(total, dtype=torch.int64) - offsets[seq]
    return ChunkTable(
        cu_seqlens=bounds.to(device),
        chunk_indices=torch.stack([seq, local], dim=1).contiguous().to(device),
        chunk_offsets=offsets.to(device),
        num_chunks=total,
        chunk_size=chunk_size,
    )


@triton.jit
def sequence_bounds(cu_seqlens, i_n):
    """Return (bos, L): the first token (int64) and the length of sequence ``i_n``."""
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    return bos, L


@triton.jit
def chunk_bounds(chunk_indices, cu_seqlens, i_c):
    """Return (i_n, i_t, bos, L) of table entry ``i_c``: sequence, chunk in it, bos, length."""
    i_n = tl.load(chunk_indices + 2 * i_c)
    i_t = tl.load(chunk_indices + 2 * i_c + 1)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    return i_n, i_t, bos, L
