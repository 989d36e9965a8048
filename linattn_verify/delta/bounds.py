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

from dataclasses import dataclass, fields

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.judging import bound_on, judging_device, problem_on
from linattn_verify.core.reuse import reused
from linattn_verify.core.value_gate import unfold_bound
from linattn_verify.delta.inverse import InverseKind, inverse_kind, inverse_magnitude
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import (
    DeltaSequence,
    forward_substitution_inverse,
    group_size,
    pair_scores,
    pair_weights,
    per_sequence,
    sequence_groups,
)
from linattn_verify.delta.sweep import StateBlock, forward_blocks, keys_down
from linattn_verify.delta.units import Units
from linattn_verify.delta.value_gate import fold
from linattn_verify.errors import InvalidArgument


@dataclass(frozen=True)
class SequenceBound:
    """One sequence's exact outputs, bounds and magnitudes (heads first)."""

    o: torch.Tensor  # exact o [H, L, V]
    o_bound: torch.Tensor
    o_magnitude: torch.Tensor
    state: torch.Tensor  # exact S_L [H, K, V]
    state_bound: torch.Tensor  # E broadcast over K [H, K, V]
    state_magnitude: torch.Tensor


def contraction(beta: torch.Tensor, k: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
    """ρ_t = max(1, |1 - β_t ||k_t||²|) max_m e^{g_tm} >= ||A_t||_2 (beta's shape, tokens last)."""
    rho = (1 - beta * k.pow(2).sum(-1)).abs().clamp(min=1)
    if g is None:
        return rho
    # A scalar gate has beta's shape; a vector gate one more (K) axis.
    return rho * torch.exp(g if g.shape == beta.shape else g.amax(-1))


def decay_error(seq: DeltaSequence, units: Units, factors: int = 1) -> torch.Tensor:
    """ε_d per head and token ``[H, L]``: e^g within (4 + 2.4|g|) u, then one multiply.

    A decay made of ``factors`` exponentials and multiplies of gates summing to g (a value gate
    folded in: `linattn_verify.delta.value_gate`) errs by at most (5 factors + 2.4|g|) u, since
    the 2.4|g_i| u of the factors add up to 2.4|g| u for gates of one sign.
    """
    if seq.g is None:
        return seq.q.new_zeros(seq.q.shape[:2])
    g_abs = seq.g.abs() if seq.g.ndim == 2 else seq.g.abs().amax(-1)
    return (5 * factors + 2.4 * g_abs) * units.u


def recurrent_sequence(
    seq: DeltaSequence, scale: float, units: Units, *, l2norm_qk: bool, gate_factors: int = 1
) -> SequenceBound:
    """The recurrent recipe's bound on one float64 sequence (module docstring).

    The exact states come a block of tokens at a time (`linattn_verify.delta.sweep`); every
    local error and output bound is formed on the block at once, and only the running column
    error E_t = ρ_t E_{t-1} + ||δS_t||, one [H, V] operation a token, is a loop.
    """
    K = seq.q.shape[-1]
    gK3 = units.gamma(K + 3)
    normalized = units.l2norm(K, l2norm_qk)
    eps_d = decay_error(seq, units, gate_factors)
    rho = contraction(seq.beta, seq.k, seq.g)
    # S_0 rounded where it is read (a state kept in 16 bits, or 16-bit arithmetic): per column.
    E = units.initial * seq.S0.norm(dim=1)
    S = seq.S0
    # Written block by block (not collected: small long-lived pieces between the blocks'
    # temporaries fragment the allocator's heap).
    outs, bounds, mags = (torch.zeros_like(seq.v) for _ in range(3))
    for blk in forward_blocks(seq):
        span = slice(blk.start, blk.stop)
        S_abs = blk.S.abs()
        # A state kept in a narrower format is rounded to it once more per step.
        steps = step_errors(seq, blk, units, normalized, eps_d, S_abs, state_unit=units.state)
        errors = running_errors(E, rho[:, span], steps)
        E = errors[:, -1]
        q = seq.q[:, span]
        o = scale * keys_down(blk.S, q)
        magnitude = scale * keys_down(S_abs, q.abs())
        bound = scale * (q.norm(dim=-1)[..., None] * errors + (gK3 + normalized) * magnitude)
        bound = bound + (K + 3) * units.under
        outs[:, span] = o
        bounds[:, span] = bound + units.out * o.abs() + units.floor
        mags[:, span] = magnitude
        S = blk.S[:, -1]
    return _finish(S, E, outs, bounds, mags)


def step_errors(
    seq: DeltaSequence,
    blk: StateBlock,
    units: Units,
    eps_k: float,
    eps_d: torch.Tensor,
    S_abs: torch.Tensor,
    *,
    state_unit: float = 0.0,
) -> torch.Tensor:
    """||δS_t[:, j]||_2 of a block's tokens ``[H, n, V]``: the recurrent step's own rounding.

    |δS_t| <= γ_{K+5} (|S'| + |S_t|) + (ε_d |S'| + 2^-150 |S_{t-1}|) max(1, |1 - β||k||²|)
    + (γ_{K+5} + ε_k) β |k| (|v| + 2 |k|^T |S'|) + (K + 6) 2^-150, and ``state_unit`` |S_t|
    for a state stored in a narrower format (module docstring). The error of S' (the decay's
    ε_d, or 2^-150 absolutely where e^g is subnormal) passes through I - β k k^T.
    Accumulated in place: each term is one pass over the block's [H, n, K, V] states.
    """
    K = seq.k.shape[-1]
    gK5 = units.gamma(K + 5)
    span = slice(blk.start, blk.stop)
    k, beta, v = seq.k[:, span], seq.beta[:, span, None, None], seq.v[:, span, None, :]
    local = blk.Sp.abs()
    a = keys_down(local, k.abs())[:, :, None, :]  # |k|^T |S'|
    if seq.g is None:
        local.mul_(gK5)
    else:
        through = (1 - beta * k.pow(2).sum(-1)[..., None, None]).abs().clamp(min=1)
        local.mul_(gK5 + eps_d[:, span, None, None] * through)
        local.addcmul_(blk.S_prev.abs(), units.under * through)
    local.add_(S_abs, alpha=gK5 + state_unit)
    local.addcmul_((gK5 + eps_k) * beta * k.abs()[..., None], v.abs() + 2 * a)
    local.add_((K + 6) * units.under)
    return local.mul_(local).sum(2).sqrt()


def running_errors(E: torch.Tensor, rho: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """E_t = ρ_t E_{t-1} + local_t for a block's tokens, from E ``[H, V]``: ``[H, n, V]``."""
    out = []
    for r, step in zip(rho[..., None].unbind(1), local.unbind(1), strict=True):
        E = torch.addcmul(step, r, E)
        out.append(E)
    return torch.stack(out, 1)


CHUNK_GROUP_ELEMENTS = 2**18
"""The most float64 elements of a batch of chunks' largest intermediate (H N c², or H N c² K
under a vector gate: 2 MB) in `chunk_sequence`. Measured at T = 16,384, H = 2, C = K = V = 64
(CPU, one thread): 1.4 s at 2^16, 0.98 s at 2^18, 2.0 s at 2^20 (fresh pages for every
temporary past a few MB)."""


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

    Only the states entering the chunks are a recurrence (a few products a chunk); everything
    else is formed for a batch of chunks at once (`CHUNK_GROUP_ELEMENTS`), the last, shorter
    chunk of a sequence in a batch of its own.
    """
    H, L, K = seq.q.shape
    rho = contraction(seq.beta, seq.k, seq.g)
    S = seq.S0
    E = units.initial * S.norm(dim=1)
    vector = seq.g is not None and seq.g.ndim == 3
    per_chunk = H * C * C * (K if vector else 1)
    most = max(1, CHUNK_GROUP_ELEMENTS // per_chunk) * C
    full = L - L % C
    spans = [(a, min(a + most, full)) for a in range(0, full, most)]
    if full < L:
        spans.append((full, L))
    outs, bounds, mags = (torch.zeros_like(seq.v) for _ in range(3))
    for start, stop in spans:
        c = min(C, stop - start)
        x = _chunk_terms(seq, units, start, stop, c, l2norm_qk, inverse, heads or H)
        # The states entering each chunk: S⁺ = e^{G_c} ⊙ S + K~^T (U - W S).
        entering = []
        for i in range(x.W.shape[1]):
            entering.append(S)
            S = x.eGc[:, i, :, None] * S + x.Kt_signed[:, i].transpose(-1, -2) @ (
                x.U[:, i] - x.W[:, i] @ S
            )
        S_in = torch.stack(entering, 1)  # [H, N, K, V]
        o, bound, magnitude, dS = _chunk_outputs(x, S_in, scale, units, c)
        prefix = rho[:, start:stop].reshape(H, -1, c).cumprod(-1)  # [H, N, c]
        # E_n, the column error of the state entering chunk n, then leaving it.
        errors = []
        for step, decay in zip(dS.norm(dim=2).unbind(1), prefix[:, :, -1].unbind(1), strict=True):
            errors.append(E)
            E = decay[:, None] * E + step
        E_in = torch.stack(errors, 1)  # [H, N, V]
        bound = bound + scale * x.q_norm[..., None] * prefix[..., None] * E_in[:, :, None, :]
        outs[:, start:stop] = o.reshape(H, -1, o.shape[-1])
        bound = bound + units.out * o.abs() + units.floor
        bounds[:, start:stop] = bound.reshape(H, -1, o.shape[-1])
        mags[:, start:stop] = magnitude.reshape(H, -1, o.shape[-1])
    return _finish(S, E, outs, bounds, mags)


@dataclass(frozen=True)
class _ChunkTerms:
    """What `chunk_sequence` forms of a batch of N chunks of c tokens before any state.

    Every tensor is ``[H, N, ...]``; the comments give the rest of the shape.
    """

    q: torch.Tensor  # [c, K]
    k: torch.Tensor  # [c, K]
    q_norm: torch.Tensor  # ||q_i|| [c]
    eG: torch.Tensor  # e^{G_i} [c, K or 1]
    eGc: torch.Tensor  # e^{G_c} [K or 1]
    Kt_signed: torch.Tensor  # K ⊙ e^{G_c - G} [c, K]
    T: torch.Tensor  # L^-1 [c, c]
    M: torch.Tensor  # `inverse_magnitude` [c, c]
    W: torch.Tensor  # T (β K ⊙ e^G) [c, K]
    U: torch.Tensor  # T (β V) [c, V]
    R1: torch.Tensor  # β |k| e^G [c, K]
    R2: torch.Tensor  # β |v| [c, V]
    P: torch.Tensor  # Σ_m |q_im| |k_jm| e^{G_im - G_jm}, j <= i [c, c]
    A_qk: torch.Tensor  # the same on signed q, k [c, c]
    L_bare: torch.Tensor  # strict_tril(β |k| |k|^T) [c, c]
    bare_k: torch.Tensor  # β |k| [c, K]
    eps_w: torch.Tensor | float  # ε_w of each chunk's weights [1, 1]
    eps_k: float  # ε_k (ε_q: q is normalised as k is)


def _chunk_terms(
    seq: DeltaSequence,
    units: Units,
    start: int,
    stop: int,
    c: int,
    l2norm_qk: bool,
    inverse: InverseKind,
    heads: int,
) -> _ChunkTerms:
    """The state-free terms of the chunks of c tokens in ``start:stop`` (module docstring)."""
    H, _, K = seq.q.shape

    def chunks(x: torch.Tensor) -> torch.Tensor:
        return x[:, start:stop].reshape(H, -1, c, *x.shape[2:])

    q, k, v, beta = chunks(seq.q), chunks(seq.k), chunks(seq.v), chunks(seq.beta)[..., None]
    u = units.u
    # One decay for every key dimension (none, or a scalar gate) keeps a last axis of 1, so
    # every pair sum is a matrix product; a vector gate's weights are [c, c, K].
    if seq.g is None:
        G = q.new_zeros(*q.shape[:3], 1)
    elif seq.g.ndim == 2:
        G = chunks(seq.g).cumsum(-1)[..., None]
    else:
        G = chunks(seq.g).cumsum(-2)
    # The chunk-local cumsum's absolute error (γ_{c} |G|), doubled for a difference, then the
    # exp: (4 + 2.4|x|) u (the ex2.approx model of docs/error-model.md §4).
    eps_w: torch.Tensor | float = 0.0
    if seq.g is not None:
        # The largest |G| of each sequence's chunk, over its heads.
        Gmax = G.abs().reshape(H // heads, heads, G.shape[1], -1).amax((1, 3))
        Gmax = Gmax.repeat_interleave(heads, 0)[..., None, None]  # [H, N, 1, 1]
        eps_w = (2 * units.gamma(c + 1) + 2.4 * u) * Gmax + 4 * u
    w_strict = pair_weights(G, strict=True, vector=True)  # [H, N, c, c, K or 1]
    w_incl = pair_weights(G, strict=False, vector=True)
    L_abs = beta * pair_scores(k.abs(), k.abs(), w_strict)
    L_off = beta * pair_scores(k, k, w_strict)
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    T = forward_substitution_inverse(eye + L_off)
    eG = torch.exp(G)
    bare_k = beta * k.abs()
    return _ChunkTerms(
        q=q,
        k=k,
        q_norm=q.norm(dim=-1),
        eG=eG,
        eGc=torch.exp(G[:, :, -1]),
        Kt_signed=k * torch.exp(G[:, :, -1:] - G),
        T=T,
        M=inverse_magnitude(L_off, T, kind=inverse, L_abs=L_abs),
        W=T @ (beta * k * eG),
        U=T @ (beta * v),
        R1=bare_k * eG,
        R2=beta * v.abs(),
        P=pair_scores(q.abs(), k.abs(), w_incl),
        A_qk=pair_scores(q, k, w_incl),
        L_bare=(bare_k @ k.abs().transpose(-1, -2)).tril(-1),
        bare_k=bare_k,
        eps_w=eps_w,
        eps_k=units.l2norm(K, l2norm_qk),
    )


def _chunk_outputs(
    x: _ChunkTerms, S: torch.Tensor, scale: float, units: Units, c: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """o, its bound without the carried state error, its magnitude, and δS, for a batch.

    ``S``: the exact state entering each chunk ``[H, N, K, V]``.
    """
    K = x.q.shape[-1]
    u, eps_w, eps_k = units.u, x.eps_w, x.eps_k
    S_abs = S.abs()
    Vn = x.U - x.W @ S
    Vn_abs = Vn.abs()
    Kt = x.Kt_signed.abs()
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
    dVn = eta * x.M @ (x.R2 + x.R1 @ S_abs) + zeta * (x.U.abs() + x.W.abs() @ S_abs)
    # Weights e^x that are subnormal err by 2^-150 absolutely: the terms without them.
    dVn = dVn + units.under * x.T.abs() @ (x.L_bare @ Vn_abs + x.bare_k @ S_abs)
    dS = (
        (2 * u + eps_w) * x.eGc[..., None] * S_abs
        + (units.gamma(c + 1) + eps_w + eps_k + units.casts) * Kt.transpose(-1, -2) @ Vn_abs
        + Kt.transpose(-1, -2) @ dVn
        + units.under * (S_abs + x.k.abs().transpose(-1, -2) @ Vn_abs)
        + (2 * c + 2 * K + 8) * units.under
    )
    qG = x.q * x.eG
    magnitude = scale * (qG.abs() @ S_abs + x.P @ Vn_abs)
    o = scale * (qG @ S + x.A_qk @ Vn)
    relative = units.gamma(K + c + 2) + eps_w + 2 * eps_k + units.state + units.casts
    bound = (
        relative * magnitude
        + scale * x.P @ dVn
        + scale
        * units.under
        * (x.q.abs() @ S_abs + (x.q.abs() @ x.k.abs().transpose(-1, -2)).tril() @ Vn_abs)
        + (2 * c + 2 * K + 8) * units.under
    )
    return o, bound, magnitude, dS


def _finish(
    S: torch.Tensor, E: torch.Tensor, o: torch.Tensor, bound: torch.Tensor, magnitude: torch.Tensor
) -> SequenceBound:
    """One sequence's `SequenceBound` from its final state and column error, and its outputs."""
    return SequenceBound(
        o=o,
        o_bound=bound,
        o_magnitude=magnitude,
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
                bound = recurrent_sequence(
                    seq, p.scale, units, l2norm_qk=p.l2norm_qk, gate_factors=p.gate_factors
                )
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
        same sums on absolute values: the scale ρ = err / (u M) is measured on). Within
        `linattn_verify.core.reuse.reusing_results` (the size reach): the result of the last
        call if its arguments were equal (the caller must not write into it).
    """
    return reused(
        "delta.forward_bounds",
        (problem, recipe, causal_exact),
        lambda: _forward_bounds(problem, recipe, causal_exact),
    )


def _forward_bounds(
    problem: DeltaProblem, recipe: DeltaRecipe, causal_exact: bool
) -> dict[str, TensorBound]:
    if problem.gv is not None:
        return _value_gated_bounds(problem, recipe, causal_exact)
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


def _value_gated_bounds(
    problem: DeltaProblem, recipe: DeltaRecipe, causal_exact: bool
) -> dict[str, TensorBound]:
    """A value-gated problem's bounds: those of its single-column fold, put back in order.

    Only the recurrent recipe's: a chunked kernel's value-side decay would enter its chunk
    products in ways the fold's chunk bound does not count.
    """
    if recipe.form != "recurrent":
        raise InvalidArgument(
            f"A value gate gv is judged under the recurrent recipe only; got form={recipe.form!r}."
        )
    _, _, H, _, V = problem.shape
    folded = _forward_bounds(fold(problem), recipe, causal_exact)
    return {name: unfold_bound(b, H, V) for name, b in folded.items()}


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
        count=reference.new_tensor(count).expand_as(reference),
        unit=units.acc,
        verifiable=torch.isfinite(bound),
    )


__all__ = [
    "SequenceBound",
    "chunk_sequence",
    "contraction",
    "forward_bounds",
    "recurrent_sequence",
    "running_errors",
    "sequence_bounds",
    "step_errors",
]
