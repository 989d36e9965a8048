# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Unit roundoffs of a recipe, and the T x (T+1) term structure of one sequence.

The derivation of every count and error term is in `linattn_verify.linear_attn.tolerance`'s
docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.linear_attn._bounds import lifted
from linattn_verify.linear_attn.feature_maps import feature_map_derivative
from linattn_verify.linear_attn.recipe import DivisionLimits, PrecisionRecipe, dtype_name
from linattn_verify.linear_attn.semantics import Problem

SMALLEST_NORMAL_FP32 = 2.0**-126
"""A feature exp(x) below this may be flushed to zero: an absolute error of at most this."""

HALF_SMALLEST_SUBNORMAL = {
    "float64": 2.0**-1075,
    "float32": 2.0**-150,
    "float16": 2.0**-25,
    "bfloat16": 2.0**-134,
}
"""Largest absolute error of rounding a tiny value to each format (gradual underflow)."""


@dataclass(frozen=True)
class Units:
    """The unit roundoffs a recipe implies for one input dtype."""

    acc: float  # accumulation
    arith: float  # elementwise arithmetic (exp, φ, multiplies)
    per_term: float  # casts to the intermediate dtype and tf32 operands, per term
    out: float  # rounding of the output to the input dtype (0 when it is the fp32 result)
    div: float
    underflow: float  # absolute error of one operation whose result underflows (FTZ-safe)
    out_abs: float  # absolute error of rounding a result below the output dtype's normal range
    cast_abs: float  # the same for one cast to the intermediate dtype, times casts on a path
    # A reciprocal division's 1/Z: its absolute error below the normal range, and its dtype's
    # smallest normal and largest finite value (0, 0 and inf for a direct division).
    reciprocal_abs: float = 0.0
    reciprocal_tiny: float = 0.0
    reciprocal_max: float = float("inf")
    # A division in the input dtype rounds fp32 N and Z to it first: below its normal range
    # each cast loses up to half its smallest subnormal (0 when nothing is cast).
    division_cast_abs: float = 0.0
    # One operation of the backward's quotient adjoints (dN = do/Z, dZ = -(do·N)/Z^2, in the
    # division's dtype) whose result is below that dtype's normal range errs by up to this much,
    # absolutely (docs/error-model.md §5, "Quotient adjoints below the normal range").
    adjoint_abs: float = 0.0
    # The largest value of the input dtype where the kernel computes (``overflow_arith``) or
    # divides (``overflow_division``) in it, inf elsewhere (`_bounds.overflow`).
    overflow_arith: float = float("inf")
    overflow_division: float = float("inf")

    @property
    def lost_intermediate(self) -> float:
        """Absolute error of an intermediate product lost to underflow or a cast.

        A partial product of a term (w·dP, P·ζ, q·e^G, ...) that underflows, or that is cast to
        the intermediate dtype, loses up to this much before the term's remaining factors
        multiply it; four such partial products per term cover every evaluation order of the
        (at most five-factor) terms here.
        """
        return self.cast_abs + 4 * self.underflow

    @staticmethod
    def of(recipe: PrecisionRecipe, dtype: torch.dtype) -> Units:
        name = dtype_name(dtype)
        out = 0.0 if name in ("float32", "float64") else UNIT_ROUNDOFF[name]
        float64 = recipe.accumulation == "float64"
        low = recipe.intermediate_dtype
        low_name = name if low == "input" else low
        limits = recipe.division_limits(dtype) or DivisionLimits(0.0, 0.0, float("inf"))
        narrow = name not in ("float32", "float64") and not float64
        largest = float(torch.finfo(dtype).max) if narrow else float("inf")
        # With flush-to-zero an underflowing result can lose all of the smallest normal: of
        # the arithmetic's format (the input dtype's for arithmetic in the input dtype).
        underflow = (
            2.0**-1022
            if float64
            else max(SMALLEST_NORMAL_FP32, _smallest_normal(dtype))
            if recipe.accumulation == "input"
            else SMALLEST_NORMAL_FP32
        )
        narrow_division = narrow and recipe.division_dtype == "input"
        return Units(
            acc=recipe.u_acc(dtype),
            arith=recipe.u_arith(dtype),
            per_term=recipe.casts_on_path * recipe.u_low(dtype)
            + recipe.dots_on_path * 2 * recipe.u_op,
            out=out,
            div=recipe.u_div(dtype),
            underflow=underflow,
            out_abs=HALF_SMALLEST_SUBNORMAL[name],
            cast_abs=0.0
            if low_name is None
            else recipe.casts_on_path * HALF_SMALLEST_SUBNORMAL[low_name],
            reciprocal_abs=limits.subnormal_abs,
            reciprocal_tiny=limits.smallest_normal,
            reciprocal_max=limits.largest,
            division_cast_abs=HALF_SMALLEST_SUBNORMAL[name]
            if recipe.division_dtype == "input" and recipe.accumulation not in ("float64", "input")
            else 0.0,
            adjoint_abs=max(underflow, HALF_SMALLEST_SUBNORMAL[name])
            if narrow_division
            else underflow,
            overflow_arith=largest if recipe.accumulation == "input" else float("inf"),
            overflow_division=largest
            if recipe.division_dtype == "input" or recipe.accumulation == "input"
            else float("inf"),
        )


