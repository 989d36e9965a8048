# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Condition-aware error bounds for linear attention (ERROR_MODEL.md §2-§5).

Every output element is a sum of product terms τ. A kernel computes Σ τ(1 + θ_τ) with
|θ_τ| <= U_τ, where U_τ counts the roundings on τ's path (times the unit roundoff) plus the
relative errors of its factors (decay weight, casts, tf32 operands). Hence (Higham §3.1, §3.4)

    |x̂ - x| <= Σ_τ U_τ |τ| + (errors of φ, carried as absolute errors of the features)  =: B(x)

For the numerator of row t the terms are τ_tjmi = s φ(q_tm) φ(k_jm) w_tj v_ji (j <= t), plus the
initial-state terms s φ(q_tm) w_t0 S0_mi, which we index as a virtual key j = 0. U_τ depends only
on (t, j), so with the T x (T+1) matrix U and the weights W the bound is a pair of float64 GEMMs:

    B^N = |s| ((U ⊙ W ⊙ |Q̃||K̃|^T + W ⊙ E^φ) |V| + (U_0 ⊙ w_0) ⊙ |Q̃||S_0| + w_0 ⊙ Δφ(Q)|S_0|)

with E^φ = Δφ(Q)|K̃|^T + |Q̃|Δφ(K)^T and Δφ the absolute error of a feature. The magnitude M is the
same expression with U replaced by 1 and no E^φ.

**Rounding counts** c(t, j) in units of u_acc, per form (ERROR_MODEL.md §2.4; dec = 1 with decay):

    parallel   K + (t + 1) + dec                 (a K-dot, then a row of t + 1 terms)
    chunk      K + C + (1+dec)(n(t) - n(j)) + 1 + 2 dec   (n = chunk index, n(0) = -1)
    recurrent  K + 2 + (1+dec)(t - j)
    unknown    the sum of the three form-specific parts (an upper bound of each)

plus 2 for the scale (its rounding to fp32 and the multiply). The denominator adds 1 for eps.
Final-state terms φ(k_jm) v_ji w_Tj carry no K-dot and no scale.

**Decay weights** (ERROR_MODEL.md §4). With ε_exp(x) = (4 + 2.4|x|) u (``ex2.approx``) and
D = G_t - G_j:

    per_step     (t - j) 4u + 2.4u|D|                      (a product of exp(g_s))
    chunk_local  pieces of (j, t] cut at block boundaries (block = C): each piece an exp of a
    / global     difference of block-local cumsums, so n_p (4u + u) + 3.4u|D| + L_b u Σ|local G|
                 where the cumsum error of a same-sign sum of at most L_b terms is L_b u |G_loc|
                 (block = the whole sequence for ``global``).

**Normalized output** (§2.3): o = N / Z. Forward bound (valid where B^Z < |Z|/2; other elements
are *unverifiable* and judged by the residual alone):

    B^o = (B^N + |o| B^Z) / (|Z| - B^Z) + (u_div + u_out)|o|
    η   = |N - ô Z| / (B^N + |ô| B^Z + (u_div + u_out)|ô||Z|)

Rows whose every term is exactly zero (M^Z = 0, the 0/0 row of `linattn_verify.semantics`) have
an exact result 0 and bound 0.

**Gradients** (§5). With δ_t = do_t·o_t, ζ_t = 1/|Z_t| (1 unnormalized) and
dP_tj = (do_t·v_j - δ_t) ζ_t, the magnitude of dP is R_tj = (|do_t|·|v_j| + |do_t|·|o_t|) ζ_t and

    dq̃_t = s Σ_j w_tj dP_tj k̃_j     dk̃_j = s Σ_t w_tj dP_tj q̃_t + w_Tj (dS_T v_j + dz_T)
    dv_j = s Σ_t w_tj A_tj ζ_t do_t + w_Tj dS_T^T k̃_j
    dG_t = q̃_t·dq̃_t - k̃_t·dk̃_t (+ ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ at t = T),  dg_s = Σ_{t>=s} dG_t

Each gradient term's relative error is u_acc (c_fwd + c_rev + V + 8) + ε_w + casts + tf32 +
e_Z(t), where c_rev counts the reverse accumulation (over t for fixed j; T - j + 1 + dec for the
parallel form) and e_Z = B^Z/|Z| the relative error of the kernel's denominator; the error of the
kernel's own ô used in δ_t contributes |do_t|·B^o_t ζ_t absolutely. The dg magnitude is the larger
row-sum-plus-column-sum one (the q·dq - k·dk algorithm), and its reverse cumsum adds (T - s + 1)
roundings. Gradient elements that depend on an unverifiable denominator are unverifiable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.feature_maps import apply_feature_map, feature_map_derivative
from linattn_verify.recipe import UNIT_ROUNDOFF, PrecisionRecipe, dtype_name
from linattn_verify.semantics import Problem

