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
from linattn_verify.linear_attn._bounds.weight_errors import (
    DecayBlocks,
    error_of_rows,
    separable_parts,
)
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

WEIGHT_ERROR_ELEMENTS = 1 << 18
"""Elements of one block of rows of `SequenceTerms.weight_error` (2 MiB of float64 each)."""

SCAN_TOKENS = 128
"""Tokens per block of that scan (rounded up to a multiple of the recipe's chunk size)."""


_INPUTS = ("problem", "q_in", "k_in", "v", "q_feat", "k_feat", "q_err", "k_err", "S0", "z0")
"""`SequenceTerms`' attributes taken from the problem (`SequenceTerms.bind`)."""


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

    # Taken from the problem by `bind`, dropped by `release_inputs`.
    problem: Problem
    q_in: torch.Tensor
    k_in: torch.Tensor
    v: torch.Tensor
    q_feat: torch.Tensor
    k_feat: torch.Tensor
    q_err: torch.Tensor
    k_err: torch.Tensor
    S0: torch.Tensor
    z0: torch.Tensor

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
        self.signed_scale = p.outer_scale
        self.scale = abs(p.outer_scale)
        self._sequence = n
        self._tokens = (b, start, end)
        self.bind(p)
        q = self.q_in
        H, L = q.shape[:2]
        # K is the state's rows: the feature dimension F of a lifted map.
        K, V = p.feature_dim, self.v.shape[-1]
        self.H, self.L, self.K, self.V = H, L, K, V
        # The rounding count of one feature dot (`lifted.dot_length` for a lifted map).
        self.dot_length = lifted.dot_length(p) if p.lifted else K
        dev, f64 = q.device, torch.float64
        decay = p.g is not None
        self.vector = p.vector_gate
        # G, W_end and eps_w_end, formed on first use (`release_decays` drops them).
        self._decays: dict[str, torch.Tensor] = {}
        # The scan's block size, and each position's block and its ends (`_blocks`).
        self._decay_blocks: DecayBlocks | None = None
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

    def bind(self, p: Problem) -> None:
        """Take this sequence's inputs from ``p`` (float64), views where they can be.

        q, k, v, their features and feature errors, S_0 and z_0.

        `release_inputs` drops them, and a later ``bind`` of the same problem forms them again
        (the same arithmetic): between the forward and the gradient bounds, and between head
        groups, only the group under evaluation holds its float64 inputs.
        """
        n, (b, start, end) = self._sequence, self._tokens
        units = self.units
        self.problem = p
        q = p.q[b, start:end].transpose(0, 1)  # [H, L, K]
        k = p.k[b, start:end].transpose(0, 1)
        self.q_in, self.k_in = q, k
        self.v = p.v[b, start:end].transpose(0, 1)  # [H, L, V]
        H, K, V = q.shape[0], p.feature_dim, self.v.shape[-1]
        dev, f64 = q.device, torch.float64
        self.q_feat = p.query_features(q)
        self.k_feat = p.key_features(k)
        # Each side's map its own way: queries may take a map of their own (softmax over
        # "efficient attention"'s features, exp on its keys).
        under = units.underflow
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

    def release_inputs(self) -> None:
        """Drop what `bind` took (reading one of them before the next ``bind`` is an error)."""
        for name in _INPUTS:
            self.__dict__.pop(name, None)

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
            self._decay_blocks = None

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

    @property
    def decay_blocks(self) -> DecayBlocks:
        """The decay scan's blocks over positions 0..L (`weight_errors.DecayBlocks`)."""
        if self._decay_blocks is None:
            r = self.recipe
            self._decay_blocks = DecayBlocks.of(r.decay_scan, r.chunk_size, self.L, self.G.device)
        return self._decay_blocks

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
        # Every operation is elementwise over G's rows: a vector gate's [H*K, ...] rows are
        # evaluated a block at a time (the same arithmetic), so the ten or so temporaries are
        # each one block, not one token tensor.
        scan = self.recipe.decay_scan
        blocks = None if scan == "per_step" else self.decay_blocks
        offset = self.packed_offset

        def of_rows(r: slice) -> torch.Tensor:
            return error_of_rows(
                D[r],
                t,
                j,
                G[r],
                blocks,
                u=self.units.arith,
                scan=scan,
                causal_exact=self.causal_exact,
                packed_offset=None if offset is None else offset[r],
            ).mul_(self.gate_factor)

        rows = D.shape[0]
        per = max(1, WEIGHT_ERROR_ELEMENTS // max(1, D[0].numel()))
        if rows <= per or rows != G.shape[0]:  # one block (or D broadcast over G's rows)
            return of_rows(slice(None))
        first = of_rows(slice(0, per))
        out = first.new_empty(rows, *first.shape[1:])
        out[:per] = first
        del first
        for r0 in range(per, rows, per):
            out[r0 : r0 + per] = of_rows(slice(r0, r0 + per))
        return out

    @property
    def gate_factor(self) -> int:
        """What every ε_w is multiplied by: 2·gate_factors - 1 (`weight_error`)."""
        return 2 * self.problem.gate_factors - 1

    def separable_weight_error(self) -> tuple[torch.Tensor, torch.Tensor, Near, int]:
        """ε_w within a scan block (``near``, `weight_error`) and f(t) + g(j) across blocks.

        Returns f ``[rows, L]``, g ``[rows, L+1]`` (`weight_errors.separable_parts`; rows:
        heads, or head-major (head, key dimension) pairs for a vector gate), ``near`` and the
        block size scan blocks must be a multiple of.
        """
        G, scan = self.G, self.recipe.decay_scan
        f, g = separable_parts(
            G,
            self.decay_blocks,
            u=self.units.arith,
            scan=scan,
            causal_exact=self.causal_exact,
            packed_offset=self.packed_offset,
        )

        def near(tt: torch.Tensor, jj: torch.Tensor) -> torch.Tensor:
            causal = jj[None, :] <= tt[:, None]
            D = (G[:, tt, None] - G[:, None, jj]).masked_fill(~causal, float("-inf"))
            return self.weight_error(G, D, tt, jj)

        m = self.gate_factor
        f *= m
        g *= m
        return f, g, near, self.recipe.chunk_size if scan == "chunk_local" else 1


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
