# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Pair matrices X_tj of one sequence without their T x (T+1) storage: a block scan.

The bounds of `linattn_verify.linear_attn._bounds` are sums over the pairs (t, j), j <= t, of a
sequence: products of a decay weight exp(G_t - G_j), rounding counts, weight errors, score
magnitudes |φ(q_t)|·|φ(k_j)| and cotangent products, contracted with token vectors (``X @ Y``,
``X^T @ Y``, row and column sums). Written densely they take O(T²) memory and time; `Pairs` holds
the same expression lazily and evaluates the contractions in O(T·P) memory and O(T) time:

* every factor is *separable away from the diagonal*: for pairs with j in an earlier block of P
  tokens than t it equals Σ_r a_tr b_jr exp(G_tr - G_jr) for row features a, column features b
  and a per-channel log-decay prefix G (`Separable`). Counts and the weights' gate-dependent
  errors split this way (a function of t plus a function of j: docs/error-model.md §2.4, §4),
  scores and cotangent products are inner products, the weight is exp(G_t - G_j) itself;
* pairs within a block are evaluated densely, by the same formula the dense bound uses
  (`Factor.near`), P x P at a time;
* pairs across blocks go through running states: with e the last token before t's block,
  exp(G_t - G_j) = exp(G_t - G_e) exp(G_e - G_j), both <= 1 (g <= 0), so the state
  Σ_{j<=e} b_j exp(G_e - G_j) ⊗ Y_j is carried from block to block like an attention state and
  nothing overflows. Everything a bound sums is non-negative, so nothing cancels either; the
  signed exact numerator does, but only relative to its magnitude.

A product of factors multiplies their channels (the state of a product is the outer product of
the factors' channels with Y's columns), so a term costs O(T Π R_f D) and memory O(P Π R_f D).
Sums of separable factors with the same decay concatenate their channels instead
(`Factor.merge`); a term's coefficient stays beside it, so a scaled factor is the same factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import torch

PairMatrix: TypeAlias = Any
"""A pair matrix of one sequence: a dense ``[H', L, L(+1)]`` tensor or a lazy `Pairs`, which
support the same arithmetic and contractions (their mixed arithmetic with tensors is beyond
what the type checker can express, hence `Any`)."""

FACTORED_SPAN = 600.0
"""Per-channel decays spanning at most this (natural log) over a block's columns are evaluated
as exp(G_t - G_r) exp(G_r - G_j), r the block's first column: both factors stay far from over-
and underflow, and the block is a matrix product instead of an exp per (t, j, channel)."""