SMALLEST_NORMAL_FP32 = 2.0**-126
"""A feature exp(x) below this may be flushed to zero: an absolute error of at most this."""


@dataclass(frozen=True)
class Residual:
    """The pieces of the residual test for a normalized output (ERROR_MODEL.md §2.3)."""

    numerator: torch.Tensor  # N, exact (float64), [B, T, H, V]
    denominator: torch.Tensor  # Z (eps included), [B, T, H, 1]
    numerator_bound: torch.Tensor  # B^N
    denominator_bound: torch.Tensor  # B^Z, [B, T, H, 1]
    rounding: float  # u_div + u_out


@dataclass(frozen=True)
class TensorBound:
    """Reference value, rigorous bound and magnitude for every element of one tensor.

    Attributes:
        name: ``"o"``, ``"final_state"``, ``"dq"``, ...
        reference: The float64 oracle value.
        bound: The absolute error bound B (+inf where the element is unverifiable).
        magnitude: M, the same computation on absolute values (the scale of the rounding errors).
        count: The largest rounding count c among the element's terms (for ρ/√c).
        unit: u_acc, the unit ρ is measured in.
        single: Single-rounding error terms (casts, tf32, exp, division, output rounding), which
            do not average out (for the strict score).
        verifiable: Elements whose forward bound is meaningful (B^Z < |Z|/2 where it applies).
        eps_influence: eps / Z per row for normalized outputs, else `None`.
        residual: The residual-test pieces for normalized outputs, else `None`.
    """

    name: str
    reference: torch.Tensor
    bound: torch.Tensor
    magnitude: torch.Tensor
    count: torch.Tensor
    unit: float
    single: torch.Tensor
    verifiable: torch.Tensor
    eps_influence: torch.Tensor | None = None
    residual: Residual | None = None


@dataclass(frozen=True)
class ForwardBounds:
    """Bounds for the forward outputs; ``o``/``final_state``/``final_key_sum`` are the B tensors."""

    o: torch.Tensor
    final_state: torch.Tensor | None
    final_key_sum: torch.Tensor | None
    tensors: dict[str, TensorBound] = field(default_factory=dict)


@dataclass(frozen=True)
class _Units:
    """The unit roundoffs a recipe implies for one input dtype."""

    acc: float  # accumulation
    arith: float  # elementwise arithmetic (exp, φ, multiplies)
    per_term: float  # casts to the intermediate dtype and tf32 operands, per term
    out: float  # rounding of the output to the input dtype (0 when it is the fp32 result)
    div: float
    underflow: float  # absolute error of a feature that may underflow

    @staticmethod
    def of(recipe: PrecisionRecipe, dtype: torch.dtype) -> _Units:
        name = dtype_name(dtype)
        out = 0.0 if name in ("float32", "float64") else UNIT_ROUNDOFF[name]
        float64 = recipe.accumulation == "float64"
        return _Units(
            acc=recipe.u_acc,
            arith=recipe.u_arith,
            per_term=recipe.casts_on_path * recipe.u_low(dtype)
            + recipe.dots_on_path * 2 * recipe.u_op,
            out=out,
            div=recipe.u_div,
            underflow=2.0**-1022 if float64 else SMALLEST_NORMAL_FP32,
        )


def _exp_error(x: torch.Tensor, u: float) -> torch.Tensor:
    """ε_exp(x) = (4 + 2.4|x|) u: relative error of ``tl.exp`` (ex2.approx) on fp32."""
    return (4 + 2.4 * x.abs()) * u


