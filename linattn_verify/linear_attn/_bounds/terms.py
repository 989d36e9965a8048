# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The T x (T+1) term structure of one sequence: dense pair matrices, or a block scan's.

The derivation of every count and error term is in `linattn_verify.linear_attn.tolerance`'s
docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from linattn_verify.linear_attn._bounds import lifted
from linattn_verify.linear_attn._bounds.pairwise import Factor, Near, PairMatrix, Pairs, Separable
from linattn_verify.linear_attn._bounds.units import Units, exp_error
from linattn_verify.linear_attn.feature_maps import feature_map_derivative
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.typing import LIFTED_MAPS

DENSE_TOKENS = 512
"""Sequences up to this length keep their pair quantities as dense [L, L+1] tensors (as fast as
the scan up to here: forward and gradient bounds at H = 2, K = V = 64 took 0.30 s dense and
0.29 s scanned at L = 512, 1.1 s and 0.60 s at 1024); longer ones are evaluated by the block
scan of `_bounds.pairwise`."""

DENSE_VECTOR_TOKENS = 64
"""The same for a vector gate, whose dense weights are [H, K, L, L+1]: O(L²K) (0.13 s dense,
0.09 s scanned at L = 64; 0.37 s and 0.17 s at 128; 3.6 s and 1.0 s at 256)."""

SCAN_TOKENS = 128
"""Tokens per block of that scan (rounded up to a multiple of the recipe's chunk size)."""