def _smallest_normal(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).smallest_normal)


def exp_error(x: torch.Tensor, u: float) -> torch.Tensor:
    """ε_exp(x) = (4 + 2.4|x|) u: relative error of ``tl.exp`` (ex2.approx) on fp32."""
    return (4 + 2.4 * x.abs()) * u


class SequenceTerms:
    """The T x (T+1) term structure of one sequence (all heads), in float64.

    Column 0 of every [H, T, T+1] matrix is the virtual key j = 0 that stands for the initial
    state; columns 1..T are the tokens.

    With a vector gate (``vector``; g ``[B, T, H, K]``) the decay quantities ``G``, ``W``,
    ``W_end``, ``eps_w`` and ``eps_w_end`` have one row per (head, key dimension), head-major
    (``[H*K, ...]``, viewed as ``[H, K, ...]`` by `linattn_verify.linear_attn._bounds.vector`): the
    weights w_tjm = exp(G_tm - G_jm) of all T x (T+1) x K terms, O(T²K) float64 memory per head.
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
    ) -> None:
        p = problem
        self.units = units
        self.recipe = recipe
        # A kernel that does not promise bit-exact causality may take its decays from a
        # reference point anywhere in the block (`_weight_error`), and a global scan may run
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
        if p.lifted:
            under = self.units.underflow
            self.q_err = lifted.feature_error(p, q, self.q_feat, units.arith, under, query=True)
            self.k_err = lifted.feature_error(p, k, self.k_feat, units.arith, under, query=False)
        else:
            self.q_err = self._feature_error(q, p.feature_map)
            self.k_err = self._feature_error(k, p.feature_map)
            self.q_dphi = feature_map_derivative(q, p.feature_map)
            self.q_dphi_err = self._derivative_error(q, p.feature_map)
            self.k_dphi = feature_map_derivative(k, p.feature_map)
            self.k_dphi_err = self._derivative_error(k, p.feature_map)
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
        t = torch.arange(1, L + 1, device=dev)  # token positions 1..L
        j = torch.arange(0, L + 1, device=dev)  # key positions, 0 = initial state
        causal = j[None, :] <= t[:, None]  # [L, L+1]
        decay = p.g is not None
        self.vector = p.vector_gate
        if decay:
            assert p.g is not None
            if self.vector:
                # One row per (head, key dimension), head-major: every decay quantity below is
                # elementwise in its leading dimension, so it is the scalar one per dimension.
                g = p.g[b, start:end].permute(1, 2, 0).reshape(H * K, L)  # [H*K, L]
            else:
                g = p.g[b, start:end].transpose(0, 1)  # [H, L]
            rows = g.shape[0]
            G = torch.cat([torch.zeros(rows, 1, dtype=f64, device=dev), torch.cumsum(g, -1)], -1)
        else:
            G = torch.zeros(H, L + 1, dtype=f64, device=dev)
        self.G = G  # [H, L+1] ([H*K, L+1] for a vector gate), G[:, 0] = 0
        D = (G[:, 1:, None] - G[:, None, :]).masked_fill(~causal, float("-inf"))  # [H, L, L+1]
        self.W = torch.exp(D)  # zero above the diagonal
        self.causal = causal
        self.W_end = torch.exp(G[:, -1:] - G)  # [H, L+1]: weight of key j in the final state
        dec = int(decay)
        C = recipe.chunk_size
        tt, jj = t[:, None].to(f64), j[None, :].to(f64)

        def chunk_of(x: torch.Tensor) -> torch.Tensor:
            """Chunk index of positions 1..L; the initial state (0) sits in chunk -1."""
            return torch.where(x > 0, torch.div(x - 1, C, rounding_mode="floor"), -1.0)

        crossings = chunk_of(tt) - chunk_of(jj)
        self.acc_fwd = self._forms(
            parallel=tt + 1 + dec,
            chunk=C + (1 + dec) * crossings + 1 + 2 * dec,
            recurrent=2 + (1 + dec) * (tt - jj),
        )  # [L, L+1], roundings of accumulation along a row (over j)
        self.acc_rev = self._forms(
            parallel=(L - jj + 1) + dec + 0 * tt,
            chunk=C + (1 + dec) * crossings + 1 + 2 * dec,
            recurrent=2 + (1 + dec) * (tt - jj),
        )  # [L, L+1], roundings of accumulation along a column (over t)
        Lf = float(L)
        end_crossings = chunk_of(torch.tensor(Lf, dtype=f64, device=dev)) - chunk_of(j.to(f64))
        self.acc_state = self._forms(
            parallel=Lf + 2 + dec + 0 * j.to(f64),
            chunk=C + (1 + dec) * end_crossings + 2 + 2 * dec,
            recurrent=2 + (1 + dec) * (Lf - j.to(f64)),
        )  # [L+1], roundings of a final-state term φ(k_j) v_j w_Tj
        if decay:
            self.eps_w = self._weight_error(G, D, t, j)  # [H, L, L+1]
            self.eps_w_end = (
                self._weight_error(
                    G, (G[:, -1:] - G)[:, None, :], torch.tensor([L], device=dev), j
                )[:, 0]
                if L
                else torch.zeros(G.shape[0], 1, dtype=f64, device=dev)
            )  # [H, L+1]
        else:
            self.eps_w = torch.zeros(1, L, L + 1, dtype=f64, device=dev)
            self.eps_w_end = torch.zeros(1, L + 1, dtype=f64, device=dev)
        # A decay weight that underflows loses up to one smallest normal per exp or product
        # that forms it, whatever its relative error: an absolute error, amplified by the
        # term's other factors (|A| |v| can be huge). At most t - j + 2 such operations.
        lam = self.units.underflow * dec
        self.W_abs = torch.where(causal, lam * (tt - jj + 2), 0.0)[None]  # [1, L, L+1]
        self.W_end_abs = (lam * (Lf - j.to(f64) + 2))[None]  # [1, L+1]

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
        return torch.zeros_like(x)

    def _derivative_error(self, x: torch.Tensor, feature_map: str) -> torch.Tensor:
        """Absolute error of the kernel's φ'(x) (only elu1's exp branch rounds)."""
        if feature_map == "elu1":
            neg = exp_error(x, self.units.arith) * torch.exp(torch.clamp(x, max=0))
            return torch.where(x > 0, torch.zeros_like(x), neg + self.units.underflow)
        return torch.zeros_like(x)

    def _weight_error(
        self, G: torch.Tensor, D: torch.Tensor, t: torch.Tensor, j: torch.Tensor
    ) -> torch.Tensor:
        """ε_w(t, j): relative error of the kernel's decay weight exp(G_t - G_j)."""
        u = self.units.arith
        absD = torch.nan_to_num(D.abs(), posinf=0.0)  # masked entries: their weight is 0 anyway
        scan = self.recipe.decay_scan
        if scan == "per_step":
            return 4 * u * (t[:, None] - j[None, :]).clamp(min=0).to(G.dtype) + 2.4 * u * absD
        block = self.recipe.chunk_size if scan == "chunk_local" else max(self.L, 1)
        pos = torch.arange(0, self.L + 1, device=G.device)
        blk = torch.where(pos > 0, torch.div(pos - 1, block, rounding_mode="floor"), -1)
        start = torch.clamp(blk * block, min=0)  # position whose G the block's cumsum starts from
        G_local = (G - G[:, start]).abs()  # [H, L+1]
        end = torch.clamp((blk + 1) * block, max=self.L)
        G_block_total = torch.where(blk >= 0, (G[:, end] - G[:, start]).abs(), 0.0)
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


def _packed_offset(p: Problem, b: int, start: int) -> torch.Tensor | None:
    """|Σ g| over the packed row before a sequence, or `None` without decay or packing.

    Per head, or per head and key dimension (head-major) for a vector gate.
    """
    if p.g is None or p.cu_seqlens is None:
        return None
    before = p.g[b, :start].sum(0).abs()  # [H] or [H, K]
    return before.reshape(-1)


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
    live_tok: torch.Tensor  # [H, L, L]: 1 where some weight of term (t, j) is nonzero
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