Near = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""A factor densely at positions t ``[P]`` (1..L) and j ``[Q]`` (0..L): ``[H', P, Q]``."""


@dataclass(frozen=True)
class Separable:
    """Σ_r a_tr b_jr exp(G_tr - G_jr) over channels r.

    Attributes:
        a: Row features ``[H', L, R]`` of positions t = 1..L.
        b: Column features ``[H', L+1, R]`` of positions j = 0..L (0 is the initial state).
        G: Log-decay prefix ``[H', L+1, R_G]`` with ``G[:, 0] = 0``, or `None` (no decay):
            R_G = 1 (one decay for every channel) or a divisor of R, channel r decaying with
            G's channel r mod R_G (`_tiled`: a sum of factors sharing one per-channel decay
            keeps it once instead of a concatenated copy). H' is 1 or the number of heads
            throughout.
    """

    a: torch.Tensor
    b: torch.Tensor
    G: torch.Tensor | None = None

    def dense(self, t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        at, bj = self.a[:, t - 1], self.b[:, j]  # [H', P, R], [H', Q, R]
        if self.G is None:
            return at @ bj.transpose(-1, -2)
        r = int(j.min())
        if self.G.shape[-1] > 1 and r <= int(t.min()):
            # One decay per channel: exp(G_t - G_r) exp(G_r - G_j) with r the first column,
            # a matrix product, where the columns' decay span keeps both factors in range.
            ref = self.G[:, r : r + 1]
            if float((ref[:, 0] - self.G[:, int(j.max())]).max()) <= FACTORED_SPAN:
                R = at.shape[-1]
                rows = at * _tiled(torch.exp(self.G[:, t] - ref), R)
                out = rows @ (bj * _tiled(torch.exp(ref - self.G[:, j]), R)).transpose(-1, -2)
                return out.masked_fill(j[None, None, :] > t[None, :, None], 0.0)
        causal = (j[None, :] <= t[:, None])[None, :, :, None]
        D = self.G[:, t][:, :, None, :] - self.G[:, j][:, None, :, :]  # [H', P, Q, R']
        W = torch.exp(D.masked_fill(~causal, float("-inf")))
        if W.shape[-1] == 1:  # one decay for every channel
            return (at @ bj.transpose(-1, -2)) * W[..., 0]
        return torch.einsum("hpr,hqr,hpqr->hpq", at, bj, _tiled(W, at.shape[-1]))


@dataclass(frozen=True)
class Factor:
    """One factor of a pair expression: `Separable` across blocks, ``near`` within one.

    ``near`` is `None` where the separable form holds for every pair (an inner product, a count
    that is a function of t plus one of j); otherwise it evaluates the factor densely and
    ``far`` must equal it wherever j lies in an earlier block of ``block`` tokens than t.
    """

    far: Separable
    near: Near | None = None
    block: int = 1  # the scan's block must be a multiple of this
    # Diagonal blocks already evaluated, by (first t, P) (`diagonal_block`).
    _blocks: dict[tuple[int, int], torch.Tensor] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def dense(self, t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        return self.near(t, j) if self.near is not None else self.far.dense(t, j)

    def diagonal_block(self, t: torch.Tensor) -> torch.Tensor:
        """`dense` at (t, t) for a block of consecutive positions t.

        Kept for later terms where it is a decay shared by every channel (the scalar gate's
        weight, in nearly every term): an exp per pair. Everything else is redone, as matrix
        products or a few elementwise operations per pair, not O(T·P) memory per factor.
        """
        G = self.far.G
        if self.near is not None or G is None or G.shape[-1] > 1:
            return self.dense(t, t)
        key = (int(t[0]), t.numel())
        block = self._blocks.get(key)
        if block is None:
            block = self._blocks[key] = self.dense(t, t)
        return block

    def forget(self) -> None:
        """Drop the cached diagonal blocks (`diagonal_block`)."""
        self._blocks.clear()

    def merge(self, c: float, other: Factor, c_other: float) -> Factor | None:
        """The sum c·self + c_other·other as one factor (channels concatenated), or `None`.

        `None` where the two decay differently (another G), or where their channels do not
        tile a per-channel G (`Separable`).
        """
        a, b = self.far, other.far
        if a.G is not b.G:
            return None
        H = max(a.a.shape[0], b.a.shape[0])
        G = a.G
        # One decay per channel: the concatenated channels tile it when each factor's do.
        if G is not None and (a.a.shape[-1] % G.shape[-1] or b.a.shape[-1] % G.shape[-1]):
            return None
        far = Separable(
            torch.cat([c * a.a.expand(H, -1, -1), c_other * b.a.expand(H, -1, -1)], -1),
            torch.cat([a.b.expand(H, -1, -1), b.b.expand(H, -1, -1)], -1),
            G,
        )
        if self.near is None and other.near is None:
            return Factor(far, None, 1)

        def near(t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            return c * self.dense(t, j) + c_other * other.dense(t, j)

        return Factor(far, near, math.lcm(self.block, other.block))


Term = tuple[Factor, ...]
"""A product of factors; a `Pairs` is a sum of (coefficient, term)."""


@dataclass(frozen=True)
class Pairs:
    """A lazy pair matrix ``[H', L, L+1]`` (column 0 the initial state), causal (j <= t).

    Supports what the bounds do with their dense pair matrices: ``+``, ``-``, ``*`` with pair
    matrices, numbers, row tensors ``[H', L, 1]`` and column tensors ``[H', 1, L]`` (token
    columns); ``X[..., 0]`` (column 0, dense ``[H', L]``); ``X[..., 1:]`` (the token columns:
    the same object, since contractions run over tokens only); ``X @ Y`` and
    ``X.transpose(-1, -2) @ Y`` for token tensors Y ``[H, L, D]``; ``X.sum(-1)`` and
    ``X.sum(-2)``. Entries above the diagonal are zero, as in the dense matrices, which all carry
    a causal weight.
    """

    terms: tuple[tuple[float, Term], ...]
    L: int
    block: int = field(default=128)

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def of(factor: Factor, L: int, block: int) -> Pairs:
        return Pairs(((1.0, (factor,)),), L, block)

    def lift(self, x: object) -> Pairs:
        """``x`` (a pair matrix, number, row or column tensor) as a pair matrix like this one."""
        if isinstance(x, Pairs):
            return x
        dev = self._device()
        ones_col = torch.ones(1, self.L + 1, 1, dtype=torch.float64, device=dev)
        ones_row = torch.ones(1, self.L, 1, dtype=torch.float64, device=dev)
        if isinstance(x, int | float):
            return Pairs.of(Factor(Separable(ones_row, ones_col)), self.L, self.block) * float(x)
        if isinstance(x, torch.Tensor):
            if x.ndim == 0:
                return self.lift(float(x))
            y = x if x.ndim == 3 else x.reshape(1, *x.shape[-2:])
            if y.shape[-1] == 1 and y.shape[-2] == self.L:  # a row tensor
                return Pairs.of(
                    Factor(Separable(y.to(torch.float64), ones_col)), self.L, self.block
                )
            if y.shape[-2] == 1 and y.shape[-1] == self.L:  # a column tensor over tokens
                col = torch.cat([torch.zeros_like(y[..., :1]), y], -1).transpose(-1, -2)
                return Pairs.of(
                    Factor(Separable(ones_row, col.to(torch.float64))), self.L, self.block
                )
        raise TypeError(f"Pairs cannot combine with {type(x).__name__} of shape {_shape(x)}")

    def _device(self) -> torch.device:
        return self.terms[0][1][0].far.a.device

    def __add__(self, other: object) -> Pairs:
        o = self.lift(other)
        terms = list(self.terms)
        for c, term in o.terms:
            merged = False
            if len(term) == 1:
                for i, (c_mine, mine) in enumerate(terms):
                    if len(mine) == 1:
                        both = mine[0].merge(c_mine, term[0], c)
                        if both is not None:
                            terms[i] = (1.0, (both,))
                            merged = True
                            break
            if not merged:
                terms.append((c, term))
        return Pairs(tuple(terms), self.L, self.block)

    __radd__ = __add__

    def __neg__(self) -> Pairs:
        return self * -1.0

    def __sub__(self, other: object) -> Pairs:
        return self + (-self.lift(other))

    def __rsub__(self, other: object) -> Pairs:
        return self.lift(other) + (-self)

    def __mul__(self, other: object) -> Pairs:
        if isinstance(other, int | float):
            scaled = tuple((c * float(other), term) for c, term in self.terms)
            return Pairs(scaled, self.L, self.block)
        o = self.lift(other)
        terms = tuple((c * d, a + b) for c, a in self.terms for d, b in o.terms)
        return Pairs(terms, self.L, self.block)

    __rmul__ = __mul__

    def __getitem__(self, index: object) -> torch.Tensor | Pairs:
        if index == (Ellipsis, 0):
            return self.column(0)
        if index == (Ellipsis, slice(1, None, None)):
            return self
        raise IndexError(f"Pairs supports [..., 0] and [..., 1:], not {index!r}")

    # -- evaluation ------------------------------------------------------------------------
    def column(self, j: int) -> torch.Tensor:
        """Column j (0..L) densely, ``[H', L]``."""
        dev = self._device()
        t = torch.arange(1, self.L + 1, device=dev)
        jj = torch.tensor([j], device=dev)
        total: torch.Tensor | float = 0.0
        for c, term in self.terms:
            value = c * _product([f.dense(t, jj) for f in term])
            total = total + torch.where(jj[None, None, :] <= t[None, :, None], value, 0.0)
        assert isinstance(total, torch.Tensor)
        return total[..., 0]

    def __matmul__(self, Y: torch.Tensor) -> torch.Tensor:
        return self._contract(Y, reverse=False)

    def transpose(self, dim0: int, dim1: int) -> _Transposed:
        if {dim0, dim1} != {-1, -2}:
            raise ValueError("Pairs transposes its last two dimensions only")
        return _Transposed(self)

    def sum(self, dim: int) -> torch.Tensor:
        ones = torch.ones(1, self.L, 1, dtype=torch.float64, device=self._device())
        if dim == -1:
            return self._contract(ones, reverse=False)[..., 0]
        if dim == -2:
            return self._contract(ones, reverse=True)[..., 0]
        raise ValueError("Pairs sums over its last or second-to-last dimension only")

    def dense(self) -> torch.Tensor:
        """The whole matrix ``[H', L, L+1]`` (for tests; O(L²) memory)."""
        dev = self._device()
        t = torch.arange(1, self.L + 1, device=dev)
        j = torch.arange(0, self.L + 1, device=dev)
        causal = j[None, :] <= t[:, None]
        total: torch.Tensor | float = 0.0
        for c, term in self.terms:
            total = total + torch.where(causal, c * _product([f.dense(t, j) for f in term]), 0.0)
        assert isinstance(total, torch.Tensor)
        return total

    def diagonal(self, t: torch.Tensor) -> torch.Tensor:
        """The pairs within one block of consecutive positions t, densely: ``[H', P, P]``."""
        causal = t[None, :] <= t[:, None]
        total: torch.Tensor | float = 0.0
        for c, term in self.terms:
            block = _product([f.diagonal_block(t) for f in term])
            total = total + torch.where(causal, c * block, 0.0)
        assert isinstance(total, torch.Tensor)
        return total

    def across_blocks(
        self, Y: torch.Tensor, column_decay: torch.Tensor, *, reverse: bool
    ) -> torch.Tensor:
        """Σ_j X_tj exp(G_tz - G_jz) Y_jz over pairs in different blocks (``reverse``: over t).

        ``column_decay`` G ``[H', L+1, D]`` decays each column z of Y ``[H, L, D]`` on its own;
        the blocks' own pairs are left to the caller (`diagonal`).
        """
        return self._contract(Y, reverse=reverse, column_decay=column_decay)

    def _contract(
        self, Y: torch.Tensor, *, reverse: bool, column_decay: torch.Tensor | None = None
    ) -> torch.Tensor:
        H = max([Y.shape[0]] + [f.far.a.shape[0] for _, term in self.terms for f in term])
        Y = Y.to(torch.float64).expand(H, -1, -1)
        out = torch.zeros(H, self.L, Y.shape[-1], dtype=torch.float64, device=Y.device)
        for c, term in self.terms:
            block = self.block
            for f in term:
                if block % f.block:
                    raise ValueError(f"scan block {block} is not a multiple of {f.block}")
            _scan_term(term, Y, c, block, out, reverse=reverse, column_decay=column_decay)
        return out


@dataclass(frozen=True)
class _Transposed:
    pairs: Pairs

    def __mul__(self, c: object) -> _Transposed:
        return _Transposed(self.pairs * c)

    __rmul__ = __mul__

    def __matmul__(self, Y: torch.Tensor) -> torch.Tensor:
        return self.pairs._contract(Y, reverse=True)


def _shape(x: object) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else ()


def _product(values: list[torch.Tensor]) -> torch.Tensor:
    out = values[0]
    for v in values[1:]:
        out = out * v
    return out


def _decayed(
    x: torch.Tensor, G: torch.Tensor | None, t: torch.Tensor, ref: int, sign: int
) -> torch.Tensor:
    """X ``[H', P, R]`` times exp(sign (G_t - G_ref)) per channel (1 without decay)."""
    if G is None:
        return x
    return x * _tiled(torch.exp(sign * (G[:, t] - G[:, ref : ref + 1])), x.shape[-1])


def _tiled(decay: torch.Tensor, R: int) -> torch.Tensor:
    """Per-channel decay factors ``[..., R_G]`` for R channels: channel r takes r mod R_G.

    One channel (a decay shared by all) broadcasts as it is.
    """
    n = decay.shape[-1]
    if n in (1, R):
        return decay
    if R % n:
        raise ValueError(f"{R} channels cannot tile a decay of {n} channels")
    return decay.repeat(*([1] * (decay.ndim - 1)), R // n)


def _scan_term(
    term: Term,
    Y: torch.Tensor,
    c: float,
    block: int,
    out: torch.Tensor,
    *,
    reverse: bool,
    column_decay: torch.Tensor | None = None,
) -> None:
    """Add Σ_{j<=t} Π_f X^f_tj c Y_j (``reverse``: over t >= j, c Y_t) to ``out`` ``[H, L, D]``.

    c Y is formed a block at a time (the same products, without a whole copy of Y).

    The state is kept as ``[H, R_big, Π R_rest · D]``: the factor with the most channels
    ("big") is contracted by one matrix product per block, the others with Y through their
    outer product (small), so a block costs O(P Π R_f D) multiply-adds.

    With ``column_decay`` G ``[H', L+1, D_G]`` each column z of Y also decays, exp(G_tz - G_jz)
    (a vector gate aligned with the output's columns; D_G a divisor of D, column z taking G's
    z mod D_G as in `Separable`), and only pairs across blocks are
    summed: the caller adds the blocks' own pairs with their exact weights
    (`Pairs.diagonal`).
    """
    H, L, D = Y.shape
    big = max(range(len(term)), key=lambda i: term[i].far.a.shape[-1])
    rest = [f for i, f in enumerate(term) if i != big]
    state: torch.Tensor | None = None
    starts = list(range(0, L, block))
    if reverse:
        starts.reverse()
    Gc = column_decay
    for s0 in starts:
        e = min(s0 + block, L)
        t = torch.arange(s0 + 1, e + 1, device=Y.device)
        Yb = Y[:, s0:e] if c == 1.0 else c * Y[:, s0:e]
        if Gc is None:
            near = _product([f.diagonal_block(t) for f in term])
            causal = t[None, :] <= t[:, None]
            near = torch.where(causal, near, 0.0).expand(H, -1, -1)
            out[:, s0:e] += (near.transpose(-1, -2) if reverse else near) @ Yb
        # Row features referenced at s0 (the last token before the block), column features
        # referenced at e (its last token); Y and the output likewise on their side.
        rows = [_h(_decayed(f.far.a[:, t - 1], f.far.G, t, s0, 1), H) for f in term]
        cols = [_h(_decayed(f.far.b[:, t], f.far.G, t, e, -1), H) for f in term]
        if reverse:
            # Later blocks, read at j with the reference at e; then move the reference to s0.
            if state is not None:
                out[:, s0:e] += _decayed(_read(cols, big, state, D), Gc, t, e, -1)
            local = _write(rows, big, _decayed(Yb, Gc, t, s0, 1))
        else:
            if state is not None:
                out[:, s0:e] += _decayed(_read(rows, big, state, D), Gc, t, s0, 1)
            local = _write(cols, big, _decayed(Yb, Gc, t, e, -1))
        if state is not None:
            state = _carry(state, term, big, rest, e, s0, D)
            if Gc is not None:
                decay = _tiled(torch.exp(Gc[:, e] - Gc[:, s0]), D)  # [H', D]
                state = (state.reshape(H, state.shape[1], -1, D) * decay[:, None, None, :]).reshape(
                    state.shape
                )
            state = state + local
        else:
            state = local


def _kron(features: list[torch.Tensor], P: int, H: int, dtype: torch.dtype) -> torch.Tensor:
    """Outer product of features ``[H, P, R_f]`` over channels: ``[H, P, Π R_f]``."""
    out = torch.ones(H, P, 1, dtype=dtype, device=features[0].device if features else None)
    for x in features:
        out = (out[..., :, None] * x[..., None, :]).reshape(H, P, -1)
    return out


def _read(features: list[torch.Tensor], big: int, state: torch.Tensor, D: int) -> torch.Tensor:
    """Σ_r Π_f F_f[p, r_f] S[r, z] for the state layout of `_scan_term`: ``[H, P, D]``."""
    H, P = features[big].shape[:2]
    partial = features[big] @ state  # [H, P, Π R_rest · D]
    small = _kron([x for i, x in enumerate(features) if i != big], P, H, state.dtype)
    partial = partial.reshape(H * P, small.shape[-1], D)
    return (small.reshape(H * P, 1, -1) @ partial).reshape(H, P, D)


def _write(features: list[torch.Tensor], big: int, Y: torch.Tensor) -> torch.Tensor:
    """Σ_p Π_f F_f[p, r_f] Y[p, z] in the state layout of `_scan_term`."""
    H, P = Y.shape[:2]
    small = _kron([x for i, x in enumerate(features) if i != big], P, H, Y.dtype)
    with_y = (small[..., :, None] * Y[..., None, :]).reshape(H, P, -1)
    return features[big].transpose(-1, -2) @ with_y


def _h(x: torch.Tensor, H: int) -> torch.Tensor:
    return x.expand(H, *x.shape[1:])


def _carry(
    state: torch.Tensor, term: Term, big: int, rest: list[Factor], e: int, s0: int, D: int
) -> torch.Tensor:
    """The state's reference moved across a block: times exp(G_e - G_s0) per channel."""
    H = state.shape[0]

    def decay(f: Factor) -> torch.Tensor:
        G, R = f.far.G, f.far.a.shape[-1]
        if G is None:
            return torch.ones(1, R, dtype=state.dtype, device=state.device)
        return _tiled(torch.exp(G[:, e] - G[:, s0]), R).expand(-1, R)  # [H', R]

    if all(f.far.G is None for f in term):
        return state
    big_decay = decay(term[big]).expand(H, -1)[..., :, None]  # [H, R_big, 1]
    small = _kron([decay(f).expand(H, -1)[:, None] for f in rest], 1, H, state.dtype)
    small = small.reshape(H, 1, -1, 1).expand(-1, -1, -1, D).reshape(H, 1, -1)
    return state * big_decay * small


__all__ = ["FACTORED_SPAN", "Factor", "PairMatrix", "Pairs", "Separable"]