class _Sequence:
    """The T x (T+1) term structure of one sequence (all heads), in float64.

    Column 0 of every [H, T, T+1] matrix is the virtual key j = 0 that stands for the initial
    state; columns 1..T are the tokens.
    """

    def __init__(
        self,
        problem: Problem,
        recipe: PrecisionRecipe,
        units: _Units,
        n: int,
        b: int,
        start: int,
        end: int,
    ) -> None:
        p = problem
        self.units = units
        self.recipe = recipe
        self.scale = abs(p.scale)
        q = p.q[b, start:end].transpose(0, 1)  # [H, L, K]
        k = p.k[b, start:end].transpose(0, 1)
        self.v = p.v[b, start:end].transpose(0, 1)  # [H, L, V]
        H, L, K = q.shape
        V = self.v.shape[-1]
        self.H, self.L, self.K, self.V = H, L, K, V
        dev, f64 = q.device, torch.float64
        self.q_feat = apply_feature_map(q, p.feature_map)
        self.k_feat = apply_feature_map(k, p.feature_map)
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
        if decay:
            assert p.g is not None
            g = p.g[b, start:end].transpose(0, 1)  # [H, L]
            G = torch.cat([torch.zeros(H, 1, dtype=f64, device=dev), torch.cumsum(g, -1)], -1)
        else:
            G = torch.zeros(H, L + 1, dtype=f64, device=dev)
        self.G = G  # [H, L+1], G[:, 0] = 0
        D = (G[:, 1:, None] - G[:, None, :]).masked_fill(~causal, float("-inf"))  # [H, L, L+1]
        self.W = torch.exp(D)  # zero above the diagonal
        self.causal = causal
        self.W_end = torch.exp(G[:, -1:] - G)  # [H, L+1]: weight of key j in the final state
        dec = int(decay)
        C = recipe.chunk_size
        tt, jj = t[:, None].to(f64), j[None, :].to(f64)
        chunk_of = lambda x: torch.where(x > 0, torch.div(x - 1, C, rounding_mode="floor"), -1.0)  # noqa: E731
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
                else torch.zeros(H, 1, dtype=f64, device=dev)
            )  # [H, L+1]
        else:
            self.eps_w = torch.zeros(1, L, L + 1, dtype=f64, device=dev)
            self.eps_w_end = torch.zeros(1, L + 1, dtype=f64, device=dev)

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
            neg = _exp_error(x, u) * torch.exp(torch.clamp(x, max=0)) + self.units.underflow
            return torch.where(x > 0, pos, neg)
        return torch.zeros_like(x)

    def _derivative_error(self, x: torch.Tensor, feature_map: str) -> torch.Tensor:
        """Absolute error of the kernel's φ'(x) (only elu1's exp branch rounds)."""
        if feature_map == "elu1":
            neg = _exp_error(x, self.units.arith) * torch.exp(torch.clamp(x, max=0))
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
        return pieces * 5 * u + 3.4 * u * absD + block * u * local


def _empty_like_rows(p: Problem, last: int) -> torch.Tensor:
    B, T, H = p.q.shape[:3]
    return torch.zeros(B, T, H, last, dtype=torch.float64, device=p.q.device)


def _assemble(p: Problem, pieces: list[torch.Tensor], last: int) -> torch.Tensor:
    """Stack per-sequence [H, L, X] pieces back into [B, T, H, X]."""
    if not pieces:
        return _empty_like_rows(p, last)
    rows = torch.cat([x.transpose(0, 1) for x in pieces], dim=0)
    return rows.reshape(*p.q.shape[:3], last)


def _prepare(problem: Problem, recipe: PrecisionRecipe) -> tuple[Problem, _Units]:
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.semantics.Problem but got "
            f"{type(problem).__name__}; build one with validate_problem(...)."
        )
    if not isinstance(recipe, PrecisionRecipe):
        raise InvalidArgument(
            f"Expected recipe to be a PrecisionRecipe but got {type(recipe).__name__}."
        )
    return problem.to(torch.float64), _Units.of(recipe, problem.q.dtype)


@dataclass
class _ForwardPieces:
    """Per-sequence forward quantities, kept for the gradient bounds."""

    seq: _Sequence
    Z: torch.Tensor  # [H, L, 1] (ones when unnormalized)
    B_Z: torch.Tensor  # [H, L, 1] (zeros when unnormalized)
    B_o: torch.Tensor  # [H, L, V] forward bound of o (0 where unverifiable: see `bad`)
    o: torch.Tensor  # [H, L, V]
    bad: torch.Tensor  # [H, L] rows with an unverifiable denominator