class SequenceTerms:
    """The T x (T+1) term structure of one sequence (all heads), in float64.

    Column 0 of every [H, T, T+1] pair matrix is the virtual key j = 0 that stands for the
    initial state; columns 1..T are the tokens. The pair matrices (``W``, ``causal``,
    ``acc_fwd``, ``acc_rev``, ``eps_w``, ``W_abs``) are dense tensors up to `DENSE_TOKENS`
    tokens (`DENSE_VECTOR_TOKENS` under a vector gate) and lazy `Pairs` beyond (``lazy``),
    contracted by a block scan in O(T) time and memory; the bound formulas use them alike.

    With a vector gate (``vector``; g ``[B, T, H, K]``) the decay quantities ``G``, ``W_end``
    and ``eps_w_end`` (and dense ``W`` and ``eps_w``) have one row per (head, key dimension),
    head-major (``[H*K, ...]``); the sums over key dimensions that carry the weights
    w_tjm = exp(G_tm - G_jm) are `weighted`, `rows` and `cols`.
    """

    def __init__(
        self,
        problem: Problem,
        recipe: PrecisionRecipe,
        units: Units,
        n: int,
        b: int,
        start: int,
        end: int,
        *,
        causal_exact: bool = True,
        scan_block: int | None = None,
    ) -> None:
        p = problem
        self.units = units
        self.recipe = recipe
        # A kernel that does not promise bit-exact causality may take its decays from a
        # reference point anywhere in the block (`weight_error`), and a global scan may run
        # over the whole packed row: its cumulative sums then carry the earlier sequences'.
        self.causal_exact = causal_exact
        self.packed_offset = _packed_offset(p, b, start) if not causal_exact else None
        self.problem = p
        self.signed_scale = p.outer_scale
        self.scale = abs(p.outer_scale)
        q = p.q[b, start:end].transpose(0, 1)  # [H, L, K]
        k = p.k[b, start:end].transpose(0, 1)
        self.q_in, self.k_in = q, k
        self.v = p.v[b, start:end].transpose(0, 1)  # [H, L, V]
        H, L, K = q.shape
        V = self.v.shape[-1]
        # K is the state's rows: the feature dimension F of a lifted map.
        K = p.feature_dim
        self.H, self.L, self.K, self.V = H, L, K, V
        # The rounding count of one feature dot (`lifted.dot_length` for a lifted map).
        self.dot_length = lifted.dot_length(p) if p.lifted else K
        dev, f64 = q.device, torch.float64
        self.q_feat = p.query_features(q)
        self.k_feat = p.key_features(k)
        # Each side's map its own way: queries may take a map of their own (softmax over
        # "efficient attention"'s features, exp on its keys).
        under = self.units.underflow
        self.q_err = (
            lifted.feature_error(p, q, self.q_feat, units.arith, under, query=True)
            if p.query_map in LIFTED_MAPS
            else self._feature_error(q, p.query_map)
        )
        self.k_err = (
            lifted.feature_error(p, k, self.k_feat, units.arith, under, query=False)
            if p.feature_map in LIFTED_MAPS
            else self._feature_error(k, p.feature_map)
        )
        self.S0 = (
            p.initial_state[n]
            if p.initial_state is not None
            else torch.zeros(H, K, V, dtype=f64, device=dev)
        )
        self.z0 = (
            p.initial_key_sum[n]
            if p.initial_key_sum is not None
            else torch.zeros(H, K, dtype=f64, device=dev)
        )
        decay = p.g is not None
        self.vector = p.vector_gate
        self._tokens = (b, start, end)
        # G, W_end and eps_w_end, formed on first use (`release_decays` drops them).
        self._decays: dict[str, torch.Tensor] = {}
        self._blocks_of_G: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        # The pair quantities ([H?, L, L+1], dense or lazy: `_dense_pairs`, `_lazy_pairs`).
        self.W: PairMatrix
        self.causal: PairMatrix
        self.acc_fwd: PairMatrix
        self.acc_rev: PairMatrix
        self.eps_w: PairMatrix
        self.W_abs: PairMatrix
        self.decay = decay
        j = torch.arange(0, L + 1, device=dev)  # key positions, 0 = initial state
        dec = int(decay)
        Lf = float(L)
        end_crossings = self.chunk_of(torch.tensor(Lf, dtype=f64, device=dev)) - self.chunk_of(
            j.to(f64)
        )
        self.acc_state = self._forms(
            parallel=Lf + 2 + dec + 0 * j.to(f64),
            chunk=recipe.chunk_size + (1 + dec) * end_crossings + 2 + 2 * dec,
            recurrent=2 + (1 + dec) * (Lf - j.to(f64)),
        )  # [L+1], roundings of a final-state term φ(k_j) v_j w_Tj
        # A decay weight that underflows loses up to one smallest normal per exp or product
        # that forms it, whatever its relative error: an absolute error, amplified by the
        # term's other factors (|A| |v| can be huge). At most t - j + 2 such operations.
        self.lam = self.units.underflow * dec
        self.W_end_abs = (self.lam * (Lf - j.to(f64) + 2))[None]  # [1, L+1]
        dense_limit = DENSE_VECTOR_TOKENS if self.vector else DENSE_TOKENS
        if scan_block is None and dense_limit < self.L:
            scan_block = SCAN_TOKENS
        self.lazy = scan_block is not None and L > 0  # an empty sequence has no pairs
        if self.lazy:
            assert scan_block is not None
            self._lazy_pairs(math.lcm(scan_block, recipe.chunk_size))
        else:
            self._dense_pairs()

    @property
    def G(self) -> torch.Tensor:
        """The log-decay prefix ``[H, L+1]`` (``[H*K, L+1]`` for a vector gate), G[:, 0] = 0."""
        G = self._decays.get("G")
        if G is None:
            p, (b, start, end) = self.problem, self._tokens
            H, L, K = self.H, self.L, self.K
            f64, dev = torch.float64, self.q_in.device
            if p.g is not None:
                if self.vector:
                    # One row per (head, key dimension), head-major: every decay quantity is
                    # elementwise in its leading dimension, so it is the scalar one per dimension.
                    g = p.g[b, start:end].permute(1, 2, 0).reshape(H * K, L)  # [H*K, L]
                else:
                    g = p.g[b, start:end].transpose(0, 1)  # [H, L]
                zero = torch.zeros(g.shape[0], 1, dtype=f64, device=dev)
                G = torch.cat([zero, torch.cumsum(g, -1)], -1)
            else:
                G = torch.zeros(H, L + 1, dtype=f64, device=dev)
            self._decays["G"] = G
        return G

    @property
    def W_end(self) -> torch.Tensor:
        """The weight of key j (0..L) in the final state, ``[H, L+1]`` (rows as `G`'s)."""
        W_end = self._decays.get("W_end")
        if W_end is None:
            G = self.G
            W_end = self._decays["W_end"] = torch.exp(G[:, -1:] - G)
        return W_end

    @property
    def eps_w_end(self) -> torch.Tensor:
        """ε_w(L, j) of the final state's weights, ``[H, L+1]`` (``[1, L+1]`` without decay)."""
        eps = self._decays.get("eps_w_end")
        if eps is None:
            G, L, dev, f64 = self.G, self.L, self.G.device, torch.float64
            if not self.decay:
                eps = torch.zeros(1, L + 1, dtype=f64, device=dev)
            elif not L:
                eps = torch.zeros(G.shape[0], 1, dtype=f64, device=dev)
            else:
                j = torch.arange(0, L + 1, device=dev)
                D = (G[:, -1:] - G)[:, None, :]
                eps = self.weight_error(G, D, torch.tensor([L], device=dev), j)[:, 0]
            self._decays["eps_w_end"] = eps
        return eps

    def release_decays(self) -> None:
        """Drop a vector gate's per-dimension decay quantities (`G`, `W_end`, `eps_w_end`).

        Each is ``[H*K, L+1]`` float64, as large as a token tensor, and held as long as the
        forward's pieces are; the next use forms them again (the same arithmetic). A scalar
        gate's are ``[H, L+1]`` and its lazy weights hold G: kept.
        """
        if self.vector:
            self._decays.clear()
            self._blocks_of_G = None

    # φ'(x) and its error are read once, by the gradients' chain rule: formed there, not kept
    # (each is [H, L, K], held as long as the forward's pieces are).
    @property
    def q_dphi(self) -> torch.Tensor:
        return feature_map_derivative(self.q_in, self.problem.query_map)

    @property
    def k_dphi(self) -> torch.Tensor:
        return feature_map_derivative(self.k_in, self.problem.feature_map)

    @property
    def q_dphi_err(self) -> torch.Tensor:
        return self._derivative_error(self.q_in, self.problem.query_map)

    @property
    def k_dphi_err(self) -> torch.Tensor:
        return self._derivative_error(self.k_in, self.problem.feature_map)

    def forget_blocks(self) -> None:
        """Drop the weight blocks the scan cached (`Factor.diagonal_block`): O(L·P) per head.

        The next contraction forms them again (an exp per pair of a block); results unchanged.
        """
        for pairs in (self.W, self.causal):
            if isinstance(pairs, Pairs):
                for _, term in pairs.terms:
                    for factor in term:
                        factor.forget()

    @staticmethod
    def positions(L: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.arange(1, L + 1, device=dev), torch.arange(0, L + 1, device=dev)

    def chunk_of(self, x: torch.Tensor) -> torch.Tensor:
        """Chunk index of positions 1..L; the initial state (0) sits in chunk -1."""
        C = self.recipe.chunk_size
        return torch.where(x > 0, torch.div(x - 1, C, rounding_mode="floor"), -1.0)

    def _dense_pairs(self) -> None:
        """The pair quantities as [L, L+1] (or [H, L, L+1]) float64 tensors."""
        L, G, dev, f64 = self.L, self.G, self.G.device, torch.float64
        dec, C = int(self.decay), self.recipe.chunk_size
        t, j = self.positions(L, dev)
        causal = j[None, :] <= t[:, None]  # [L, L+1]
        D = (G[:, 1:, None] - G[:, None, :]).masked_fill(~causal, float("-inf"))  # [H, L, L+1]
        self.W = torch.exp(D)  # zero above the diagonal
        self.causal = causal
        tt, jj = t[:, None].to(f64), j[None, :].to(f64)
        crossings = self.chunk_of(tt) - self.chunk_of(jj)
        self.acc_fwd = self._forms(
            parallel=tt + 1 + dec + 0 * jj,
            chunk=C + (1 + dec) * crossings + 1 + 2 * dec,
            recurrent=2 + (1 + dec) * (tt - jj),
        )  # [L, L+1], roundings of accumulation along a row (over j)
        self.acc_rev = self._forms(
            parallel=(L - jj + 1) + dec + 0 * tt,
            chunk=C + (1 + dec) * crossings + 1 + 2 * dec,
            recurrent=2 + (1 + dec) * (tt - jj),
        )  # [L, L+1], roundings of accumulation along a column (over t)
        if self.decay:
            self.eps_w = self.weight_error(G, D, t, j)  # [H, L, L+1]
        else:
            self.eps_w = torch.zeros(1, L, L + 1, dtype=f64, device=dev)
        self.W_abs = torch.where(causal, self.lam * (tt - jj + 2), 0.0)[None]  # [1, L, L+1]

    def _lazy_pairs(self, block: int) -> None:
        """The pair quantities as `Pairs`: O(L) memory, contracted by a block scan.

        Each is the dense quantity's formula within a block of ``block`` tokens and a function
        of t plus a function of j across blocks (module docstring of `pairwise`); ``block`` is
        a multiple of the recipe's chunk size, so no two blocks share a chunk.
        """
        L, G, dev, f64 = self.L, self.G, self.G.device, torch.float64
        t, j = self.positions(L, dev)
        tf, jf = t.to(f64), j.to(f64)
        ones_t, ones_j = torch.ones_like(tf), torch.ones_like(jf)

        self.block = block

        def pairs(factor: Factor) -> Pairs:
            return Pairs.of(factor, L, block)

        self.causal = pairs(Factor(Separable(ones_t[None, :, None], ones_j[None, :, None])))
        if self.vector:
            # The weights live inside the sums over key dimensions (`weighted`, `rows`, `cols`);
            # as a pair matrix of its own, only the bound w_tjm <= 1 (`_bounds.overflow`).
            self.W = self.causal
        else:
            one = Separable(ones_t[None, :, None], ones_j[None, :, None], G[..., None])
            self.W = pairs(Factor(one))
        dec, C = int(self.decay), self.recipe.chunk_size
        # Each form's count is f(t) + g(j) (``_count_parts``); so is their sum.
        f_chunk = C + 1 + 2 * dec + (1 + dec) * self.chunk_of(tf)
        g_chunk = -(1 + dec) * self.chunk_of(jf)
        f_rec, g_rec = 2 + (1 + dec) * tf, -(1 + dec) * jf
        f_fwd = self._forms(parallel=tf + 1 + dec, chunk=f_chunk, recurrent=f_rec)
        g_fwd = self._forms(parallel=0 * jf, chunk=g_chunk, recurrent=g_rec)
        f_rev = self._forms(parallel=0 * tf, chunk=f_chunk, recurrent=f_rec)
        g_rev = self._forms(parallel=L - jf + 1 + dec, chunk=g_chunk, recurrent=g_rec)
        self.acc_fwd = pairs(_sum_of(f_fwd, g_fwd))
        self.acc_rev = pairs(_sum_of(f_rev, g_rev))
        self.W_abs = pairs(_sum_of(self.lam * (tf + 2), -self.lam * jf))
        if self.decay and not self.vector:
            f, g, near, unit = self.separable_weight_error()
            self.eps_w = pairs(replace(_sum_of(f, g), near=near, block=unit))
        elif not self.vector:
            self.eps_w = pairs(_sum_of(0 * tf, 0 * jf))

    def _forms(
        self, *, parallel: torch.Tensor, chunk: torch.Tensor, recurrent: torch.Tensor
    ) -> torch.Tensor:
        form = self.recipe.form
        if form == "parallel":
            return parallel
        if form == "chunk":
            return chunk
        if form == "recurrent":
            return recurrent
        return parallel + chunk + recurrent

    def _feature_error(self, x: torch.Tensor, feature_map: str) -> torch.Tensor:
        """Δφ(x): absolute error of the kernel's φ(x)."""
        u = self.units.arith
        if feature_map == "elu1":
            if self.recipe.naive_elu1:
                return torch.full_like(x, 2 * u) + self.units.underflow
            pos = u * (x + 1).abs()
            neg = exp_error(x, u) * torch.exp(torch.clamp(x, max=0)) + self.units.underflow
            return torch.where(x > 0, pos, neg)
        if feature_map == "exp":
            return exp_error(x, u) * torch.exp(x) + self.units.underflow
        # Exact features: zeros, one element expanded (as large as x, never stored so).
        return x.new_zeros(()).expand(x.shape)

    def _derivative_error(self, x: torch.Tensor, feature_map: str) -> torch.Tensor:
        """Absolute error of the kernel's φ'(x) (only exp, elu1's exp branch included, rounds)."""
        if feature_map == "exp":
            return exp_error(x, self.units.arith) * torch.exp(x) + self.units.underflow
        if feature_map == "elu1":
            neg = exp_error(x, self.units.arith) * torch.exp(torch.clamp(x, max=0))
            return torch.where(x > 0, torch.zeros_like(x), neg + self.units.underflow)
        return torch.zeros_like(x)

    def outer(self, a: torch.Tensor, b: torch.Tensor) -> PairMatrix:
        """The pair matrix a_t·b_j over tokens, ``[H, L, L]``, for a, b ``[H, L, R]``."""
        if not self.lazy:
            return a @ b.transpose(-1, -2)
        b0 = torch.cat([torch.zeros_like(b[:, :1]), b], 1)
        return Pairs.of(Factor(Separable(a, b0)), self.L, self.block)

    def column(self, y: torch.Tensor) -> PairMatrix:
        """The pair matrix y_j over tokens (every row alike), for y ``[H, L]``."""
        if not self.lazy:
            return y[:, None, :]
        assert isinstance(self.causal, Pairs)
        return self.causal.lift(y[:, None, :])

    def token_pairs(self) -> torch.Tensor | float:
        """1 for every pair of tokens j <= t: ``[L, L]`` (a `Pairs` is causal already: 1)."""
        if not self.lazy:
            pairs: torch.Tensor = self.causal[:, 1:].to(torch.float64)
            return pairs
        return 1.0

    def keys_seen_by(self, rows: torch.Tensor) -> torch.Tensor:
        """Keys with a nonzero weight in some row t >= j marked in ``rows`` ``[H, L]`` (bool).

        ``[H, L]``, or ``[H*K, L]`` for a vector gate (head-major rows, one per dimension).
        """
        if not self.lazy:
            seen: torch.Tensor = (self.W[..., 1:] > 0) & rows.repeat_interleave(
                self.W.shape[0] // rows.shape[0], 0
            )[..., None]
            return seen.any(-2)
        if not bool(rows.any()):
            # No row marked (the usual case): no key is seen, and the bisection below, log L
            # passes of exp and gathers over [H*K, L], is skipped.
            n = self.H * (self.K if self.vector else 1)  # G's rows, without forming G
            return torch.zeros(n, self.L, dtype=torch.bool, device=rows.device)
        # The weight exp(G_t - G_j) falls with t (g <= 0): row t sees key j up to the last t
        # where it is still nonzero, found by bisection on the same float64 exp.
        last = _last_nonzero_weight(self.G)  # [rows, L]
        marked = rows.repeat_interleave(self.G.shape[0] // rows.shape[0], 0).to(torch.int64)
        before = torch.cat([torch.zeros_like(marked[:, :1]), marked.cumsum(-1)], -1)  # [., L+1]
        j = torch.arange(1, self.L + 1, device=rows.device)
        return (before.gather(-1, last) - before[:, j - 1]) > 0

    def block_terms(self, G: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The decay scan's block size, and per position 0..L: block, |G| since its start, total.

        The total is the block's |ΣG|, 0 for the initial state (position 0). Kept for the
        sequence's own G: the scan asks for it once per block (O(L) each).
        """
        if G is self.G and self._blocks_of_G is not None:
            return self._blocks_of_G
        scan = self.recipe.decay_scan
        block = self.recipe.chunk_size if scan == "chunk_local" else max(self.L, 1)
        pos = torch.arange(0, self.L + 1, device=G.device)
        blk = torch.where(pos > 0, torch.div(pos - 1, block, rounding_mode="floor"), -1)
        start = torch.clamp(blk * block, min=0)  # position whose G the block's cumsum starts from
        G_local = (G - G[:, start]).abs()  # [H, L+1]
        end = torch.clamp((blk + 1) * block, max=self.L)
        G_block_total = torch.where(blk >= 0, (G[:, end] - G[:, start]).abs(), 0.0)
        if G is self.G:
            self._blocks_of_G = (block, blk, G_local, G_block_total)
        return block, blk, G_local, G_block_total

    def weight_error(
        self, G: torch.Tensor, D: torch.Tensor, t: torch.Tensor, j: torch.Tensor
    ) -> torch.Tensor:
        """ε_w(t, j): relative error of the kernel's decay weight exp(G_t - G_j).

        On a folded value gate (``gate_factors`` = 2: `linattn_verify.linear_attn.value_gate`)
        the kernel forms the weight as two, exp(G^k_t - G^k_j) exp(G^v_t - G^v_j); each factor
        errs by at most ε_w of the folded gate (its exponents, sums and counts are no larger:
        every gate is <= 0, so the folded magnitudes add), and the products that join them add
        one rounding per step or piece, at most ε_w again (error model §2.9): (2f - 1) ε_w.
        """
        return self._weight_error(G, D, t, j) * self.gate_factor

    @property
    def gate_factor(self) -> int:
        """What every ε_w is multiplied by: 2·gate_factors - 1 (`weight_error`)."""
        return 2 * self.problem.gate_factors - 1

    def _weight_error(
        self, G: torch.Tensor, D: torch.Tensor, t: torch.Tensor, j: torch.Tensor
    ) -> torch.Tensor:
        u = self.units.arith
        absD = torch.nan_to_num(D.abs(), posinf=0.0)  # masked entries: their weight is 0 anyway
        scan = self.recipe.decay_scan
        if scan == "per_step":
            return 4 * u * (t[:, None] - j[None, :]).clamp(min=0).to(G.dtype) + 2.4 * u * absD
        block, blk, G_local, G_block_total = self.block_terms(G)
        bt, bj = blk[t][:, None], blk[j][None, :]
        same = bt == bj
        pieces = torch.where(same, 1, bt - bj + 1).clamp(min=1).to(G.dtype)
        Gt, Gj = G_local[:, t][:, :, None], G_local[:, j][:, None, :]
        local = Gt + Gj + torch.where(same, 0.0, G_block_total[:, j][:, None, :] + absD)
        eps_w = pieces * 5 * u + 3.4 * u * absD + block * u * local
        if self.causal_exact:
            return eps_w
        # docs/error-model.md §4.1: a kernel may split each piece at a reference point r of
        # its block, exp(G_t - G_r) exp(G_r - G_j) (FLA's chunk-end reference): two more exps
        # and a multiply per block touched, each exponent at most the block's total, formed
        # from block-local sums. Which r depends on later tokens of the block: so do the bits.
        reach = G_block_total[:, t][:, :, None] + torch.where(
            same, 0.0, G_block_total[:, j][:, None, :]
        )
        if scan == "global" and self.packed_offset is not None:
            # Both cumulative sums start at the packed row's, |G_0| behind: each errs by
            # L_b u |G_0| more, and the exponent difference by 2u |G_0| more.
            reach = reach + self.packed_offset.reshape(-1, 1, 1)
        return eps_w + 2 * pieces * 5 * u + (2 * 3.4 * u + block * u) * reach

    def separable_weight_error(self) -> tuple[torch.Tensor, torch.Tensor, Near, int]:
        """ε_w within a scan block (``near``, `weight_error`) and f(t) + g(j) across blocks.

        Returns f ``[rows, L]``, g ``[rows, L+1]`` (rows: heads, or head-major (head, key
        dimension) pairs for a vector gate), ``near`` and the block size scan blocks must be a
        multiple of.

        Across blocks (j in an earlier chunk than t, for a chunk-local scan), with
        G̃ = -G non-decreasing (g <= 0), |G_t - G_j| = G̃_t - G̃_j, and every other part of
        `weight_error` is a function of t's or of j's block, so ε_w = f(t) + g(j). A global
        scan has one block: its pairs of tokens are all "same block", also f(t) + g(j).
        """
        G, u, L = self.G, self.units.arith, self.L
        f64, dev = torch.float64, G.device
        t, j = self.positions(L, dev)
        tf, jf = t.to(f64), j.to(f64)
        Gn = -G  # [H, L+1]
        scan = self.recipe.decay_scan
        if scan == "per_step":
            f = 4 * u * tf + 2.4 * u * Gn[:, 1:]
            g = -4 * u * jf - 2.4 * u * Gn
        else:
            B, blk, G_local, GBT = self.block_terms(G)
            bt, bj = blk[1:].to(f64), blk.to(f64)
            if scan == "chunk_local":  # never the same block across scan blocks
                f = 5 * u * (bt + 1) + (3.4 * u + B * u) * Gn[:, 1:] + B * u * G_local[:, 1:]
                g = -5 * u * bj - (3.4 * u + B * u) * Gn + B * u * (G_local + GBT)
                if not self.causal_exact:
                    f = f + 10 * u * (bt + 1) + (6.8 * u + B * u) * GBT[:, 1:]
                    g = g - 10 * u * bj + (6.8 * u + B * u) * GBT
            else:  # global: one block, pieces = 1, G_local = G̃
                f = 5 * u + 3.4 * u * Gn[:, 1:] + B * u * G_local[:, 1:]
                g = -3.4 * u * Gn + B * u * G_local
                if not self.causal_exact:
                    reach = GBT[:, 1:]
                    if self.packed_offset is not None:
                        reach = reach + self.packed_offset[:, None]
                    f = f + 10 * u + (6.8 * u + B * u) * reach

        def near(tt: torch.Tensor, jj: torch.Tensor) -> torch.Tensor:
            causal = jj[None, :] <= tt[:, None]
            D = (G[:, tt, None] - G[:, None, jj]).masked_fill(~causal, float("-inf"))
            return self.weight_error(G, D, tt, jj)

        m = self.gate_factor
        return m * f, m * g, near, self.recipe.chunk_size if scan == "chunk_local" else 1


def _packed_offset(p: Problem, b: int, start: int) -> torch.Tensor | None:
    """|Σ g| over the packed row before a sequence, or `None` without decay or packing.

    Per head, or per head and key dimension (head-major) for a vector gate.
    """
    if p.g is None or p.cu_seqlens is None:
        return None
    before = p.g[b, :start].sum(0).abs()  # [H] or [H, K]
    return before.reshape(-1)


def _last_nonzero_weight(G: torch.Tensor) -> torch.Tensor:
    """For each key j = 1..L, the last t >= j with exp(G_t - G_j) > 0 (G non-increasing)."""
    rows, L = G.shape[0], G.shape[1] - 1
    j = torch.arange(1, L + 1, device=G.device).expand(rows, -1)
    lo, hi = j.clone(), torch.full_like(j, L)  # exp(G_j - G_j) = 1: t = j is always nonzero
    while bool((lo < hi).any()):
        mid = (lo + hi + 1) // 2
        alive = torch.exp(G.gather(-1, mid) - G.gather(-1, j)) > 0
        lo = torch.where(alive, mid, lo)
        hi = torch.where(alive, hi, mid - 1)
    return lo


def _sum_of(f: torch.Tensor, g: torch.Tensor) -> Factor:
    """The pair function f(t) + g(j): f ``[L]`` or ``[H, L]``, g ``[L+1]`` or ``[H, L+1]``."""
    f2 = f if f.ndim == 2 else f[None]
    g2 = g if g.ndim == 2 else g[None]
    H = max(f2.shape[0], g2.shape[0])
    a = torch.stack([f2.expand(H, -1), torch.ones_like(f2).expand(H, -1)], -1)
    b = torch.stack([torch.ones_like(g2).expand(H, -1), g2.expand(H, -1)], -1)
    return Factor(Separable(a.to(torch.float64), b.to(torch.float64)))


@dataclass
class MainTerms:
    """The gate-specific sums of one sequence's forward bound (docs/error-model.md §2.2).

    The scalar-gate and vector-gate paths compute these;
    `linattn_verify.linear_attn._bounds.forward` adds the absolute terms (underflow, casts) and the
    quotient, which do not depend on the gate. Row quantities are ``[H, L, V]`` (N), ``[H, L]`` (Z);
    state ones ``[H, K, V]``, ``[H, K]``.
    """

    N: torch.Tensor  # exact numerator
    M_N: torch.Tensor  # its magnitude
    B_N: torch.Tensor  # its bound, relative and feature-error terms only
    S_T: torch.Tensor
    M_S: torch.Tensor
    B_S: torch.Tensor  # relative and feature-error terms only
    z_T: torch.Tensor
    M_z: torch.Tensor
    B_z: torch.Tensor
    live_end: torch.Tensor  # [H, L]: 1 where some weight of key j in the final state is nonzero
    Z: torch.Tensor | None = None  # exact denominator without eps (normalized problems only)
    M_Z: torch.Tensor | None = None  # its magnitude without eps
    B_Z: torch.Tensor | None = None  # its bound, relative and feature-error terms only
