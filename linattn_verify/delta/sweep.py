# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule's exact recurrence swept in blocks of tokens: O(L) time, O(block) memory.

For one float64 `DeltaSequence` (heads first; D_t = diag(e^{g_t}) on the key rows):

    forward    S'_t = D_t S_{t-1},   S_t = S'_t + k_t (β_t (v_t - S'^T_t k_t))^T
    backward   Λ_t, the adjoint of S_t for the loss <o, do> + <S_L, dS_L>:
               Λ_L = dS_L + s q_L do_L^T,   Λ_{t-1} = D_t Λ'_t + s q_{t-1} do_{t-1}^T,
               Λ'_t = Λ_t - β_t k_t (k_t^T Λ_t),   dS_0 = D_1 Λ'_1

The bounds (`linattn_verify.delta.bounds`, `linattn_verify.delta.gradient_bounds`) and the
reference gradients (`linattn_verify.delta.gradient_assembly`) read S_{t-1}, S'_t, S_t and Λ_t
token by token, but only the recurrences themselves are sequential. So each block's states come
from a Python loop over its tokens (three [H, K, V] operations a token) and everything the
readers compute runs on the block's stacked ``[H, n, K, V]`` tensors at once. Λ does not depend
on S: the backward sweep runs the forward one first, keeping only the state before each block
(a checkpoint), and re-forms a block's states when it reaches it, so no sweep holds more than
one block of states (`BLOCK_ELEMENTS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from linattn_verify.delta.reference import DeltaSequence

BLOCK_ELEMENTS = 2**18
"""The most float64 elements a block's stacked states ``[H, n, K, V]`` hold (2 MB): enough
tokens that the batched work is not dominated by per-operation overhead (n = 32 at H = 2,
K = V = 64), few enough that the readers' temporaries stay in cache and in the allocator's
reused memory. Measured on the CPU (one thread, ns per element): an elementwise operation
0.40 at 2 MB, 1.11 at 8 MB (fresh pages for every temporary)."""


@dataclass(frozen=True)
class StateBlock:
    """The exact states of tokens ``start:start + n`` of a sequence (heads first)."""

    start: int
    S_prev: torch.Tensor  # S_{t-1} [H, n, K, V]
    Sp: torch.Tensor  # S'_t = D_t S_{t-1}
    S: torch.Tensor  # S_t

    @property
    def stop(self) -> int:
        """One past the block's last token."""
        return self.start + self.S.shape[1]


@dataclass(frozen=True)
class AdjointBlock(StateBlock):
    """A `StateBlock` with the adjoints of its states and of the state before it."""

    Lam: torch.Tensor  # Λ_t [H, n, K, V]
    Lam_before: torch.Tensor  # Λ_{start-1} [H, K, V]; dS_0 for the first block


def keys_down(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Σ_k x_kv y_k per token: ``[H, n, K, V]`` with ``[H, n, K]`` → ``[H, n, V]``.

    A batched row-vector product: `torch.einsum` of the same contraction took 4x as long.
    """
    return (y[:, :, None, :] @ x)[:, :, 0, :]


def values_down(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Σ_v x_kv y_v per token: ``[H, n, K, V]`` with ``[H, n, V]`` → ``[H, n, K]``.

    A product and a sum over the last axis: the batched matrix-vector product took 2.6x as
    long (0.88 vs 2.3 ns an element at n = 32, one thread).
    """
    return (x * y[:, :, None, :]).sum(-1)


def adjoint_products(
    seq: DeltaSequence, blk: AdjointBlock
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Λ_t^T k_t ``[H, n, V]`` of a block, and Λ'_t = Λ_t - β_t k_t (k_t^T Λ_t).

    Λ'_t ``[H, n, K, V]`` is formed under a gate only (dg and the decay's error read it);
    without one it is `None`, a whole pass over the block saved.
    """
    span = slice(blk.start, blk.stop)
    k = seq.k[:, span]
    lam_k = keys_down(blk.Lam, k)
    if seq.g is None:
        return lam_k, None
    beta = seq.beta[:, span, None]
    return lam_k, blk.Lam - (beta * k)[..., None] * lam_k[:, :, None, :]


def block_tokens(seq: DeltaSequence) -> int:
    """Tokens per block of ``seq`` (`BLOCK_ELEMENTS`)."""
    H, K, V = seq.S0.shape
    return max(1, BLOCK_ELEMENTS // max(H * K * V, 1))


def decay_factors(seq: DeltaSequence) -> torch.Tensor | None:
    """D_t as ``[H, L, K, 1]`` (vector gate) or ``[H, L, 1, 1]`` (scalar gate), or `None`."""
    if seq.g is None:
        return None
    d = torch.exp(seq.g)
    return d[..., None] if d.ndim == 3 else d[..., None, None]


def _states(
    seq: DeltaSequence, d: torch.Tensor | None, S: torch.Tensor, start: int, stop: int
) -> list[torch.Tensor]:
    """S_t for t in ``start:stop`` from S = S_{start-1}, one token at a time.

    Three operations a token (two without a gate): S' = D S, u = β v - (β k)^T S', S' + k u^T.
    """
    ks = seq.k[:, start:stop, :, None].unbind(1)  # [H, K, 1]
    beta = seq.beta[:, start:stop, None, None]
    bvs = (beta * seq.v[:, start:stop, None, :]).unbind(1)  # β v [H, 1, V]
    bks = (-beta * seq.k[:, start:stop, None, :]).unbind(1)  # -β k^T [H, 1, K]
    decays = None if d is None else d[:, start:stop].unbind(1)
    out = []
    for i, k in enumerate(ks):
        Sp = S if decays is None else decays[i] * S
        u = torch.baddbmm(bvs[i], bks[i], Sp)  # β (v - S'^T k) [H, 1, V]
        S = torch.addcmul(Sp, k, u)
        out.append(S)
    return out


def forward_blocks(seq: DeltaSequence, n: int | None = None) -> Iterator[StateBlock]:
    """The exact states of ``seq`` in blocks of ``n`` tokens (default: `block_tokens`)."""
    n = n or block_tokens(seq)
    d = decay_factors(seq)
    S = seq.S0
    L = seq.q.shape[1]
    for start in range(0, L, n):
        stop = min(start + n, L)
        states = _states(seq, d, S, start, stop)
        yield _state_block(d, start, S, states)
        S = states[-1]


class Checkpoints:
    """The state before each block of a forward sweep, kept for a backward one.

    One tensor: many small long-lived pieces would fragment the allocator's heap.
    """

    def __init__(self, seq: DeltaSequence, n: int) -> None:
        H, L, _ = seq.q.shape
        K, V = seq.S0.shape[1:]
        self.states = seq.S0.new_empty(H, -(-L // n), K, V)
        self.block = n  # tokens per block

    def keep(self, block: StateBlock) -> None:
        """Keep ``block``'s S_{start-1}."""
        self.states[:, block.start // self.block] = block.S_prev[:, 0]


def _state_block(
    d: torch.Tensor | None, start: int, before: torch.Tensor, states: list[torch.Tensor]
) -> StateBlock:
    stacked = torch.stack([before, *states], 1)
    S_prev, S = stacked[:, :-1], stacked[:, 1:]
    Sp = S_prev if d is None else d[:, start : start + len(states)] * S_prev
    return StateBlock(start=start, S_prev=S_prev, Sp=Sp, S=S)


def backward_blocks(
    seq: DeltaSequence,
    scale: float,
    do: torch.Tensor,
    dS_T: torch.Tensor,
    n: int | None = None,
    checkpoints: torch.Tensor | None = None,
) -> Iterator[AdjointBlock]:
    """The exact states and adjoints of ``seq`` in blocks of ``n`` tokens, last block first.

    Args:
        seq: The sequence (float64, heads first).
        scale: The scale s on q.
        do: The cotangent of o ``[H, L, V]``.
        dS_T: The cotangent of the final state ``[H, K, V]`` (zeros when it has none).
        n: Tokens per block. Default: `block_tokens`.
        checkpoints: The state before each block ``[H, blocks, K, V]``, where a forward sweep
            in blocks of ``n`` kept them (`Checkpoints`). Default: swept here first.
    """
    n = n or block_tokens(seq)
    d = decay_factors(seq)
    L = seq.q.shape[1]
    starts = list(range(0, L, n))
    if checkpoints is None:
        checkpoints, S = Checkpoints(seq, n).states, seq.S0
        for start in starts:
            checkpoints[:, start // n] = S
            S = _states(seq, d, S, start, min(start + n, L))[-1]
    Lam = dS_T
    if L:
        Lam = Lam + scale * seq.q[:, L - 1, :, None] * do[:, L - 1, None, :]
    for start, before in zip(reversed(starts), checkpoints.flip(1).unbind(1), strict=True):
        stop = min(start + n, L)
        ks = seq.k[:, start:stop, None, :].unbind(1)  # k^T [H, 1, K]
        bks = (-seq.beta[:, start:stop, None, None] * seq.k[:, start:stop, :, None]).unbind(1)
        decays = None if d is None else d[:, start:stop].unbind(1)
        # The outer products s q_{t-1} do_{t-1}^T each token adds: tokens start-1 .. stop-2.
        first = max(start - 1, 0)
        sq = scale * seq.q[:, first : stop - 1, :, None]
        outer = (sq * do[:, first : stop - 1, None, :]).unbind(1)
        lams = []
        for i in reversed(range(stop - start)):
            lams.append(Lam)
            lam_k = torch.bmm(ks[i], Lam)  # k^T Λ_t [H, 1, V]
            Lam = torch.addcmul(Lam, bks[i], lam_k)  # Λ'_t = Λ_t - β k (k^T Λ_t)
            if start + i:
                j = start + i - 1 - first
                Lam = Lam + outer[j] if decays is None else torch.addcmul(outer[j], decays[i], Lam)
            elif decays is not None:
                Lam = decays[i] * Lam
        block = _state_block(d, start, before, _states(seq, d, before, start, stop))
        yield AdjointBlock(
            start=start,
            S_prev=block.S_prev,
            Sp=block.Sp,
            S=block.S,
            Lam=torch.stack(lams[::-1], 1),
            Lam_before=Lam,
        )


__all__ = [
    "BLOCK_ELEMENTS",
    "AdjointBlock",
    "Checkpoints",
    "StateBlock",
    "adjoint_products",
    "backward_blocks",
    "block_tokens",
    "decay_factors",
    "forward_blocks",
    "keys_down",
    "values_down",
]