def _forward_sequence(seq: _Sequence, p: Problem) -> tuple[dict[str, torch.Tensor], _ForwardPieces]:
    u = seq.units
    s = seq.scale
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    K = seq.K
    count = K + 2 + seq.acc_fwd  # [L, L+1]
    U = u.acc * count + seq.eps_w + u.per_term  # [H?, L, L+1]
    W = seq.W
    absA = qa @ ka.transpose(-1, -2)  # [H, L, L]
    Ephi = seq.q_err @ ka.transpose(-1, -2) + qa @ seq.k_err.transpose(-1, -2)
    qS0a = qa @ S0a  # [H, L, V]
    qz0a = (qa * z0a[:, None, :]).sum(-1)  # [H, L]
    w0, W_tok = W[..., 0], W[..., 1:]
    U0, U_tok = U[..., 0], U[..., 1:]
    # Exact values (the float64 parallel form) and their magnitudes.
    A = seq.q_feat @ seq.k_feat.transpose(-1, -2)
    N = p.scale * ((W_tok * A) @ seq.v + w0[..., None] * (seq.q_feat @ seq.S0))
    M_N = s * ((W_tok * absA) @ va + w0[..., None] * qS0a)
    B_N = s * (
        ((U_tok * W_tok * absA) + W_tok * Ephi) @ va
        + (U0 * w0)[..., None] * qS0a
        + w0[..., None] * (seq.q_err @ S0a)
    )
    max_count = torch.where(seq.causal, count, 0.0).amax(-1).to(N.dtype)  # [L]
    out: dict[str, torch.Tensor] = {}
    L = seq.L
    if p.normalize:
        Zsum = p.scale * ((W_tok * A).sum(-1) + w0 * (seq.q_feat * seq.z0[:, None, :]).sum(-1))
        Z = (Zsum + p.eps)[..., None]  # [H, L, 1]
        M_Z = (s * ((W_tok * absA).sum(-1) + w0 * qz0a) + p.eps)[..., None]
        B_Z = (
            s
            * (
                ((U_tok * W_tok * absA) + W_tok * Ephi).sum(-1)
                + U0 * w0 * qz0a
                + w0 * (seq.q_err * z0a[:, None, :]).sum(-1)
            )
        )[..., None] + u.acc * Z.abs()
        exact_zero = M_Z == 0  # every term vanishes: the 0/0 row, whose value is exactly 0
        o = torch.where(Z == 0, torch.zeros_like(N), N / torch.where(Z == 0, 1, Z))
        good = (Z.abs() / 2 > B_Z) | exact_zero
        rounding = u.div + u.out
        B_o = torch.where(
            good,
            (B_N + o.abs() * B_Z) / torch.where(good, Z.abs() - B_Z, 1) + rounding * o.abs(),
            torch.inf,
        )
        B_o = torch.where(exact_zero, 0.0, B_o)
        M_o = torch.where(exact_zero, 0.0, (M_N + o.abs() * M_Z) / torch.where(Z == 0, 1, Z.abs()))
        bad = ~good[..., 0]
        out.update(
            o=o,
            B_o=B_o,
            M_o=M_o,
            N=N,
            Z=Z,
            B_N=B_N,
            B_Z=B_Z,
            eps_influence=(p.eps / torch.where(Z == 0, 1, Z.abs()))[..., 0],
            single_o=(u.per_term * M_o + rounding * o.abs()),
        )
        Z_rows = Z
    else:
        o = N
        B_o = B_N + u.out * N.abs()
        bad = torch.zeros(seq.H, L, dtype=torch.bool, device=N.device)
        out.update(o=o, B_o=B_o, M_o=M_N, single_o=u.per_term * M_N + u.out * N.abs())
        Z_rows = torch.ones_like(N[..., :1])
    out["count_o"] = (max_count[None, :, None]).expand(seq.H, L, 1)
    # Final state and key sum: terms φ(k_j) v_j w_Tj (no K-dot, no scale).
    wE = seq.W_end  # [H, L+1]
    count_S = seq.acc_state  # [L+1]
    U_S = u.acc * count_S + seq.eps_w_end + u.per_term  # [H, L+1]
    kw = seq.k_feat * wE[:, 1:, None]
    S_T = kw.transpose(-1, -2) @ seq.v + wE[:, :1, None] * seq.S0
    z_T = kw.sum(1) + wE[:, :1] * seq.z0
    kaw = ka * wE[:, 1:, None]
    M_S = kaw.transpose(-1, -2) @ va + wE[:, :1, None] * S0a
    B_S = (
        (kaw * U_S[:, 1:, None]).transpose(-1, -2) @ va
        + (seq.k_err * wE[:, 1:, None]).transpose(-1, -2) @ va
        + (U_S[:, :1] * wE[:, :1])[..., None] * S0a
    )
    M_z = kaw.sum(1) + wE[:, :1] * z0a
    B_z = (
        (kaw * U_S[:, 1:, None]).sum(1)
        + (seq.k_err * wE[:, 1:, None]).sum(1)
        + (U_S[:, :1] * wE[:, :1]) * z0a
    )
    out.update(
        S_T=S_T, M_S=M_S, B_S=B_S, z_T=z_T, M_z=M_z, B_z=B_z, count_S=count_S.max().expand(1)
    )
    B_Z_rows = out["B_Z"] if p.normalize else torch.zeros_like(Z_rows)
    pieces = _ForwardPieces(
        seq=seq, Z=Z_rows, B_Z=B_Z_rows, B_o=torch.where(bad[..., None], 0.0, B_o), o=o, bad=bad
    )
    return out, pieces


