# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Evaluating the bounds a few heads at a time, into tensors of the whole problem.

Every bound, magnitude and reference of the linear family is per head: the heads share no
quantity (q, k, v, g, the initial state and the cotangents all carry their own head axis; the
lifted map's projection W is the same for every head, read, never reduced over heads). So a
problem's heads can be evaluated in groups, each group its own sub-problem (`slice_heads`, views
of the float64 problem, no copy), and the results written into tensors of the whole problem
(`Rows`, `States`): the working tensors of a group are ``[H_g, L, ...]``, so the peak memory of
the intermediates falls with the group's size while the time stays the same (docs/error-model.md
§6.5). `head_groups` picks the groups so that one group's ``[H_g, L, width]`` float64 tensor
stays within `GROUP_ELEMENTS`; past that size every temporary is a fresh mmap of the allocator,
whose page faults cost more than the arithmetic on it.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn.semantics import Problem

GROUP_ELEMENTS = 1 << 21
"""Elements (float64) of one group's ``[H_g, L, width]`` tensor that `head_groups` allows,
16 MiB (at least one head per group whatever its size)."""


def head_groups(p: Problem, head_group: int | None = None) -> list[tuple[int, int]]:
    """Head ranges ``[(h0, h1), ...]`` covering ``0..H``, in order.

    ``head_group`` heads per group, or with `None` as many as keep one group's ``[H_g, L, width]``
    tensor (L the longest sequence, width the widest of K, F and V; a vector gate's decay rows
    ``[H_g K, L]`` are as large) within `GROUP_ELEMENTS`. O(number of sequences).
    """
    H = p.q.shape[2]
    if head_group is None:
        longest = max((end - start for _, _, start, end in p.sequences()), default=0)
        width = max(p.q.shape[-1], p.feature_dim, p.v.shape[-1])
        head_group = max(1, GROUP_ELEMENTS // max(1, longest * width))
    size = max(1, int(head_group))
    return [(h0, min(h0 + size, H)) for h0 in range(0, H, size)]


def slice_heads(p: Problem, h0: int, h1: int) -> Problem:
    """The sub-problem of heads ``h0..h1-1`` (views of ``p``'s tensors; ``p`` itself if all)."""
    if h0 == 0 and h1 == p.q.shape[2]:
        return p

    def part(x: torch.Tensor | None, dim: int) -> torch.Tensor | None:
        return None if x is None else x.narrow(dim, h0, h1 - h0)

    return p.with_tensors(
        q=part(p.q, 2),
        k=part(p.k, 2),
        v=part(p.v, 2),
        g=part(p.g, 2),
        initial_state=part(p.initial_state, 1),
        initial_key_sum=part(p.initial_key_sum, 1),
    )


def slice_cotangent(d_final_state: object, h0: int, h1: int) -> object:
    """The final-state cotangent (`None`, dS_T or (dS_T, dz_T), ``[N, H, ...]``) of h0..h1."""

    def part(x: object) -> object:
        return x.narrow(1, h0, h1 - h0) if isinstance(x, torch.Tensor) else x

    if isinstance(d_final_state, tuple | list):
        return tuple(part(x) for x in d_final_state)
    return part(d_final_state)


class Rows:
    """Token tensors ``[B, T, H, X]`` (float64 zeros, or bool), filled piece by piece.

    Each `put` writes one sequence and head group ``[H_g, L, X]``. A key's whole tensor is formed
    on its first `get`: until then its pieces are kept as they are, so while later head groups
    are evaluated only the earlier groups' pieces are held, not tensors of every head (at
    H_g = H/2 that halves what the results hold at the peak). Memory: the whole tensors.
    """

    def __init__(self, p: Problem, device: torch.device) -> None:
        self.shape = tuple(p.q.shape[:3])
        self.device = device
        self.tensors: dict[str, torch.Tensor] = {}
        self._pending: dict[str, list[tuple[torch.Tensor, int, int, int, int, int]]] = {}

    def put(
        self, key: str, piece: torch.Tensor, b: int, start: int, end: int, h0: int, h1: int
    ) -> None:
        """Write ``piece`` ``[H_g, L, ...]`` (``[H_g, L]`` is taken as ``[H_g, L, 1]``)."""
        x = piece if piece.ndim == 3 else piece[..., None]
        full = self.tensors.get(key)
        if full is not None:
            full[b, start:end, h0:h1] = x.transpose(0, 1)
            return
        if x.untyped_storage().nbytes() > x.numel() * x.element_size():
            x = x.clone()  # a view of a larger tensor would keep all of it alive
        self._pending.setdefault(key, []).append((x, b, start, end, h0, h1))

    def get(self, key: str, last: int) -> torch.Tensor:
        """The whole ``[B, T, H, last]`` tensor (zeros where nothing was written)."""
        full = self.tensors.get(key)
        if full is not None:
            return full
        pending = self._pending.pop(key, [])
        width = pending[0][0].shape[-1] if pending else last
        dtype = torch.bool if pending and pending[0][0].dtype == torch.bool else torch.float64
        full = torch.zeros(*self.shape, width, dtype=dtype, device=self.device)
        self.tensors[key] = full
        while pending:  # each piece freed once written (the pieces are disjoint: any order)
            x, b, start, end, h0, h1 = pending.pop()
            full[b, start:end, h0:h1] = x.transpose(0, 1)
            del x
        return full


class States:
    """Per-sequence tensors ``[N, H, ...]``, filled a sequence and group at a time (`put`)."""

    def __init__(self, num_sequences: int, heads: int) -> None:
        self.N, self.H = num_sequences, heads
        self.tensors: dict[str, torch.Tensor] = {}

    def put(self, key: str, piece: torch.Tensor, n: int, h0: int, h1: int) -> None:
        """Write ``piece`` ``[H_g, ...]`` as sequence n's heads h0..h1."""
        full = self.tensors.get(key)
        if full is None:
            full = piece.new_zeros(self.N, self.H, *piece.shape[1:])
            self.tensors[key] = full
        full[n, h0:h1] = piece

    def get(self, key: str) -> torch.Tensor:
        return self.tensors[key]


__all__ = ["GROUP_ELEMENTS", "Rows", "States", "head_groups", "slice_cotangent", "slice_heads"]
