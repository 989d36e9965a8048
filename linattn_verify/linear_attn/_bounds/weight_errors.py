# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The decay weights' relative error ε_w(t, j) of one sequence (docs/error-model.md §2.4, §4).

`SequenceTerms.weight_error` and `SequenceTerms.separable_weight_error` evaluate these
formulas: `error_of_rows` densely at pairs (t, j), `separable_parts` as f(t) + g(j) for pairs in
different blocks of the decay scan. Both are elementwise in G's rows (heads, or a vector gate's
(head, key dimension) pairs), so a caller may evaluate any block of rows on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.typing import DecayScan


@dataclass(frozen=True)
class DecayBlocks:
    """The decay scan's blocks over positions 0..L: a chunk each (chunk-local), or one."""

    size: int
    blk: torch.Tensor  # [L+1]: every position's block (-1 for the initial state)
    start: torch.Tensor  # [L+1]: the position the block's cumulative sum starts from
    end: torch.Tensor  # [L+1]: the block's last position

    @staticmethod
    def of(scan: DecayScan, chunk_size: int, L: int, device: torch.device) -> DecayBlocks:
        size = chunk_size if scan == "chunk_local" else max(L, 1)
        pos = torch.arange(0, L + 1, device=device)
        blk = torch.where(pos > 0, torch.div(pos - 1, size, rounding_mode="floor"), -1)
        start = torch.clamp(blk * size, min=0)
        end = torch.clamp((blk + 1) * size, max=L)
        return DecayBlocks(size, blk, start, end)

    def since_start(self, G: torch.Tensor, at: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        """|G_x - G_start(x)| at positions ``at``: the decay since the position's block began."""
        return (G[:, at] - G[:, self.start[at]]).abs()

    def total(self, G: torch.Tensor, at: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        """The |ΣG| of each position's block at positions ``at`` (0 for the initial state)."""
        return torch.where(
            self.blk[at] >= 0, (G[:, self.end[at]] - G[:, self.start[at]]).abs(), 0.0
        )


def error_of_rows(
    D: torch.Tensor,
    t: torch.Tensor,
    j: torch.Tensor,
    G: torch.Tensor,
    blocks: DecayBlocks | None,
    *,
    u: float,
    scan: DecayScan,
    causal_exact: bool,
    packed_offset: torch.Tensor | None,
) -> torch.Tensor:
    """ε_w of the exponent differences D ``[rows, P, Q]`` at positions t ``[P]``, j ``[Q]``.

    G ``[rows, L+1]`` is the same rows' log-decay prefix; ``blocks`` `None` for a per-step scan
    (which has no blocks); ``packed_offset`` the same rows' |Σ g| before the sequence in a packed
    row, or `None`.
    """
    absD = torch.nan_to_num(D.abs(), posinf=0.0)  # masked entries: their weight is 0 anyway
    if blocks is None:  # per_step
        return 4 * u * (t[:, None] - j[None, :]).clamp(min=0).to(D.dtype) + 2.4 * u * absD
    block, blk = blocks.size, blocks.blk
    bt, bj = blk[t][:, None], blk[j][None, :]
    same = bt == bj
    pieces = torch.where(same, 1, bt - bj + 1).clamp(min=1).to(D.dtype)
    Gt, Gj = blocks.since_start(G, t)[:, :, None], blocks.since_start(G, j)[:, None, :]
    total_j = blocks.total(G, j)[:, None, :]
    local = Gt + Gj + torch.where(same, 0.0, total_j + absD)
    eps_w = pieces * 5 * u + 3.4 * u * absD + block * u * local
    if causal_exact:
        return eps_w
    # docs/error-model.md §4.1: a kernel may split each piece at a reference point r of
    # its block, exp(G_t - G_r) exp(G_r - G_j) (FLA's chunk-end reference): two more exps
    # and a multiply per block touched, each exponent at most the block's total, formed
    # from block-local sums. Which r depends on later tokens of the block: so do the bits.
    reach = blocks.total(G, t)[:, :, None] + torch.where(same, 0.0, total_j)
    if scan == "global" and packed_offset is not None:
        # Both cumulative sums start at the packed row's, |G_0| behind: each errs by
        # L_b u |G_0| more, and the exponent difference by 2u |G_0| more.
        reach = reach + packed_offset.reshape(-1, 1, 1)
    return eps_w + 2 * pieces * 5 * u + (2 * 3.4 * u + block * u) * reach


def separable_parts(
    G: torch.Tensor,
    blocks: DecayBlocks,
    *,
    u: float,
    scan: DecayScan,
    causal_exact: bool,
    packed_offset: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ε_w = f(t) + g(j) across the scan's blocks: f ``[rows, L]``, g ``[rows, L+1]``.

    Across blocks (j in an earlier chunk than t, for a chunk-local scan), with G̃ = -G
    non-decreasing (g <= 0), |G_t - G_j| = G̃_t - G̃_j, and every other part of `error_of_rows`
    is a function of t's or of j's block. A global scan has one block: its pairs of tokens are
    all "same block", also f(t) + g(j).

    In place, one [rows, L] temporary at a time (a vector gate's rows are as large as a token
    tensor each), with the formulas' roundings: c G̃ = G·(-c) exactly (G̃ = -G), a sum's terms
    commute, and a - c G̃ = a + c G.
    """
    f64 = torch.float64
    L = G.shape[1] - 1
    if scan == "per_step":
        tf = torch.arange(1, L + 1, device=G.device).to(f64)
        jf = torch.arange(0, L + 1, device=G.device).to(f64)
        f = G[:, 1:] * (-2.4 * u)  # 4u t + 2.4u G̃_t
        f += 4 * u * tf
        g = G * (2.4 * u)  # -4u j - 2.4u G̃_j
        g += -4 * u * jf
        return f, g
    if scan != "chunk_local":  # global: one block, pieces = 1, G_local = G̃
        return within_block_parts(
            G, blocks, u=u, causal_exact=causal_exact, packed_offset=packed_offset
        )
    # chunk-local: never the same block across scan blocks
    B = blocks.size
    bt, bj = blocks.blk[1:].to(f64), blocks.blk.to(f64)
    local = blocks.since_start(G)  # |G|_loc
    c = 3.4 * u + B * u
    total = blocks.total(G)  # |ΣG|_block
    # -5u b_j - c G̃_j + B u (|G|_loc,j + |ΣG|_block(j))
    g = G * c
    g += -5 * u * bj
    both = local + total
    both *= B * u
    g += both
    del both
    # 5u (b_t + 1) + c G̃_t + B u |G|_loc,t
    f = G[:, 1:] * -c
    f += 5 * u * (bt + 1)
    local *= B * u
    f += local[:, 1:]
    if not causal_exact:
        f += 10 * u * (bt + 1)
        f += total[:, 1:] * (6.8 * u + B * u)
        g -= 10 * u * bj
        g += total * (6.8 * u + B * u)
    return f, g


def within_block_parts(
    G: torch.Tensor,
    blocks: DecayBlocks,
    *,
    u: float,
    causal_exact: bool,
    packed_offset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ε_w = f(t) + g(j) for pairs within one block: f ``[rows, L]``, g ``[rows, L+1]``.

    One piece, and no block total of j's: ε_w = 5u + 3.4u (G̃_t - G̃_j) + B u (|G_t|_loc +
    |G_j|_loc), plus a kernel not promising causality's reference points, 10u + (6.8u + B u)
    |ΣG of t's block| (and a packed row's offset). A global scan's every pair (one block), and
    a chunk-local scan's pairs within a chunk. In place, as `separable_parts`.
    """
    B = blocks.size
    local = blocks.since_start(G)
    local *= B * u  # B u |G|_loc
    f = G[:, 1:] * (-3.4 * u)  # 5u + 3.4u G̃_t + B u |G|_loc,t
    f += 5 * u
    f += local[:, 1:]
    g = G * (3.4 * u)  # -3.4u G̃_j + B u |G|_loc,j
    g += local
    del local
    if not causal_exact:
        reach = blocks.total(G)[:, 1:]
        if packed_offset is not None:
            reach = reach + packed_offset[:, None]
        f += 10 * u
        f += (6.8 * u + B * u) * reach
    return f, g


__all__ = ["DecayBlocks", "error_of_rows", "separable_parts", "within_block_parts"]