def forward_bounds(problem: Problem, recipe: PrecisionRecipe) -> ForwardBounds:
    """Compute the exact forward result and its error bounds for a kernel following ``recipe``.

    Args:
        problem: The problem exactly as the kernel received it (any dtype: it is converted
            exactly to float64; its dtype sets the output rounding and the cast unit).
        recipe: The kernel's precision recipe.

    Returns:
        `ForwardBounds`: the absolute bound tensors (``o`` ``[B, T, H, V]``, ``final_state``
        ``[N, H, K, V]``, ``final_key_sum`` ``[N, H, K]``), and in ``tensors`` the full
        `TensorBound` of each (reference values, magnitudes, counts, residual pieces).
    """
    bounds, _ = _forward(problem, recipe)
    return bounds


def _forward(
    problem: Problem, recipe: PrecisionRecipe
) -> tuple[ForwardBounds, list[_ForwardPieces]]:
    p, units = _prepare(problem, recipe)
    per_seq: list[dict[str, torch.Tensor]] = []
    pieces: list[_ForwardPieces] = []
    for n, b, start, end in p.sequences():
        seq = _Sequence(p, recipe, units, n, b, start, end)
        values, piece = _forward_sequence(seq, p)
        per_seq.append(values)
        pieces.append(piece)
    V = p.v.shape[-1]

    def rows(key: str, last: int) -> torch.Tensor:
        return _assemble(p, [d[key] for d in per_seq], last)

    def states(key: str) -> torch.Tensor:
        return torch.stack([d[key] for d in per_seq], dim=0)

    o_ref, B_o = rows("o", V), rows("B_o", V)
    verifiable = torch.isfinite(B_o)
    count_o = rows("count_o", 1)
    tensors: dict[str, TensorBound] = {}
    residual = None
    eps_influence = None
    if p.normalize:
        residual = Residual(
            numerator=rows("N", V),
            denominator=rows("Z", 1),
            numerator_bound=rows("B_N", V),
            denominator_bound=rows("B_Z", 1),
            rounding=units.div + units.out,
        )
        eps_influence = rows("eps_influence", 1)[..., 0]
    tensors["o"] = TensorBound(
        name="o",
        reference=o_ref,
        bound=B_o,
        magnitude=rows("M_o", V),
        count=count_o.expand_as(o_ref),
        unit=units.acc,
        single=rows("single_o", V),
        verifiable=verifiable,
        eps_influence=eps_influence,
        residual=residual,
    )
    final_state = final_key_sum = None
    if p.output_final_state:
        count_S = states("count_S").max()
        S_ref, B_S, M_S = states("S_T"), states("B_S"), states("M_S")
        tensors["final_state"] = TensorBound(
            name="final_state",
            reference=S_ref,
            bound=B_S,
            magnitude=M_S,
            count=count_S.expand_as(S_ref),
            unit=units.acc,
            single=units.per_term * M_S,
            verifiable=torch.ones_like(S_ref, dtype=torch.bool),
        )
        final_state = B_S
        if p.normalize:
            z_ref, B_z, M_z = states("z_T"), states("B_z"), states("M_z")
            tensors["final_key_sum"] = TensorBound(
                name="final_key_sum",
                reference=z_ref,
                bound=B_z,
                magnitude=M_z,
                count=count_S.expand_as(z_ref),
                unit=units.acc,
                single=units.per_term * M_z,
                verifiable=torch.ones_like(z_ref, dtype=torch.bool),
            )
            final_key_sum = B_z
    return ForwardBounds(
        o=B_o, final_state=final_state, final_key_sum=final_key_sum, tensors=tensors
    ), pieces


__all__ = [
    "ForwardBounds",
    "Residual",
    "TensorBound",
    "forward_bounds",
]


@dataclass(frozen=True)
class Cotangents:
    """Cotangents of one sequence: do ``[H, L, V]``, dS_T ``[H, K, V]``, dz_T ``[H, K]``."""

    do: torch.Tensor
    dS: torch.Tensor
    dz: torch.Tensor


