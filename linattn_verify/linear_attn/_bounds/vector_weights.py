# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A vector gate's weights inside the sums over key dimensions (docs/error-model.md §2.7, §6.5).

With g ``[B, T, H, K]`` every term of a bound carries the weight w_tjm = exp(G_tm - G_jm) of its
key dimension m, and its error ε_w(t, j, m), inside a sum over m. `VectorWeights` gives those
sums for one sequence (`SequenceTerms`): `weighted` (over m, a pair matrix), `rows` and `cols`
(per m, contracted over the pairs), in both of `SequenceTerms`' modes: dense [H, K, L, L]
weights, or the block scan, where a block's weights factor into matrix products.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn._bounds.pairwise import (
    FACTORED_SPAN,
    Factor,
    PairMatrix,
    Pairs,
    Separable,
)
from linattn_verify.linear_attn._bounds.terms import SequenceTerms
from linattn_verify.linear_attn._bounds.weight_errors import within_block_parts


class VectorWeights:
    """The vector-gate sums of one sequence (``seq.vector``); f(t) + g(j) parts kept once."""

    def __init__(self, seq: SequenceTerms) -> None:
        self.seq = seq
        # ε_w as f(t) + g(j), across chunks and within one (computed when first needed).
        self._far_error: tuple[torch.Tensor, torch.Tensor] | None = None
        self._same_error: tuple[torch.Tensor, torch.Tensor] | None = None
        # Dense mode: w_tjm and w_tjm ε_w(t, j, m) over tokens, each formed once (by ``error``).
        self._dense: dict[bool, torch.Tensor] = {}

    def forget(self) -> None:
        """Drop the weights' error parts and dense weights (formed again when next needed).

        The error parts are four ``[H, L+1, K]`` tensors: a gradient stage that needs none of
        them need not hold them. Results are unchanged (the same arithmetic).
        """
        self._far_error = self._same_error = None
        self._dense.clear()

    def _vector_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[H*K, N]`` (head-major rows) as ``[H, N, K]``."""
        return x.reshape(self.seq.H, self.seq.K, -1).transpose(1, 2)

    def first_weights(self) -> torch.Tensor:
        """w_t0m = exp(G_tm): the initial state's weight per key dimension, ``[H, L, K]``."""
        return self._vector_rows(torch.exp(self.seq.G[:, 1:]))

    def first_weight_errors(self) -> torch.Tensor:
        """ε_w(t, 0, m), ``[H, L, K]``."""
        if not self.seq.decay or not self.seq.L:
            return self.seq.q_feat.new_zeros(self.seq.H, self.seq.L, self.seq.K)
        t, j = self.seq.positions(self.seq.L, self.seq.G.device)
        D = (self.seq.G[:, 1:] - self.seq.G[:, :1])[..., None]  # [H*K, L, 1]
        return self._vector_rows(self.seq.weight_error(self.seq.G, D, t, j[:1])[..., 0])

    def _dense_vector_weights(self, error: bool) -> torch.Tensor:
        """w_tjm (times ε_w(t, j, m)) over tokens, ``[H, K, L, L]``; every sum reuses it."""
        if error not in self._dense:
            seq = self.seq
            W: torch.Tensor = seq.W.reshape(seq.H, seq.K, seq.L, seq.L + 1)[..., 1:]
            if error:
                W = W * seq.eps_w.reshape(seq.H, seq.K, seq.L, seq.L + 1)[..., 1:]
            self._dense[error] = W
        return self._dense[error]

    def _block_vector_weights(self, t: torch.Tensor, j: torch.Tensor, error: bool) -> torch.Tensor:
        """w_tjm (times ε_w) at positions t ``[P]``, j ``[Q]``: ``[H, K, P, Q]``."""
        causal = j[None, :] <= t[:, None]
        D = (self.seq.G[:, t, None] - self.seq.G[:, None, j]).masked_fill(~causal, float("-inf"))
        W = torch.exp(D)
        if error:
            W = W * self.seq.weight_error(self.seq.G, D, t, j)
        return W.reshape(self.seq.H, self.seq.K, t.numel(), j.numel())

    def _error_parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """ε_w = f(t, m) + g(j, m) across scan blocks: f ``[H, L, K]``, g ``[H, L+1, K]``."""
        if self._far_error is None:
            f, g, _, unit = self.seq.separable_weight_error()
            assert self.seq.block % unit == 0
            self._far_error = (self._vector_rows(f), self._vector_rows(g))
        return self._far_error

    def _same_chunk_error_parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """ε_w = f(t, m) + g(j, m) for pairs in one chunk (a chunk-local scan), as `_error_parts`.

        Within a chunk `weight_error` has one piece and no block total of j's: the formula of
        pairs within one block (`weight_errors.within_block_parts`), on the chunks.
        """
        if self._same_error is None:
            f, g = within_block_parts(
                self.seq.G,
                self.seq.decay_blocks,
                u=self.seq.units.arith,
                causal_exact=self.seq.causal_exact,
            )
            # A folded value gate's weights are products of two (`SequenceTerms.weight_error`):
            # the across-chunk parts and the dense path carry the factor, and so must these.
            f *= self.seq.gate_factor
            g *= self.seq.gate_factor
            self._same_error = (self._vector_rows(f), self._vector_rows(g))
        return self._same_error

    def _block_error_masks(
        self, t: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """ε_w within the scan block t as f(t) + g(j) on each of some masks of its pairs.

        ``[(mask [P, P], f [H, P, K], g [H, P, K])]``: one formula for a per-step or global scan,
        within a chunk and across chunks for a chunk-local one.
        """
        f, g = self._error_parts()
        pairs = t[None, :] <= t[:, None]
        if self.seq.recipe.decay_scan != "chunk_local":
            return [(pairs, f[:, t - 1], g[:, t])]
        fs, gs = self._same_chunk_error_parts()
        chunk = self.seq.chunk_of(t.to(torch.float64))
        same = chunk[:, None] == chunk[None, :]
        return [(pairs & same, fs[:, t - 1], gs[:, t]), (pairs & ~same, f[:, t - 1], g[:, t])]

    def _factored_weights(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """exp(G_tm - G_rm) and exp(G_rm - G_jm) for the scan block t (r its first position).

        Their product is the weight w_tjm of j <= t in the block, so the block's weighted sums
        are matrix products; `None` where the block's decay spans more than `FACTORED_SPAN`
        (one factor could overflow): those blocks take the masked difference itself.
        """
        Gc = self._channel_decay()
        r = int(t[0])
        span = Gc[:, r] - Gc[:, int(t[-1])]
        if float(span.max()) > FACTORED_SPAN:
            return None
        ref = Gc[:, r : r + 1]
        return torch.exp(Gc[:, t] - ref), torch.exp(ref - Gc[:, t])

    def _channel_decay(self) -> torch.Tensor:
        return self._vector_rows(self.seq.G)  # [H, L+1, K]

    def weighted(self, a: torch.Tensor, b: torch.Tensor, *, error: bool = False) -> PairMatrix:
        """Σ_m w_tjm a_tm b_jm over tokens (with ``error``, times ε_w(t, j, m)), ``[H, L, L]``."""
        if not self.seq.lazy:
            return torch.einsum("hmtj,htm,hjm->htj", self._dense_vector_weights(error), a, b)
        Gc = self._channel_decay()
        if not error:  # exactly a decayed inner product
            b0 = torch.cat([torch.zeros_like(b[:, :1]), b], 1)
            return Pairs.of(Factor(Separable(a, b0, Gc)), self.seq.L, self.seq.block)
        f, g = self._error_parts()
        if self.seq.recipe.decay_scan == "chunk_local":
            # Its diagonal blocks' parts too, before the far channels exist: formed during the
            # scan, their temporaries would meet everything the scan holds.
            self._same_chunk_error_parts()
        # The far factor's channels [f a, a] and [b0, g b0], written where they go: no
        # [H, L, K] temporaries beside them (b0 is the first half of the columns).
        K = a.shape[-1]
        far_rows = _side_by_side(a, f, scaled_first=True)
        far_cols = b.new_empty(max(g.shape[0], b.shape[0]), g.shape[1], 2 * K)
        far_cols[:, :1, :K] = 0.0
        far_cols[:, 1:, :K] = b
        b0 = far_cols[..., :K]
        torch.mul(g, b0, out=far_cols[..., K:])

        def near(t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            factored = self._factored_weights(t) if t is j else None
            if factored is None:
                W = self._block_vector_weights(t, j, error)
                return torch.einsum("hmtj,htm,hjm->htj", W, a[:, t - 1], b0[:, j])
            # A diagonal block: Σ_m a_tm e_tm (f_tm + g_jm) c_jm b_jm on each mask.
            e, c = factored
            at, bj = a[:, t - 1] * e, b0[:, t] * c
            out = at.new_zeros(at.shape[0], t.numel(), t.numel())
            for mask, fb, gb in self._block_error_masks(t):
                block = (at * fb) @ bj.transpose(-1, -2) + at @ (bj * gb).transpose(-1, -2)
                out = out + torch.where(mask, block, 0.0)
            return out

        far = Separable(far_rows, far_cols, Gc)
        unit = self.seq.recipe.chunk_size if self.seq.recipe.decay_scan == "chunk_local" else 1
        return Pairs.of(Factor(far, near, unit), self.seq.L, self.seq.block)

    def rows(self, P: PairMatrix, b: torch.Tensor, *, error: bool = False) -> torch.Tensor:
        """Σ_j P_tj w_tjm b_jm (with ``error``, times ε_w(t, j, m)), ``[H, L, K]``."""
        return self._aligned(P, b, error, reverse=False)

    def cols(self, P: PairMatrix, a: torch.Tensor, *, error: bool = False) -> torch.Tensor:
        """Σ_t P_tj w_tjm a_tm (with ``error``, times ε_w(t, j, m)), ``[H, L, K]`` over j."""
        return self._aligned(P, a, error, reverse=True)

    def rows_with_errors(self, P: PairMatrix, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`rows` of (P, b) without and with ``error``, from one scan of P (the same sums)."""
        return self._aligned_with_errors(P, b, reverse=False)

    def cols_with_errors(self, P: PairMatrix, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`cols` of (P, a) without and with ``error``, from one scan of P (the same sums)."""
        return self._aligned_with_errors(P, a, reverse=True)

    def _aligned_with_errors(
        self, P: PairMatrix, Y: torch.Tensor, *, reverse: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`_aligned` with ``error`` False and True sharing the work on P.

        Across blocks ε = f(t) + g(j), so one scan of P with Y's columns next to g·Y (rows) or
        f·Y (cols) gives both far parts: the plain sum is one half of it. Within a block, P's
        diagonal block and the factored weights are formed once for both. Each scan costs a
        fixed amount per block (exps of the decays, P's diagonal block, the state's reads and
        writes), not the state's width: one scan instead of two saves nearly half.
        """
        if not self.seq.lazy:
            return (
                self._aligned(P, Y, False, reverse=reverse),
                self._aligned(P, Y, True, reverse=reverse),
            )
        assert isinstance(P, Pairs)
        Gc = self._channel_decay()
        H, L, K = self.seq.H, self.seq.L, self.seq.K
        plain, err = Y.new_zeros(H, L, K), Y.new_zeros(H, L, K)
        for s0 in range(0, L, self.seq.block):
            e = min(s0 + self.seq.block, L)
            t = torch.arange(s0 + 1, e + 1, device=Y.device)
            Pb = P.diagonal(t).expand(H, -1, -1)
            near_plain, near_err = self._aligned_block_with_errors(Pb, Y, t, reverse)
            plain[:, s0:e] += near_plain
            err[:, s0:e] += near_err
        f, g = self._error_parts()
        # Both halves of the columns decay alike: Gc's K channels tile the 2K. The products
        # are written into the halves of `far` once read (no [H, L, K] temporaries).
        if reverse:  # Y is indexed by rows t, the result by columns j
            far = P.across_blocks(_side_by_side(Y, f, scaled_first=False), Gc, reverse=True)
            err.add_(far[..., K:])
            err.add_(torch.mul(g[:, 1:], far[..., :K], out=far[..., K:]))
            plain += far[..., :K]
        else:
            far = P.across_blocks(_side_by_side(Y, g[:, 1:], scaled_first=False), Gc, reverse=False)
            plain += far[..., :K]
            err.add_(torch.mul(f, far[..., :K], out=far[..., :K])).add_(far[..., K:])
        return plain, err

    def _aligned_block_with_errors(
        self, Pb: torch.Tensor, Y: torch.Tensor, t: torch.Tensor, reverse: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`_aligned_block` without and with ``error``, sharing the factored weights."""
        factored = self._factored_weights(t)
        if factored is None:  # rare (a steep block): each exactly as `_aligned_block`
            return (
                self._aligned_block(Pb, Y, t, False, reverse),
                self._aligned_block(Pb, Y, t, True, reverse),
            )
        e, c = factored  # w_tjm = e_tm c_jm
        Yb = Y[:, t - 1]
        pairs = t[None, :] <= t[:, None]
        # Y with the weight's factor on its side, and the output's factor applied at the end.
        scaled, outer = (e * Yb, c) if reverse else (c * Yb, e)
        plain = outer * self._masked_product(Pb, pairs, scaled, reverse)
        err = torch.zeros_like(Yb)
        for mask, fb, gb in self._block_error_masks(t):
            # ε = f_t + g_j on the mask: the side of Y (t when reverse) multiplies Y inside.
            inner, after = (fb, gb) if reverse else (gb, fb)
            err += outer * (
                self._masked_product(Pb, mask, inner * scaled, reverse)
                + after * self._masked_product(Pb, mask, scaled, reverse)
            )
        return plain, err

    @staticmethod
    def _masked_product(
        Pb: torch.Tensor, mask: torch.Tensor, Z: torch.Tensor, reverse: bool
    ) -> torch.Tensor:
        """Pb on the mask's pairs times Z: ``Pm^T @ Z`` (reverse) or ``Pm @ Z``."""
        Pm = torch.where(mask, Pb, 0.0)
        return (Pm.transpose(-1, -2) if reverse else Pm) @ Z

    def _aligned(
        self, P: PairMatrix, Y: torch.Tensor, error: bool, *, reverse: bool
    ) -> torch.Tensor:
        if not self.seq.lazy:
            X = self._dense_vector_weights(error)
            spec = "hmtj,htj,htm->hjm" if reverse else "hmtj,htj,hjm->htm"
            return torch.einsum(spec, X, P, Y)
        assert isinstance(P, Pairs)
        Gc = self._channel_decay()
        H, L, K = self.seq.H, self.seq.L, self.seq.K
        out = Y.new_zeros(H, L, K)
        for s0 in range(0, L, self.seq.block):
            e = min(s0 + self.seq.block, L)
            t = torch.arange(s0 + 1, e + 1, device=Y.device)
            out[:, s0:e] += self._aligned_block(
                P.diagonal(t).expand(H, -1, -1), Y, t, error, reverse
            )
        if not error:
            return out.add_(P.across_blocks(Y, Gc, reverse=reverse))
        # ε = f(t, m) + g(j, m) across blocks: f on the rows' side, g on the columns'; the
        # products written into the halves of `far` once read, as in `_aligned_with_errors`.
        f, g = self._error_parts()
        if reverse:  # Y is indexed by rows t, the result by columns j
            far = P.across_blocks(_side_by_side(Y, f, scaled_first=True), Gc, reverse=True)
            out += far[..., :K]
            return out.add_(torch.mul(g[:, 1:], far[..., K:], out=far[..., K:]))
        far = P.across_blocks(_side_by_side(Y, g[:, 1:], scaled_first=False), Gc, reverse=False)
        out += torch.mul(f, far[..., :K], out=far[..., :K])
        return out.add_(far[..., K:])

    def _aligned_block(
        self, Pb: torch.Tensor, Y: torch.Tensor, t: torch.Tensor, error: bool, reverse: bool
    ) -> torch.Tensor:
        """`_aligned` over the pairs of the scan block t, with its pair matrix Pb ``[H, P, P]``."""
        Yb = Y[:, t - 1]
        factored = self._factored_weights(t)
        if factored is None:
            W = self._block_vector_weights(t, t, error)  # [H, K, P, P]
            spec = "hmtj,htj,htm->hjm" if reverse else "hmtj,htj,hjm->htm"
            return torch.einsum(spec, W, Pb, Yb)
        e, c = factored  # w_tjm = e_tm c_jm
        pairs = t[None, :] <= t[:, None]
        parts = self._block_error_masks(t) if error else [(pairs, None, None)]
        out = torch.zeros_like(Yb)
        for mask, fb, gb in parts:
            Pm = torch.where(mask, Pb, 0.0)
            if reverse:  # Σ_t P_tj e_t (f_t + g_j) c_j Y_t, by columns j
                eY = e * Yb
                if fb is None or gb is None:
                    out += c * (Pm.transpose(-1, -2) @ eY)
                else:
                    PT = Pm.transpose(-1, -2)
                    out += c * (PT @ (fb * eY) + gb * (PT @ eY))
            else:  # Σ_j P_tj e_t (f_t + g_j) c_j Y_j, by rows t
                cY = c * Yb
                if fb is None or gb is None:
                    out += e * (Pm @ cY)
                else:
                    out += e * (fb * (Pm @ cY) + Pm @ (gb * cY))
        return out


def _side_by_side(Y: torch.Tensor, scale: torch.Tensor, *, scaled_first: bool) -> torch.Tensor:
    """``[Y, scale·Y]`` (or ``[scale·Y, Y]``) along the last dimension, formed in place."""
    K = Y.shape[-1]
    out = Y.new_empty(max(Y.shape[0], scale.shape[0]), Y.shape[1], 2 * K)  # [H, L, 2K]
    plain, scaled = (out[..., K:], out[..., :K]) if scaled_first else (out[..., :K], out[..., K:])
    plain.copy_(Y.expand_as(plain))
    torch.mul(scale, Y, out=scaled)
    return out


__all__ = ["VectorWeights"]
