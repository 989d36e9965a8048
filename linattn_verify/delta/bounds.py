# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Forward error bounds of the delta rule for a declared recipe (docs/error-model.md §8).

Every algorithm for the recurrence is a sequence of steps (a token, or a chunk of C tokens)
X_n = Φ_n X_{n-1} + B_n with Φ_n the exact transition (a product of A_t = (I - β_t k_t k_t^T)
diag(e^{g_t})). The computed state obeys X̂_n = Φ_n X̂_{n-1} + B_n + δ_n, δ_n the step's own
rounding, so per value column j the 2-norm error E_n of the state obeys

    E_n <= ρ(Φ_n) E_{n-1} + ||δ_n[:, j]||_2,   ρ(Φ_n) = Π_t max(1, |1 - β_t ||k_t||²|) max e^{g_t}

(ρ(A_t) >= ||A_t||_2), and every element of the state is within E_n of its exact value. |δ_n|
is bounded componentwise by counting the roundings of the step's operations on the float64
exact intermediates (first order: the O(u²) terms are left to the fail threshold r <= 2).

**Recurrent** (one token; γ_n = n u / (1 - n u), a = |k|^T |S'|, ε_d = (5 + 2.4 |g|) u the
decay factor's error, ε_k the relative error of an in-kernel L2-normalised component):

    |δS_t| <= γ_{K+5} (|S'| + |S_t|) + (ε_d |S'| + 2^-150 |S_{t-1}|) max(1, |1 - β||k||²|)
              + (γ_{K+5} + ε_k) β |k| (|v| + 2a)
    |δo_t| <= s (||q_t|| E_t + (γ_{K+3} + ε_q) |q_t|^T |S_t|) + u_out |o_t|

**Chunk** (C tokens; L = I + strict_tril(β ⊙ K K^T ⊙ e^{G_i - G_j}), T = L^{-1},
M = |T| (I + |L - I|) |T|, R1 = β |k| e^G, R2 = β |v|, ε_w the relative error of a weight
e^{G_i - G_j} from the chunk-local cumsum):

    |δT|  <= (γ_{2C} + η_L + u_T) M         Higham Thm 8.5 (forward substitution) and the block
                                            merge T21 = -T22 L21 T11 (two more products: 2C)
    |δVn| <= η M (R2 + R1 |S|) + ζ (|U| + |W| |S|)
    |δS|  <= (2u + ε_w) e^{G_C} |S| + (γ_{C+1} + ε_w + ε_k + c) |K~|^T |Vn| + |K~|^T |δVn|
    |δO_i| <= s [(γ_{K+C+2} + ε_w + ε_q + ε_k + u_S + c)(|Q e^G| |S| + P |Vn|) + P |δVn|
                 + ||q_i|| Π_{t<=i} ρ_t E] + u_out |o_i|

with η_L = γ_{K+2} + ε_w + 2 ε_k + 2 u_op (L's entries), η = γ_{2C} + γ_{C+1} + η_L + u_T + ε_w
+ ε_k + 2u + 2u_op + c, ζ = γ_{K+1} + 2 u_I + u_S + 2 u_op (W, U and Vn stored, the state read
in its storage format, tf32 operands), c = casts_on_path u_I, K~ = K ⊙ e^{G_C - G} and
P_ij = Σ_m |q_im| |k_jm| e^{G_im - G_jm} (j <= i).

Every operation can also err by an absolute 2^-150 (half the smallest fp32 subnormal) where its
result underflows: each local error above carries (its operation count) · 2^-150 more, which
matters only for values near the bottom of fp32's range (a state decayed below 1e-38).

The reference values are those of the float64 oracle (`delta_recurrent`), certified against
double-double and mpmath (tests/delta): its own error, about 1e-16 relatively, is not charged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.judging import bound_on, judging_device, problem_on
from linattn_verify.core.rounding import UNIT_ROUNDOFF, gamma
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import (
    DeltaSequence,
    forward_substitution_inverse,
    group_size,
    pair_weights,
    per_sequence,
    sequence_groups,
)
from linattn_verify.typing import dtype_name

SMALLEST_SUBNORMAL = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}
"""Spacing of the subnormals of each output dtype: rounding o there errs by half of it."""


def _half_subnormal(u: float) -> float:
    """Half the smallest subnormal of the format whose unit roundoff is ``u``.

    fp32 and wider formats get fp32's (the arithmetic's range); bf16 shares fp32's range.
    """
    return {2.0**-11: 2.0**-25, 2.0**-8: 2.0**-134}.get(u, 2.0**-150)


@dataclass(frozen=True)
class Units:
    """The unit roundoffs of one recipe on inputs of one dtype (docs/error-model.md §8)."""

    u: float  # elementwise arithmetic
    acc: float  # dot accumulation
    op: float  # relative error of a tf32 operand (0 for IEEE)
    inter: float  # W, U, Vn, normalised q/k stored
    inverse: float  # T stored
    state: float  # the chunk-boundary state read by the dots
    out: float  # o rounded to the input dtype
    casts: float  # casts_on_path further roundings, in total
    floor: float  # absolute rounding error of a subnormal output
    under: float  # absolute error of one arithmetic operation in the subnormal range
    initial: float  # S_0 rounded where it is read (a 16-bit state, or 16-bit arithmetic)

    @classmethod
    def of(cls, recipe: DeltaRecipe, dtype: torch.dtype) -> Units:
        """Resolve ``recipe``'s storage formats for inputs of ``dtype``."""
        name = dtype_name(dtype)
        inter = recipe.u_storage("intermediate_dtype", dtype)
        u = recipe.u(dtype)
        state = recipe.u_storage("state_dtype", dtype)
        return cls(
            u=u,
            acc=max(u, recipe.u_acc(dtype)),
            op=recipe.u_operand,
            inter=inter,
            inverse=recipe.u_storage("inverse_dtype", dtype),
            state=state,
            out=max(UNIT_ROUNDOFF.get(name, u), u),
            casts=recipe.casts_on_path * inter,
            floor=SMALLEST_SUBNORMAL.get(name, 0.0) / 2,
            # Half the smallest subnormal of the arithmetic's format (fp16's for fp16 arithmetic).
            under=2.0**-1075 if recipe.accumulation == "float64" else _half_subnormal(u),
            # An fp32 S_0 read into 16-bit arithmetic or a 16-bit state rounds once.
            initial=max(state, u if u > 2.0**-24 else 0.0),
        )

    def gamma(self, n: int) -> float:
        """γ_n = n u / (1 - n u) with the accumulation's u (inf where n u >= 1)."""
        return gamma(n, self.acc)

    def l2norm(self, K: int, normalized: bool) -> float:
        """ε_k: the relative error of an L2-normalised component, 0 without the norm.

        Σx² within γ_K, + eps, sqrt and divide one rounding each (the sqrt halves the error
        under it), then the store.
        """
        return self.gamma(K + 3) + self.inter if normalized else 0.0


@dataclass(frozen=True)
class SequenceBound:
    """One sequence's exact outputs, bounds and magnitudes (heads first)."""

    o: torch.Tensor  # exact o [H, L, V]
    o_bound: torch.Tensor
    o_magnitude: torch.Tensor
    state: torch.Tensor  # exact S_L [H, K, V]
    state_bound: torch.Tensor  # E broadcast over K [H, K, V]
    state_magnitude: torch.Tensor


PIVOT_NUDGE = 2.0**-10
"""How close to a tie a pivot candidate may be and still be taken the other way by the kernel's
fp32 factorization: `inverse_magnitude` also factors L with its off-diagonal grown by this."""

InverseKind = Literal["substitution", "pivoting", "products"]
"""How a chunk's triangular inverse is computed, as far as its error is concerned
(`inverse_magnitude`)."""


def inverse_kind(recipe: DeltaRecipe, *, causal_exact: bool) -> InverseKind:
    """The inverse a kernel is charged for (`inverse_magnitude`).

    Its declared method; for ``substitution``, a pivoting solver when the kernel does not promise
    bit-exact causality (a general solver's row exchanges would break it).
    """
    if recipe.inverse_method == "products":
        return "products"
    return "substitution" if causal_exact else "pivoting"


def inverse_magnitude(
    L_off: torch.Tensor,
    T: torch.Tensor,
    *,
    kind: InverseKind = "substitution",
    L_abs: torch.Tensor | None = None,
) -> torch.Tensor:
    """M, the magnitude the error of a computed inverse T̂ of L = I + L_off is charged on.

    ``substitution``: forward substitution, a triangular solve or FLA's block merge satisfy
    |T̂ - T| <= γ_{2c} M with M = |T| (I + |L_off|) |T|, lower triangular (Higham Thm 8.5):
    T̂ is exactly 0 above the diagonal and the chunk's outputs are bitwise causal.

    ``pivoting``: a general solver, LU with partial pivoting (``torch.linalg.inv``, ``solve``:
    LAPACK getrf/getri, cuSOLVER), whose row exchanges mix the rows: X̂ L - I <= c u |X̂|
    |P^T L̂| |Û| (Higham §14.3), so |T̂ - T| <= γ_{3c} |T| |P^T L̂| |Û| |T|, a full matrix. The
    factors are evaluated in float64 on L, and on L with its off-diagonal grown by
    `PIVOT_NUDGE` (a near-tie the kernel's fp32 factorization may break the other way); M is
    the largest of the three, the pivoted ones doubled (γ_{3c} <= 2 γ_{2c}).

    ``products``: a Neumann or doubling product T = Π_k (I + (-N)^{2^k}), N = L_off, the powers
    by repeated squaring: every rounding of its m = ⌈log2 c⌉ squarings and m products is
    relative to the product of the absolute values around it, whose sum over the expansion is
    Π_k (I + |N|^{2^k}) = Σ_j |N|^j (|N| is nilpotent): |T̂ - T| <= γ_{2m(c+1)} Σ_j |N|^j,
    charged as (m + 1) Σ_j |N|^j against γ_{2c}. That sum grows like binomial coefficients
    where the entries of N exceed 1 (β near 2, parallel keys), far above |T|: such a kernel is
    that much less accurate than substitution (docs/error-model.md §8.10).

    Args:
        L_off: The strictly lower part of L, ``[..., c, c]``.
        T: The exact inverse L^-1.
        kind: How the kernel computes it. Default: `"substitution"`.
        L_abs: The magnitude of L_off's entries (the sums of |terms|, >= |L_off|).
            Default: `|L_off|`.
    """
    c = L_off.shape[-1]
    eye = torch.eye(c, dtype=L_off.dtype, device=L_off.device)
    N = L_off.abs() if L_abs is None else L_abs
    T_abs = T.abs()
    M = T_abs @ (eye + N) @ T_abs
    if kind == "substitution" or c < 2:
        return M
    if kind == "products":
        power, series = eye.expand_as(N), eye.expand_as(N)
        for _ in range(c - 1):
            power = power @ N
            series = series + power
        rounds = math.ceil(math.log2(c)) + 1
        return torch.maximum(M, rounds * series)
    for grow in (1.0, 1.0 + PIVOT_NUDGE):
        P, L_f, U_f = torch.linalg.lu(eye + grow * L_off)
        M = torch.maximum(M, 2 * T_abs @ (P @ L_f.abs() @ U_f.abs()) @ T_abs)
    return M


def contraction(beta: torch.Tensor, k: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
    """ρ_t = max(1, |1 - β_t ||k_t||²|) max_m e^{g_tm} >= ||A_t||_2 (beta's shape, tokens last)."""
    rho = (1 - beta * k.pow(2).sum(-1)).abs().clamp(min=1)
    if g is None:
        return rho
    # A scalar gate has beta's shape; a vector gate one more (K) axis.
    return rho * torch.exp(g if g.shape == beta.shape else g.amax(-1))


def _decays(seq: DeltaSequence) -> torch.Tensor | None:
    """e^{g_t} as ``[H, L, K]`` (a scalar gate repeated over K), or `None`."""
    if seq.g is None:
        return None
    K = seq.k.shape[-1]
    g = seq.g if seq.g.ndim == 3 else seq.g[..., None].expand(*seq.g.shape, K)
    return torch.exp(g)


def decay_error(seq: DeltaSequence, units: Units) -> torch.Tensor:
    """ε_d per head and token ``[H, L]``: e^g within (4 + 2.4|g|) u, then one multiply."""
    if seq.g is None:
        return seq.q.new_zeros(seq.q.shape[:2])
    g_abs = seq.g.abs() if seq.g.ndim == 2 else seq.g.abs().amax(-1)
    return (5 + 2.4 * g_abs) * units.u


def recurrent_sequence(
    seq: DeltaSequence, scale: float, units: Units, *, l2norm_qk: bool
) -> SequenceBound:
    """The recurrent recipe's bound on one float64 sequence (module docstring)."""
    _, L, K = seq.q.shape
    gK5, gK3 = units.gamma(K + 5), units.gamma(K + 3)
    normalized = units.l2norm(K, l2norm_qk)
    decays = _decays(seq)
    eps_d = decay_error(seq, units)
    rho = contraction(seq.beta, seq.k, seq.g)
    S = seq.S0
    # S_0 rounded where it is read (a state kept in 16 bits, or 16-bit arithmetic): per column.
    E = units.initial * S.norm(dim=1)
    outs: list[torch.Tensor] = []
    bounds: list[torch.Tensor] = []
    mags: list[torch.Tensor] = []
    for t in range(L):
        Sp = S if decays is None else decays[:, t, :, None] * S
        k, beta = seq.k[:, t, :, None], seq.beta[:, t, None, None]
        a = (k.abs() * Sp.abs()).sum(1, keepdim=True)  # [H, 1, V]
        # The error of S' (the decay's ε_d, or 2^-150 absolutely where e^g is subnormal)
        # passes through I - β k k^T, of norm max(1, |1 - β ||k||²|).
        through = (1 - beta * k.pow(2).sum(1, keepdim=True)).abs().clamp(min=1)
        decayed = (eps_d[:, t, None, None] * Sp.abs() + units.under * S.abs()) * through
        S = Sp + k * (beta * (seq.v[:, t, None, :] - (k * Sp).sum(1, keepdim=True)))
        local = (
            gK5 * (Sp.abs() + S.abs())
            + (decayed if decays is not None else 0.0)
            + (gK5 + normalized) * beta * k.abs() * (seq.v[:, t, None, :].abs() + 2 * a)
            + (K + 6) * units.under
            # A state kept in a narrower format is rounded to it once more per step.
            + units.state * S.abs()
        )
        E = rho[:, t, None] * E + local.norm(dim=1)
        q = seq.q[:, t]
        o = scale * (q[:, :, None] * S).sum(1)
        magnitude = scale * (q.abs()[:, :, None] * S.abs()).sum(1)
        bound = scale * (q.norm(dim=1)[:, None] * E + (gK3 + normalized) * magnitude)
        bound = bound + (K + 3) * units.under
        outs.append(o)
        bounds.append(bound + units.out * o.abs() + units.floor)
        mags.append(magnitude)
    return _finish(seq, S, E, outs, bounds, mags)


def chunk_sequence(
    seq: DeltaSequence,
    scale: float,
    units: Units,
    C: int,
    *,
    l2norm_qk: bool,
    inverse: InverseKind = "substitution",
    heads: int | None = None,
) -> SequenceBound:
    """The chunk (WY / UT) recipe's bound on one float64 sequence (module docstring).

    ``inverse`` says how the kernel inverts (`inverse_magnitude`): a pivoting solver charges
    every corrected value, and so every output of the chunk, the whole chunk. ``heads``: the
    heads of each sequence when ``seq`` stacks several (`sequence_groups`), so that a
    chunk's decay-weight error takes the largest |G| of its own sequence only. Default: all of
    ``seq``'s heads are one sequence's.
    """
    H, L, K = seq.q.shape
    u = units.u
    eps_k = units.l2norm(K, l2norm_qk)
    eps_q = eps_k
    rho_all = contraction(seq.beta, seq.k, seq.g)
    S = seq.S0
    E = units.initial * S.norm(dim=1)
    outs: list[torch.Tensor] = []
    bounds: list[torch.Tensor] = []
    mags: list[torch.Tensor] = []
    for start in range(0, L, C):
        end = min(start + C, L)
        c = end - start
        q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
        beta = seq.beta[:, start:end]
        if seq.g is None:
            G = q.new_zeros(H, c, K)
        elif seq.g.ndim == 2:
            G = seq.g[:, start:end].cumsum(-1)[..., None].expand(H, c, K)
        else:
            G = seq.g[:, start:end].cumsum(-2)
        # The chunk-local cumsum's absolute error (γ_{c} |G|), doubled for a difference, then
        # the exp: (4 + 2.4|x|) u (the ex2.approx model of docs/error-model.md §4).
        eps_w: float | torch.Tensor = 0.0
        if seq.g is not None:
            # The largest |G| of each sequence's chunk, over its heads ([sequences]).
            Gmax = G.abs().reshape(H // (heads or H), -1).amax(-1)
            Gmax = Gmax.repeat_interleave(heads or H)[:, None, None]
            eps_w = (2 * units.gamma(c + 1) + 2.4 * u) * Gmax + 4 * u
        w_strict = pair_weights(G, strict=True, vector=True)
        w_incl = pair_weights(G, strict=False, vector=True)
        kk = k[:, :, None, :] * k[:, None, :, :]
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        L_abs = beta[..., None] * (kk.abs() * w_strict).sum(-1)
        L_off = beta[..., None] * (kk * w_strict).sum(-1)
        T = forward_substitution_inverse(eye + L_off)
        M = inverse_magnitude(L_off, T, kind=inverse, L_abs=L_abs)
        eG, eGc = torch.exp(G), torch.exp(G[:, -1, :])
        W = T @ (beta[..., None] * k * eG)
        U = T @ (beta[..., None] * v)
        Vn = U - W @ S
        Kt = (k * torch.exp(G[:, -1:, :] - G)).abs()
        eta_L = units.gamma(K + 2) + eps_w + 2 * eps_k + 2 * units.op
        eta = (
            units.gamma(2 * c)
            + units.gamma(c + 1)
            + eta_L
            + units.inverse
            + eps_w
            + eps_k
            + 2 * u
            + 2 * units.op
            + units.casts
        )
        zeta = units.gamma(K + 1) + 2 * units.inter + units.state + 2 * units.op
        R1 = beta[..., None] * k.abs() * eG
        R2 = beta[..., None] * v.abs()
        dVn = eta * M @ (R2 + R1 @ S.abs()) + zeta * (U.abs() + W.abs() @ S.abs())
        # Weights e^x that are subnormal err by 2^-150 absolutely: the terms without them.
        bare_k = beta[..., None] * k.abs()
        L_bare = (bare_k @ k.abs().transpose(-1, -2)).tril(-1)
        dVn = dVn + units.under * T.abs() @ (L_bare @ Vn.abs() + bare_k @ S.abs())
        dS = (
            (2 * u + eps_w) * eGc[..., None] * S.abs()
            + (units.gamma(c + 1) + eps_w + eps_k + units.casts) * Kt.transpose(-1, -2) @ Vn.abs()
            + Kt.transpose(-1, -2) @ dVn
            + units.under * (S.abs() + k.abs().transpose(-1, -2) @ Vn.abs())
            + (2 * c + 2 * K + 8) * units.under
        )
        P = (q.abs()[:, :, None, :] * k.abs()[:, None, :, :] * w_incl).sum(-1)
        A_qk = (q[:, :, None, :] * k[:, None, :, :] * w_incl).sum(-1)
        magnitude = scale * ((q * eG).abs() @ S.abs() + P @ Vn.abs())
        o = scale * ((q * eG) @ S + A_qk @ Vn)
        prefix = rho_all[:, start:end].cumprod(-1)  # [H, c]
        relative = units.gamma(K + c + 2) + eps_w + eps_q + eps_k + units.state + units.casts
        bound = (
            relative * magnitude
            + scale * P @ dVn
            + scale * q.norm(dim=-1)[..., None] * prefix[..., None] * E[:, None, :]
            + scale
            * units.under
            * (q.abs() @ S.abs() + (q.abs() @ k.abs().transpose(-1, -2)).tril() @ Vn.abs())
            + (2 * c + 2 * K + 8) * units.under
        )
        outs.extend(o.unbind(1))
        bounds.extend((bound + units.out * o.abs() + units.floor).unbind(1))
        mags.extend(magnitude.unbind(1))
        S = eGc[..., None] * S + (k * torch.exp(G[:, -1:, :] - G)).transpose(-1, -2) @ Vn
        E = prefix[:, -1, None] * E + dS.norm(dim=1)
    return _finish(seq, S, E, outs, bounds, mags)


def _finish(
    seq: DeltaSequence,
    S: torch.Tensor,
    E: torch.Tensor,
    outs: list[torch.Tensor],
    bounds: list[torch.Tensor],
    mags: list[torch.Tensor],
) -> SequenceBound:
    H, _, V = seq.v.shape

    def stack(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(xs, 1) if xs else seq.v.new_zeros(H, 0, V)

    return SequenceBound(
        o=stack(outs),
        o_bound=stack(bounds),
        o_magnitude=stack(mags),
        state=S,
        state_bound=E[:, None, :].expand(S.shape).clone(),
        state_magnitude=S.abs(),
    )


def per_head_elements(problem: DeltaProblem, recipe: DeltaRecipe) -> int:
    """The largest intermediate per head of ``recipe``'s bounds (`group_size`): C² K, or K V."""
    K, V = problem.q.shape[-1], problem.v.shape[-1]
    return recipe.chunk_size**2 * K if recipe.form == "chunk" else K * V


def sequence_bounds(
    problem: DeltaProblem, recipe: DeltaRecipe, *, causal_exact: bool = True
) -> list[SequenceBound]:
    """Every sequence's exact outputs and bounds, in `DeltaProblem.sequences` order."""
    units = Units.of(recipe, problem.q.dtype)
    p = problem.to(torch.float64)
    H = p.q.shape[2]
    groups = []
    with torch.no_grad():
        for spans, seq in sequence_groups(p, most=group_size(p, per_head_elements(p, recipe))):
            if recipe.form == "recurrent":
                bound = recurrent_sequence(seq, p.scale, units, l2norm_qk=p.l2norm_qk)
            else:
                inverse = inverse_kind(recipe, causal_exact=causal_exact)
                bound = chunk_sequence(
                    seq,
                    p.scale,
                    units,
                    recipe.chunk_size,
                    l2norm_qk=p.l2norm_qk,
                    inverse=inverse,
                    heads=H,
                )
            groups.append((spans, bound))

    def split(bound: SequenceBound, _: int) -> list[SequenceBound]:
        parts = [torch.split(getattr(bound, f.name), H) for f in fields(bound)]
        return [SequenceBound(*one) for one in zip(*parts, strict=True)]

    return per_sequence(groups, split)


def forward_bounds(
    problem: DeltaProblem, recipe: DeltaRecipe, *, causal_exact: bool = True
) -> dict[str, TensorBound]:
    """Return the bounds of ``o`` and (when asked for) ``final_state``.

    Args:
        problem: The problem as the kernel receives it.
        recipe: The kernel's precision recipe for the problem's dtype.
        causal_exact: The kernel promises bit-exact causality; otherwise the chunk recipe's
            inverse may come from a pivoting solver (`inverse_kind`). Default: `True`.

    Returns:
        `TensorBound` by tensor name: the oracle's value, the bound B, the magnitude M (the
        same sums on absolute values: the scale ρ = err / (u M) is measured on).
    """
    B, T, H, K, V = problem.shape
    units = Units.of(recipe, problem.q.dtype)
    home = problem.q.device
    judged = problem_on(problem, judging_device(home))
    per_seq = sequence_bounds(judged, recipe, causal_exact=causal_exact)

    def tokens(field: str) -> torch.Tensor:
        parts = [getattr(s, field).transpose(0, 1) for s in per_seq]  # [L, H, V]
        return torch.cat(parts, 0).reshape(B, T, H, V)

    count = float(K + 5 + (recipe.chunk_size if recipe.form == "chunk" else T))
    named = {
        "o": _tensor_bound("o", tokens("o"), tokens("o_bound"), tokens("o_magnitude"), units, count)
    }
    if problem.output_final_state:
        named["final_state"] = _tensor_bound(
            "final_state",
            torch.stack([s.state for s in per_seq]),
            torch.stack([s.state_bound for s in per_seq]),
            torch.stack([s.state_magnitude for s in per_seq]),
            units,
            count,
        )
    return {name: bound_on(b, home) for name, b in named.items()}


def _tensor_bound(
    name: str,
    reference: torch.Tensor,
    bound: torch.Tensor,
    magnitude: torch.Tensor,
    units: Units,
    count: float,
) -> TensorBound:
    return TensorBound(
        name=name,
        reference=reference,
        bound=bound,
        magnitude=magnitude,
        count=torch.full_like(reference, count),
        unit=units.acc,
        verifiable=torch.isfinite(bound),
    )


__all__ = [
    "PIVOT_NUDGE",
    "InverseKind",
    "SequenceBound",
    "Units",
    "chunk_sequence",
    "contraction",
    "forward_bounds",
    "inverse_kind",
    "inverse_magnitude",
    "recurrent_sequence",
    "sequence_bounds",
]