def _backward_sequence(
    f: _ForwardPieces, ct: Cotangents, normalize: bool
) -> dict[str, torch.Tensor]:
    """Magnitudes, bounds and unverifiable masks of the gradients of one sequence."""
    seq, u = f.seq, f.seq.units
    s = seq.scale
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    doa, dSa, dza = ct.do.abs(), ct.dS.abs(), ct.dz.abs()
    nz = float(normalize)
    good = ~f.bad[..., None]  # [H, L, 1]
    zeta = torch.where(f.Z == 0, 1.0, 1.0 / f.Z.abs())  # [H, L, 1]
    e_Z = torch.where(good & (f.Z != 0), f.B_Z * zeta, 0.0)  # relative error of the kernel's Z
    do_o = (doa * f.o.abs()).sum(-1) * nz  # |do_t|·|o_t|, [H, L]
    delta_err_raw = (doa * f.B_o).sum(-1) * nz  # error of δ_t from the kernel's ô, [H, L]
    delta_err = delta_err_raw * zeta[..., 0]
    R = (doa @ va.transpose(-1, -2) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = (doa @ S0a.transpose(-1, -2) + do_o[..., None] * z0a[:, None, :]) * zeta  # [H, L, K]
    count = seq.K + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    Ub = u.acc * count + seq.eps_w + u.per_term + e_Z  # [H, L, L+1]
    Ub0, Ub_tok = Ub[..., 0], Ub[..., 1:]
    W_tok, w0 = seq.W[..., 1:], seq.W[..., 0]
    wE0, wE = seq.W_end[:, 0], seq.W_end[:, 1:]  # [H], [H, L]
    U_S = u.acc * (seq.acc_state + seq.V + 4) + seq.eps_w_end + u.per_term  # [H, L+1]
    US0, US = U_S[:, 0], U_S[:, 1:]
    absA = qa @ ka.transpose(-1, -2)
    Ephi = seq.q_err @ ka.transpose(-1, -2) + qa @ seq.k_err.transpose(-1, -2)
    WR = W_tok * R
    WRerr = W_tok * (Ub_tok * R + delta_err[..., None])
    out: dict[str, torch.Tensor] = {}
    # dφ(q) and dφ(k).
    M_dqf = s * (WR @ ka + w0[..., None] * R0)
    B_dqf = s * (
        WRerr @ ka
        + WR @ seq.k_err
        + (Ub0 * w0)[..., None] * R0
        + (w0 * delta_err)[..., None] * z0a[:, None, :] * nz
    )
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # [H, L, K]
    M_dkf = s * WR.transpose(-1, -2) @ qa + wE[..., None] * final_k
    B_dkf = s * (WRerr.transpose(-1, -2) @ qa + WR.transpose(-1, -2) @ seq.q_err) + (
        (wE * US)[..., None] * final_k
    )
    # dv.
    Pz = s * W_tok * absA * zeta
    final_v = ka @ dSa  # [H, L, V]
    out["M_v"] = Pz.transpose(-1, -2) @ doa + wE[..., None] * final_v
    out["B_v"] = (s * W_tok * (Ub_tok * absA + Ephi) * zeta).transpose(-1, -2) @ doa + (
        (wE * US)[..., None] * final_v + wE[..., None] * (seq.k_err @ dSa)
    )
    # dS_0 and dz_0.
    qz = s * qa * (w0 * zeta[..., 0])[..., None]  # [H, L, K]
    qz_err = s * seq.q_err * (w0 * zeta[..., 0])[..., None]
    out["M_S0"] = qz.transpose(-1, -2) @ doa + wE0[:, None, None] * dSa
    out["B_S0"] = (qz * Ub0[..., None] + qz_err).transpose(-1, -2) @ doa + (
        (US0 * wE0)[:, None, None] * dSa
    )
    out["M_z0"] = (qz * do_o[..., None]).sum(1) + wE0[:, None] * dza
    out["B_z0"] = (
        (qz * (Ub0 * do_o + delta_err_raw)[..., None]).sum(1)
        + (qz_err * do_o[..., None]).sum(1)
        + (US0 * wE0)[:, None] * dza
    )
    # dG_t = q̃_t·dq̃_t - k̃_t·dk̃_t (+ the final-state pairing at t = L); dg = reverse cumsum.
    Q = s * W_tok * absA * R
    Q_err = s * W_tok * (Ub_tok * absA * R + absA * delta_err[..., None] + Ephi * R)
    Q0 = s * w0 * (qa * R0).sum(-1)
    Q0_err = (
        s
        * w0
        * (
            (qa * R0).sum(-1) * Ub0
            + (seq.q_err * R0).sum(-1)
            + nz * (qa * z0a[:, None, :]).sum(-1) * delta_err
        )
    )
    F = wE * ((final_v * va).sum(-1) + nz * (ka * dza[:, None, :]).sum(-1))  # [H, L]
    F_err = wE * US * ((final_v * va).sum(-1) + nz * (ka * dza[:, None, :]).sum(-1)) + wE * (
        ((seq.k_err @ dSa) * va).sum(-1) + nz * (seq.k_err * dza[:, None, :]).sum(-1)
    )
    F0 = wE0 * ((dSa * S0a).sum((-1, -2)) + nz * (dza * z0a).sum(-1))
    M_dG = Q.sum(-1) + Q0 + Q.sum(-2) + F
    B_dG = Q_err.sum(-1) + Q0_err + Q_err.sum(-2) + F_err + u.acc * (seq.K + 2) * M_dG
    if seq.L:
        M_dG[:, -1] += F.sum(-1) + F0
        B_dG[:, -1] += F_err.sum(-1) + F0 * US0
    out["M_g"] = _reverse_cumsum(M_dG)
    steps = torch.arange(seq.L, 0, -1, dtype=M_dG.dtype, device=M_dG.device)
    out["B_g"] = _reverse_cumsum(B_dG) + u.acc * steps * out["M_g"]
    # dq = dφ(q) ⊙ φ'(q): one more multiply, and the error of φ'.
    for name, M_f, B_f, dphi, dphi_err in (
        ("q", M_dqf, B_dqf, seq.q_dphi, seq.q_dphi_err),
        ("k", M_dkf, B_dkf, seq.k_dphi, seq.k_dphi_err),
    ):
        out["M_" + name] = M_f * dphi.abs()
        out["B_" + name] = B_f * dphi.abs() + M_f * dphi_err + u.arith * out["M_" + name]
    # Unverifiable: anything that depends on a row whose denominator is not certified.
    bad = f.bad
    bad_key = ((W_tok > 0) & bad[..., None]).any(-2)  # [H, L]: some later row t >= j is bad
    bad_G = bad | bad_key
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [-1]), -1).values, [-1]) > 0
    out["bad_q"], out["bad_k"], out["bad_v"], out["bad_g"] = bad, bad_key, bad_key, bad_g
    out["bad_S0"] = (bad & (w0 > 0)).any(-1)  # [H]
    out["count"] = count.max().expand(1)
    return out


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1])


GRADIENT_NAMES = ("q", "k", "v", "g", "initial_state", "initial_key_sum")
"""Keys of the gradient dictionaries: d/dq, d/dk, d/dv, d/dg, d/dS_0, d/dz_0."""


def _split_final_cotangent(
    d_final_state: object, p: Problem
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if d_final_state is None:
        return None, None
    N, H, K, V = p.num_sequences, p.q.shape[2], p.q.shape[3], p.v.shape[-1]
    if p.normalize:
        if not (isinstance(d_final_state, tuple | list) and len(d_final_state) == 2):
            raise InvalidArgument(
                "Expected d_final_state to be a pair (dS_T [N, H, K, V], dz_T [N, H, K]) for a "
                f"normalized problem but got {type(d_final_state).__name__}."
            )
        dS, dz = d_final_state
    else:
        dS, dz = d_final_state, None
    for name, t, shape in (("d_final_state", dS, (N, H, K, V)), ("d_final_key_sum", dz, (N, H, K))):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != shape):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise InvalidArgument(f"Expected {name} of shape {shape} but got {got}.")
    return (
        None if dS is None else dS.to(torch.float64),
        None if dz is None else dz.to(torch.float64),
    )


def reference_gradients(
    problem: Problem, do: torch.Tensor, d_final_state: object = None
) -> dict[str, torch.Tensor]:
    """Return the exact (float64) gradients of <o, do> + <S_T, dS_T> + <z_T, dz_T>.

    Computed by torch autograd through the float64 parallel reference. Keys are those of
    `GRADIENT_NAMES` whose input exists (``g`` only with decay, ``initial_state`` only when one
    was given).
    """
    from dataclasses import replace

    from linattn_verify.oracles.parallel import parallel_reference

    p = problem.to(torch.float64)
    dS, dz = _split_final_cotangent(d_final_state, p)
    leaves = {
        "q": p.q,
        "k": p.k,
        "v": p.v,
        "g": p.g,
        "initial_state": p.initial_state,
        "initial_key_sum": p.initial_key_sum,
    }
    leaves = {
        k: v.detach().clone().requires_grad_(True) for k, v in leaves.items() if v is not None
    }
    p = replace(
        p,
        q=leaves["q"],
        k=leaves["k"],
        v=leaves["v"],
        g=leaves.get("g"),
        initial_state=leaves.get("initial_state"),
        initial_key_sum=leaves.get("initial_key_sum"),
        output_final_state=True,
    )
    with torch.enable_grad():
        o, final = parallel_reference(p)
        loss = (o * do.to(torch.float64)).sum()
        S_T, z_T = final if isinstance(final, tuple) else (final, None)
        if dS is not None and S_T is not None:
            loss = loss + (S_T * dS).sum()
        if dz is not None and z_T is not None:
            loss = loss + (z_T * dz).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        name: (torch.zeros_like(leaf) if grad is None else grad)
        for (name, leaf), grad in zip(leaves.items(), grads, strict=True)
    }


def backward_bounds(
    problem: Problem,
    recipe: PrecisionRecipe,
    *,
    do: torch.Tensor,
    d_final_state: object = None,
) -> dict[str, TensorBound]:
    """Compute the exact gradients and their error bounds for a kernel following ``recipe``.

    Args:
        problem: The problem exactly as the kernel received it.
        recipe: The kernel's precision recipe.
        do: Cotangent of the output ``[B, T, H, V]``.
        d_final_state: Cotangent of the final state: `None`, dS_T ``[N, H, K, V]``, or for
            normalized problems the pair ``(dS_T, dz_T)`` (either may be `None`). Default: `None`.

    Returns:
        A `TensorBound` per gradient, keyed by `GRADIENT_NAMES` (only the inputs that exist).
    """
    if not isinstance(do, torch.Tensor) or tuple(do.shape) != tuple(problem.v.shape):
        got = tuple(do.shape) if isinstance(do, torch.Tensor) else type(do).__name__
        raise InvalidArgument(f"Expected do of shape {tuple(problem.v.shape)} but got {got}.")
    _, pieces = _forward(problem, recipe)
    p, units = _prepare(problem, recipe)
    refs = reference_gradients(problem, do, d_final_state)
    dS, dz = _split_final_cotangent(d_final_state, p)
    do64 = do.to(torch.float64)
    H, K, V = p.q.shape[2], p.q.shape[3], p.v.shape[-1]
    per_seq = []
    for piece, (n, b, start, end) in zip(pieces, p.sequences(), strict=True):
        ct = Cotangents(
            do=do64[b, start:end].transpose(0, 1),
            dS=dS[n]
            if dS is not None
            else torch.zeros(H, K, V, dtype=torch.float64, device=do64.device),
            dz=dz[n]
            if dz is not None
            else torch.zeros(H, K, dtype=torch.float64, device=do64.device),
        )
        per_seq.append(_backward_sequence(piece, ct, p.normalize))

    def rows(key: str, last: int | None) -> torch.Tensor:
        pieces_ = [d[key] if last is not None else d[key][..., None] for d in per_seq]
        x = _assemble(p, pieces_, last or 1)
        return x if last is not None else x[..., 0]

    def states(key: str) -> torch.Tensor:
        return torch.stack([d[key] for d in per_seq], dim=0)

    count = states("count").max()
    input_out = units.out
    result: dict[str, TensorBound] = {}
    layout = {"q": K, "k": K, "v": V, "g": None}
    for name, ref in refs.items():
        if name in layout:
            last = layout[name]
            M, B = rows("M_" + name, last), rows("B_" + name, last)
            bad = rows("bad_" + name, None).bool()
            if last is not None:
                bad = bad[..., None].expand_as(M)
            dtype = problem.g.dtype if name == "g" and problem.g is not None else problem.q.dtype
        else:
            key = "S0" if name == "initial_state" else "z0"
            M, B = states("M_" + key), states("B_" + key)
            bad = states("bad_S0")
            bad = bad.reshape(*bad.shape, *([1] * (M.ndim - bad.ndim))).expand_as(M)
            source = problem.initial_state if name == "initial_state" else problem.initial_key_sum
            dtype = source.dtype if source is not None else torch.float32
        out_unit = input_out if dtype == problem.q.dtype else _Units.of(recipe, dtype).out
        B = B + out_unit * ref.abs()
        result[name] = TensorBound(
            name="d" + name,
            reference=ref,
            bound=torch.where(bad, torch.inf, B),
            magnitude=M,
            count=count.expand_as(ref),
            unit=units.acc,
            single=units.per_term * M + out_unit * ref.abs(),
            verifiable=~bad,
        )
    return result
