# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Gradient error bounds of the delta rule for the chunk (WY / UT) recipe (error-model §8.4).

For the loss <o, do> + <S_T, dS_T>, take a chunk of c tokens entering with the state S (exact,
computed with column errors E by the forward) and left with the adjoint Λ⁺ = ∂loss/∂S⁺ of the
state leaving it (exact, computed with column errors F⁺). With the forward's notation (bounds.py:
K_in = K ⊙ e^G, Q_in = Q ⊙ e^G, K~ = K ⊙ e^{G_c - G}, weights w_ijm = e^{G_im - G_jm},
Akk = strict_tril(Σ_m K_im K_jm w_ijm), Aqk = tril(Σ_m Q_im K_jm w_ijm), L = I + diag(β) Akk,
T = L^-1) the chunk's forward is R = diag(β)(V - K_in S), Vn = T R, O = s (Q_in S + Aqk Vn),
S⁺ = e^{G_c} ⊙ S + K~^T Vn, and its exact backward, term by term:

    dVn   = s Aqk^T dO + K~ Λ⁺                  (the adjoint of the corrected values)
    Y     = T^T dVn                             (the adjoint of R: d(βv) = Y, d(βK_in) = -Y S^T)
    dL    = -strict_tril(Y Vn^T)                (= -T^T dT T^T with dT = dVn R^T: the gradient
                                                 through the triangular inverse)
    dAkk  = diag(β) dL,    dAqk = s tril(dO Vn^T)
    dv_j  = β_j Y_j
    dβ_j  = Y_j · (v_j - S^T k_in_j) + Σ_l dL_jl Akk_jl
    dq_i  = s e^{G_i} ⊙ (S dO_i) + Σ_{j<=i} dAqk_ij k_j ⊙ w_ij
    dk_j  = Σ_{i>=j} dAqk_ij q_i ⊙ w_ij + Σ_{l<j} dAkk_jl k_l ⊙ w_jl + Σ_{i>j} dAkk_ij k_i ⊙ w_ij
            - β_j e^{G_j} ⊙ (S Y_j) + e^{G_c - G_j} ⊙ (Λ⁺ Vn_j)
    dG_im = Σ_{j<i} dAkk_ij k_im k_jm w_ijm - Σ_{l>i} dAkk_li k_lm k_im w_lim   (the same pair
            terms for dAqk, j <= i) + s q_in_im (S dO_i)_m - β_i k_in_im (S Y_i)_m
            - K~_im (Λ⁺ Vn_i)_m  [+ Σ_j K~_jm (Λ⁺ Vn_j)_m + e^{G_cm} Σ_v Λ⁺_mv S_mv at i = c]
    dg_t  = Σ_{i>=t} dG_i                       (G is the chunk-local cumsum: a reverse cumsum;
                                                 a scalar gate sums over m)
    Λ     = e^{G_c} ⊙ Λ⁺ + s Q_in^T dO - K_in^T diag(β) Y   (the adjoint of S; dS_0 at chunk 1)

`chunk_backward` evaluates exactly these sums. With every input replaced by its absolute value,
every subtraction by an addition and T by M = |T| (I + |L - I|) |T| (>= |T|, so every occurrence
of T and T^T is charged the triangular factor), it gives the magnitude m of each gradient
element: the sum of the absolute values of all the product terms of the fully expanded
expression, Vn as T R and R as βv + β K_in S (never the cancelled |Vn|). Every association of a
product chain, every summation order and every regrouping of the same terms has first-order
rounding error <= γ_n times this sum, n the longest chain of roundings; so one m covers torch
autograd of the fp32 chunk reference (which back-propagates through forward substitution: a
triangular solve with L^T, error <= γ_c |T^T| |L^T| |T^T| <= γ_c M^T) and FLA's backward (dA =
dw (βK_in)^T + du (βv)^T = dVn R^T, then -A^T dA A^T; dq, dk, dg from the identities
dg_i = q_i·dq_i - k_i·dk_i + ..., whose products are the same terms as the pair terms above,
grouped per token). The dg magnitude of token t is Σ_{i>=t} m(dG_i): every later token's terms,
not |dg_t| (the pair terms of two tokens both >= t cancel exactly but not in rounding).

The bound of each gradient element x (first order, O(u²) left to the fail threshold r <= 2):

    B_x = κ_x m_x + J(m_x; T: ΔT, q: ε_k |q|, k: ε_k |k|, w, e^G: ε_w w, S: u_S |S| + φ_S,
                        Λ⁺: u_S |Λ⁺| + φ_S, stored node X: u_I |X| + φ_I) + J(m_x; S: E, Λ⁺: F⁺)

where J(m; X: ΔX, ...) is the directional derivative of the magnitude (a polynomial with
non-negative coefficients) along ΔX, i.e. the sum over every occurrence (slot) of X in every term
of the term with that slot replaced by ΔX: the first-order effect of an error ΔX in X wherever X
is read (`torch.func.jvp`). It covers

* the inverse: |δT| <= ΔT = (γ_{2c} + 4 u_op) M + |T| |δL| |T| + u_T |T| + φ_T (Higham Thm 8.5
  for forward substitution or the block merge T21 = -T22 L21 T11 on the computed L, its two
  products' tf32 operands 4 u_op; the first-order perturbation -T δL T of L's own errors
  |δL_ij| <= β_i Σ_m |k_im k_jm| w_ijm (γ_{K+2} + 2 ε_k + 2 u_op + ε_ij); T stored in
  ``inverse_dtype``), charged at each T of a term (Y and Vn: dL, dβ, dk and dg read T twice);
* the in-kernel L2 norm (ε_k per component, units.Units.l2norm) and the gate: the chunk-local
  cumsum errs by γ_{c+1} |G_i| (every g <= 0), so a weight e^{G_i - G_j} errs relatively by
  ε_ij = γ_{c+1}(|G_i| + |G_j|) + (4 + 2.4 |G_i - G_j|) u (the exp: docs/error-model.md §4), e^{G_i}
  by γ_{c+1}|G_i| + (4 + 2.4|G_i|) u; e^0 = 1 of a token with itself is exact; an underflowing
  weight errs by half the smallest fp32 subnormal more. Per pair, not the chunk's largest |G|:
  a weight whose exponents are large but whose difference is small is charged only its own;
* the recomputed forward state, column error E (bounding every element of the column), and the
  adjoint of the chunk-boundary state, F⁺, each charged at every S and Λ⁺ the terms read; both are
  read in ``state_dtype`` (FLA stores h and dh in the input dtype, carried in fp32 registers);
* the stores in ``intermediate_dtype``, each at its own node: a zero-valued additive slot at the
  node takes u_I |X| + φ_I as its tangent (X the node's exact value; φ half the smallest
  subnormal of the storage dtype: a 16-bit store below the normal range errs by up to φ, not by
  u|x|). The nodes: Q_in, K_in (β K_in cast), K~ (the decayed keys), βv (cast), Aqk (the
  scores), W = T βK_in (read by W S and by the adjoint's W^T dVn), U and Vn, the decayed Vn FLA
  stores before K~^T reads it (Σ_j |k_jm| (u_I |K~_jm Vn_jv| + φ) on S⁺), dVn and its local part
  s Aqk^T dO (stored apart), Y (du), dL (dA), and dW = dVn S^T, which reaches d(βK_in) through
  T^T (M^T (u_I |dW| + φ)); the adjoint dT = dVn R^T of a stored inverse, rounded to its dtype
  by autograd through the cast, reaches dL as T^T δdT T^T (u_T M^T |dVn| |R|^T M^T).
  ``casts_on_path`` names roundings at these nodes (FLA's: βv, βK_in, Q_in, K~, the decayed Vn,
  the scores), each charged here already; a cast at another node is not modelled. Measured:
  FLA's fp16 gated and KDA backward read W = A (β k e^G) stored in fp16 (chunk_delta_h.py:598),
  and dS_0 of strongly gated sequences (|dS_0| ~ 1e-9) erred by 2e-8: r = 2.3 and 6.5 against a
  relative store model without φ.

κ collects the roundings of the arithmetic, each charged the whole m:

    κ_x = γ_{N_x} + 16 u_op

N_x bounds the longest chain of roundings of x's terms (`rounding_counts`; the counts of two
computed factors of a product add): Vn K + c + 4 (R: K + 3, T R: c + 1; or W S after W = T βK_in),
dVn K + c + 4 (Aqk K + 2, Aqk^T dO c + 2, K~ Λ⁺ K + 1, the add), Y = n(dVn) + c + 1, dL = Y·Vn over
V: n(Y) + n(Vn) + V + 1 (FLA's T^T (dVn R^T) T^T has the same count), then per gradient dv n(Y) + 1,
dq n(Vn) + V + c + 5, dk n(dL) + c + 8, dβ n(dL) + K + c + 4, dg n(dL) + 3c + K + 12 (the pair
terms, dG's sums, the reverse cumsum and a scalar gate's sum over K), Λ n(Y) + c + 5, S⁺ n(Vn) +
c + 2. u_op: tf32 operands, two per dot, at most 8 dots on a path.

The running column errors: the forward error of the state (bounds.py's model with this module's
local term: E⁺ = Π ρ E + ||κ m(S⁺) + J(m(S⁺); T, q, k, w)||_2 over K) and of the adjoint, run
backward with the exact transition's norm ||Φ^T||_2 = ||Φ||_2 <= Π_{t in chunk} ρ_t:

    F = Π ρ F⁺ + ||κ m(Λ) + J(m(Λ); T, q, k, w)||_2     (Λ does not depend on S)

F of the first chunk is the bound of dS_0 (every element of the column). With the in-kernel L2
norm, dq and dk are chained to the raw inputs as gradient_bounds.py does (|J| B + (γ_{K+6} +
2 ε_k) |J| m). Every gradient is finally rounded to its input's dtype (one u |ref| and half the
smallest subnormal), as `gradient_bounds.backward_bounds`.

Evaluation. Given the exact S entering and Λ⁺ leaving a chunk, everything above is local to the
chunk, so only two recurrences run chunk by chunk: the exact states forward and the exact adjoints
backward (`chunk_states`, `chunk_adjoints`: a few products per chunk, the rest formed for many
chunks at once), and then the column errors E and F, recurrences on [H, V]. The chunks' sums
and both jvps are evaluated on batches of chunks folded into the heads axis ([H·n, c, ...]), n
chosen so that one intermediate holds at most `GROUP_ELEMENTS` elements: memory is O(L) (the
states, adjoints, inverses and results) plus one batch's intermediates, a few hundred MB.

The reference gradients are the recurrent oracle's exact adjoint (`reference_gradients`, equal
to float64 autograd through it to rounding), computed before the bounds;
`chunk_backward` in exact mode reproduces them (tests/delta/test_chunk_gradient_bounds.py), so the
magnitudes above are those of the same sums.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.delta.bounds import contraction, per_head_elements
from linattn_verify.delta.chunk_backward import (
    PRIMITIVES,
    ChunkInputs,
    chunk_adjoints,
    chunk_inputs,
    chunk_primitives,
    chunk_states,
    evaluate,
    jvp,
)
from linattn_verify.delta.gradient_assembly import (
    assemble_gradient_bounds,
    l2norm_chain,
    reference_gradients,
)
from linattn_verify.delta.inverse import InverseKind, inverse_kind
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import DeltaSequence, group_size, pair_scores
from linattn_verify.delta.units import SMALLEST_SUBNORMAL, Units
from linattn_verify.typing import dtype_name


def storage_floors(recipe: DeltaRecipe, dtype: torch.dtype) -> tuple[float, float, float]:
    """Return φ of the intermediates, the inverse and the state stores (module docstring).

    Half the smallest subnormal of the storage dtype where the recipe rounds to it; 0 where it
    stores nothing narrower than its arithmetic.
    """

    def floor(name: str) -> float:
        if recipe.u_storage(name, dtype) == 0:
            return 0.0
        value = getattr(recipe, name)
        resolved = dtype_name(dtype) if value == "input" else value
        return SMALLEST_SUBNORMAL.get(resolved, 0.0) / 2

    return floor("intermediate_dtype"), floor("inverse_dtype"), floor("state_dtype")


def rounding_counts(K: int, V: int, c: int) -> dict[str, int]:
    """N of each output: the longest chain of roundings of its terms (module docstring)."""
    n_vn = K + c + 4  # R (K + 3), T R (c + 1); or W S after W = T (β K_in): the same
    n_dvn = K + c + 4  # s Aqk^T dO (Aqk: K + 2, then c + 2), + K~ Λ⁺ (K + 1), the add
    n_y = n_dvn + c + 1  # T^T dVn (or the solve with L^T)
    n_dl = n_y + n_vn + V + 1  # Y · Vn over V (FLA: dVn R^T then T^T . T^T: the same)
    return {
        "v": n_y + 1,
        "q": n_vn + V + 2 + c + 3,  # dAqk = s dO · Vn, then Σ_j dAqk k w
        "k": n_dl + 1 + c + 7,  # dAkk = β dL, Σ over the chunk of dAkk k w, five terms joined
        "beta": n_dl + (K + 2) + c + 2,  # Σ_l dL_jl Akk_jl, joined to Y · (v - S^T k_in)
        "g": n_dl + 1 + 3 + 2 * c + 8 + c + K,  # pair terms, dG's sums, reverse cumsum, Σ_m
        "Lam_in": n_y + c + 5,  # K_in^T diag(β) Y, joined to e^{G_c} Λ⁺ and s Q_in^T dO
        "S_next": n_vn + c + 2,  # K~^T Vn, joined to e^{G_c} S
    }


GROUP_ELEMENTS = 2**16
"""The most float64 elements one per-chunk intermediate of a batch of chunks may hold (`_groups`):
a chunk's largest is its pair weights (c² K with a vector gate) or a [c, K] / [K, V] matrix,
and a batch's jvp keeps about two hundred such tensors alive: near 100 MB. Measured at
T = 65,536, H = 2, K = V = 64, scalar gate (the whole gradient bound, one thread): 2^16 took
38.5 s CPU and 2.04 GB peak, 2^17 32.5 s and 2.17 GB, 2^18 no faster and 0.2 GB more."""


STATE, ADJOINT = PRIMITIVES.index("S"), PRIMITIVES.index("Lam")
"""Where S and Λ⁺ are among the primitives."""


def _groups(H: int, L: int, C: int, per_chunk: int, elements: int) -> list[tuple[int, int, int]]:
    """The batches of chunks of a sequence: ``(first token, chunks, chunk length)``.

    Full chunks, as many at a time as keep one intermediate of ``per_chunk`` elements per head
    and chunk under ``elements``; the shorter last chunk (L not a multiple of C) alone.
    """
    full = L // C
    most = max(1, elements // max(1, H * per_chunk))
    groups = [(n * C, min(most, full - n), C) for n in range(0, full, most)]
    if full * C < L:
        groups.append((full * C, 1, L - full * C))
    return groups


def model_tangents(
    x: ChunkInputs,
    M: torch.Tensor,
    nodes: dict[str, torch.Tensor],
    *,
    units: Units,
    eps_k: float,
    floors: tuple[float, float, float],
    inverse: InverseKind,
    gated: bool,
) -> tuple[torch.Tensor, ...]:
    """ΔX of the primitives and stored nodes (docstring); S, Λ⁺ only their reads.

    ``x`` may batch several chunks (`chunk_inputs`): every tangent is per leading index.
    """
    c, K = x.q.shape[1], x.q.shape[2]
    V = x.v.shape[-1]
    u = units.u
    phi_I, phi_T, phi_S = floors
    floor = units.under if gated else 0.0
    # The chunk-local cumsum errs by γ_{c+1} |G_i| (every g <= 0, so |G_i| = Σ|g|); a weight
    # e^{a - b} by both cumsums' errors and the exp's (4 + 2.4|a - b|) u. Weights of a
    # token with itself (the diagonal of wqk, e^{G_c - G_c}) are e^0 = 1 exactly.
    a = units.gamma(c + 1) * x.G.abs() if gated else torch.zeros_like(x.G)
    diff = (x.G[:, :, None, :] - x.G[:, None, :, :]).abs()
    rel = (a[:, :, None, :] + a[:, None, :, :] + (4 + 2.4 * diff) * u) * gated
    off = 1 - torch.eye(c, dtype=x.q.dtype, device=x.q.device)[None, :, :, None]
    rel_pair = rel * off

    def w_dir(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return r * w.abs() + floor * (w != 0) * (r != 0)

    rel_G = (a + (4 + 2.4 * x.G.abs()) * u) * gated
    rel_out = rel[:, -1] * (1 - torch.eye(c, dtype=x.q.dtype, device=x.q.device)[-1][None, :, None])
    # T: forward substitution (or the block merge) on the computed L, and L's own errors:
    # |δT| <= (γ_{2c} + 4 u_op) M + |T| |δL| |T| + u_T |T| + φ_T,
    # |δL_ij| <= β_i Σ_m |k_im k_jm| w_ijm η_ijm.
    eta = units.gamma(K + 2) + 2 * eps_k + 2 * units.op + rel_pair
    dL = x.beta.abs()[..., None] * pair_scores(x.k.abs(), x.k.abs(), x.wkk.abs() * eta)
    dT = (units.gamma(2 * c) + 4 * units.op) * M + x.T.abs() @ dL @ x.T.abs()
    stored = torch.ones_like(x.T) if inverse == "pivoting" else torch.ones_like(x.T).tril()
    dT = dT + (units.inverse * x.T.abs() + phi_T) * stored
    # Every store errs by u |node| + φ (φ: an underflowing 16-bit store), at its node.
    uI, uS = units.inter, units.state
    # Gradual underflow at every node: each of the at most K + V + c + 4 operations forming
    # it errs by 2^-150 absolutely where its result is subnormal, and that error travels
    # with the node through every later product (a subnormal e^{G_i} times s q S dO).
    under = (K + V + c + 4) * units.under

    def store(name: str, n_floor: float = 1.0) -> torch.Tensor:
        return uI * nodes[name].abs() + n_floor * phi_I + under

    Mt = M.transpose(-1, -2)
    zero = torch.zeros((), dtype=x.q.dtype, device=x.q.device)
    # The three terms below are products of u_I, φ_I or u_T with magnitudes: 0 (and not formed,
    # at the cost of three products per chunk) where the recipe stores nothing.
    # The decayed Vn FLA stores before K^T reads it: Σ_j |k_jm| (u |e^{G_c - G_j} Vn_jv| + φ).
    sn = zero.expand(x.q.shape[0], K, V)
    if uI or phi_I:
        Kt_abs = nodes["node_Kt"].abs().transpose(-1, -2)
        sn = uI * Kt_abs @ nodes["node_Vn"].abs() + phi_I * x.k.abs().sum(1)[:, :, None]
    # The adjoint dT = dVn R^T of a stored inverse, rounded to inverse_dtype (autograd
    # through the cast): it reaches dL as T^T δ(dT) T^T, <= u_T M^T |dVn| |R|^T M^T.
    dT_adj = zero
    if units.inverse:
        dVn_R = nodes["node_dVn"].abs() @ nodes["node_R"].abs().transpose(-1, -2)
        dT_adj = units.inverse * (Mt @ dVn_R @ Mt)
    # dW = -dVn S^T stored reaches d(βK_in) = T^T dW through T^T: M^T (u |dW| + φ).
    dW = zero.expand(x.k.shape)
    if uI or phi_I:
        dW = Mt @ (uI * nodes["node_dW"].abs() + phi_I)
    return (
        eps_k * x.q.abs() + under,
        eps_k * x.k.abs() + under,
        w_dir(x.wqk, rel_pair),
        w_dir(x.wkk, rel_pair),
        w_dir(x.eG, rel_G),
        w_dir(x.eGc, rel_G[:, -1]),
        w_dir(x.ekout, rel_out),
        dT + under,
        uS * x.S.abs() + phi_S + under,
        uS * x.Lam.abs() + phi_S + under,
        store("node_q_in"),
        store("node_k_in"),
        store("node_Kt"),
        store("node_Aqk"),
        uI * x.v.abs() + phi_I + under,  # beta v cast (relative to v: beta is exact)
        store("node_W"),
        store("node_Vn") + store("node_U"),
        sn + under,
        store("node_local") + store("node_dVn"),
        store("node_Y"),
        store("node_dL") + dT_adj + max(phi_I, phi_T),
        dW + under,
    )


def abs_primals(x: ChunkInputs, M: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The magnitudes' primals: every primitive's absolute value, M for T, the zero slots."""
    prims = [p.abs() for p in x.primitives()]
    prims[PRIMITIVES.index("T")] = M
    return tuple(prims)


def _along_states(
    f: Callable[..., dict[str, torch.Tensor]], primals: tuple[torch.Tensor, ...]
) -> Callable[..., dict[str, torch.Tensor]]:
    """``f`` as a function of S and Λ⁺ alone, the other primals held at their values.

    Its jvp is that of ``f`` along tangents zero everywhere but S and Λ⁺ (the carried errors),
    without forming the products of the zero tangents (each an exact 0: the same numbers).
    """

    def g(S: torch.Tensor, Lam: torch.Tensor) -> dict[str, torch.Tensor]:
        prims = list(primals)
        prims[STATE], prims[ADJOINT] = S, Lam
        return f(*prims)

    return g


def _sequence(
    seq: DeltaSequence,
    raw_q: torch.Tensor,
    raw_k: torch.Tensor,
    do: torch.Tensor,
    dS_T: torch.Tensor,
    scale: float,
    units: Units,
    C: int,
    l2norm_qk: bool,
    floors: tuple[float, float, float],
    inverse: InverseKind = "substitution",
    group_elements: int | None = None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Bounds and magnitudes of one sequence's gradients (heads first), by input name.

    ``inverse`` says how the kernel inverts (`linattn_verify.delta.inverse.inverse_magnitude`);
    a pivoting solver's stored T̂ has an upper triangle too. The chunks are evaluated in
    batches (`chunk_inputs`) of at most ``group_elements`` elements per intermediate (default
    `GROUP_ELEMENTS`), in four passes: the exact states forward, the exact adjoints backward
    (only their recurrences run chunk by chunk), every chunk's magnitudes and model jvp (the
    local terms of E, F and the gradients), then, once the column errors E and F⁺ have run over
    the chunks, the jvp carrying them. Memory: O(L) for the states, adjoints and inverses, and
    the results; one batch's intermediates on top.
    """
    H, L, K = seq.q.shape
    V = seq.v.shape[-1]
    eps_k = units.l2norm(K, l2norm_qk)
    rho = contraction(seq.beta, seq.k, seq.g)
    vector = seq.g is not None and seq.g.ndim == 3
    elements = GROUP_ELEMENTS if group_elements is None else group_elements
    groups = _groups(H, L, C, max(C * C * (K if vector else 1), C * K, C * V, K * V), elements)
    chunk_of = [sum(n for _, n, _ in groups[:i]) for i in range(len(groups))]
    N = sum(n for _, n, _ in groups)

    def coefficients(c: int) -> dict[str, float]:
        """κ of each output of a chunk of c tokens (module docstring)."""
        return {
            name: units.gamma(n) + 16 * units.op for name, n in rounding_counts(K, V, c).items()
        }

    def per_chunk(t: torch.Tensor) -> torch.Tensor:
        """A batch's ``[H·n, ...]`` as ``[H, n, ...]``."""
        return t.reshape(H, -1, *t.shape[1:])

    def batch(
        i: int, states: torch.Tensor, adjoints: torch.Tensor
    ) -> tuple[ChunkInputs, torch.Tensor]:
        start, n, c = groups[i]
        first = chunk_of[i]
        S = states[:, first : first + n].reshape(H * n, K, V)
        Lam = adjoints[:, first : first + n].reshape(H * n, K, V)
        dO = do[:, start : start + n * c]
        return chunk_inputs(
            seq, start, start + n * c, S, Lam, dO, inverse=inverse, chunks=n, T=inverses[i]
        )

    # 1. The exact states entering each chunk (and each batch's inverses, kept for the others).
    states = seq.S0.new_empty(H, N, K, V)
    inverses: list[torch.Tensor] = []
    S = seq.S0
    for i, (start, n, c) in enumerate(groups):
        x, _ = chunk_primitives(
            seq, start, start + n * c, S, S, do[:, start : start + n * c], chunks=n
        )
        inverses.append(x.T)
        entering, S = chunk_states(x, S)
        states[:, chunk_of[i] : chunk_of[i] + n] = per_chunk(entering)
    # 2. The exact adjoints Λ⁺ leaving each chunk, backward; Λ of the first is dS_0's.
    adjoints = seq.S0.new_empty(H, N, K, V)
    Lam = dS_T
    for i in reversed(range(len(groups))):
        start, n, c = groups[i]
        x, _ = chunk_primitives(
            seq,
            start,
            start + n * c,
            Lam,
            Lam,
            do[:, start : start + n * c],
            chunks=n,
            T=inverses[i],
        )
        leaving, Lam = chunk_adjoints(x, Lam, scale)
        adjoints[:, chunk_of[i] : chunk_of[i] + n] = per_chunk(leaving)
    # 3. Every chunk's magnitudes and model jvp: the local terms of E and F, and the
    # gradients' bounds so far (κ m + J along the model's errors).
    local_E, local_F = seq.S0.new_empty(H, N, V), seq.S0.new_empty(H, N, V)
    decay = seq.S0.new_empty(H, N)
    names = ("q", "k", "v", "beta", "g")
    bounds: dict[str, torch.Tensor] = {}
    mags: dict[str, torch.Tensor] = {}
    for i, (start, n, c) in enumerate(groups):
        x, M = batch(i, states, adjoints)
        kappa = coefficients(c)
        exact = evaluate(x, scale, magnitude=False, outputs="nodes")(*x.primitives())
        tangents = model_tangents(
            x,
            M,
            exact,
            units=units,
            eps_k=eps_k,
            floors=floors,
            inverse=inverse,
            gated=seq.g is not None,
        )
        mag, lin = jvp(
            evaluate(x, scale, magnitude=True, outputs="bounds"), abs_primals(x, M), tangents
        )
        chunks = slice(chunk_of[i], chunk_of[i] + n)
        for target, out in ((local_E, "S_next"), (local_F, "Lam_in")):
            target[:, chunks] = per_chunk((kappa[out] * mag[out] + lin[out]).norm(dim=1))
        decay[:, chunks] = rho[:, start : start + n * c].reshape(H, n, c).prod(-1)
        tokens = slice(start, start + n * c)
        for name in names:
            part = kappa[name] * mag[name] + lin[name]
            if name not in bounds:
                bounds[name] = part.new_empty(H, L, *part.shape[2:])
                mags[name] = part.new_empty(H, L, *part.shape[2:])
            bounds[name][:, tokens] = part.reshape(H, n * c, *part.shape[2:])
            mags[name][:, tokens] = mag[name].reshape(H, n * c, *part.shape[2:])
    # The column errors: E entering each chunk, forward; F⁺ leaving each, backward.
    E_in, F_out = seq.S0.new_empty(H, N, V), seq.S0.new_empty(H, N, V)
    E = seq.S0.new_zeros(H, V)
    for j in range(N):
        E_in[:, j] = E
        E = decay[:, j, None] * E + local_E[:, j]
    F = seq.S0.new_zeros(H, V)
    for j in reversed(range(N)):
        F_out[:, j] = F
        F = decay[:, j, None] * F + local_F[:, j]
    # 4. The jvp along the carried errors (S: E, Λ⁺: F⁺), the other primitives held fixed.
    for i, (start, n, c) in enumerate(groups):
        x, M = batch(i, states, adjoints)
        primals = abs_primals(x, M)
        f_abs = evaluate(x, scale, magnitude=True, outputs="gradients")

        chunks = slice(chunk_of[i], chunk_of[i] + n)
        dirs = tuple(
            t[:, chunks].reshape(H * n, 1, V).expand(H * n, K, V).clone() for t in (E_in, F_out)
        )
        _, carried = jvp(_along_states(f_abs, primals), (primals[STATE], primals[ADJOINT]), dirs)
        tokens = slice(start, start + n * c)
        for name in names:
            shape = carried[name].shape
            bound = bounds[name][:, tokens].reshape(shape) + carried[name]
            if name in ("q", "k") and l2norm_qk:
                raw = (raw_q if name == "q" else raw_k)[:, tokens].reshape(H * n, c, K)
                raw = raw.to(torch.float64)  # as the kernel received it: converted exactly
                magnitude = mags[name][:, tokens].reshape(shape)
                bound, magnitude = l2norm_chain(
                    raw, getattr(x, name), bound, magnitude, units, eps_k
                )
                mags[name][:, tokens] = magnitude.reshape(H, n * c, *shape[2:])
            bounds[name][:, tokens] = bound.reshape(H, n * c, *shape[2:])
    result = {name: (bounds[name], mags[name]) for name in bounds}
    result["initial_state"] = (F[:, None, :].expand(H, K, V).clone(), Lam.abs())
    return result


def chunk_backward_bounds(
    problem: DeltaProblem,
    recipe: DeltaRecipe,
    *,
    do: torch.Tensor,
    d_final_state: torch.Tensor | None,
    causal_exact: bool = True,
) -> dict[str, TensorBound]:
    """Return a `TensorBound` per gradient of the chunk recipe (module docstring).

    Args:
        problem: The problem as the kernel receives it.
        recipe: The kernel's chunk recipe for the problem's dtype.
        do: The cotangent of o ``[B, T, H, V]``.
        d_final_state: The cotangent of S_T ``[N, H, K, V]``, or `None`.
        causal_exact: The kernel promises bit-exact causality (no pivoting solver for the
            chunk's inverse: `linattn_verify.delta.inverse.inverse_magnitude`). Default: `True`.

    Returns:
        ``dq``, ``dk``, ``dv``, ``dbeta``, ``dg`` and ``dinitial_state`` where the input exists:
        the float64 reference, the bound B and the magnitude.
    """
    units = Units.of(recipe, problem.q.dtype)
    _, _, _, K, V = problem.shape
    floors = storage_floors(recipe, problem.q.dtype)

    # Gradual underflow: every operation whose result is subnormal errs by up to 2^-150
    # absolutely, and a gradient element of the chunk form is built by dots over K and V inside
    # sums over up to C tokens; the L2-norm chain then divides by r >= sqrt(eps). (Tiny values,
    # 1e-20, put whole gradients in the subnormal range: measured 230 ulps of 2^-150 on dq.)
    C = recipe.chunk_size
    underflow = (C * (K + V) + 2 * C + K + V + 8) * units.under
    if problem.l2norm_qk:
        underflow *= L2NORM_EPS**-0.5

    def one(
        seq: DeltaSequence, q: torch.Tensor, k: torch.Tensor, do: torch.Tensor, dS: torch.Tensor
    ) -> dict[str, Any]:
        parts = _sequence(
            seq,
            q,
            k,
            do,
            dS,
            problem.scale,
            units,
            recipe.chunk_size,
            problem.l2norm_qk,
            floors,
            inverse_kind(recipe, causal_exact=causal_exact),
        )
        # In place: the bounds are this call's own tensors, and a copy would double them.
        return {name: (bound.add_(underflow), mag) for name, (bound, mag) in parts.items()}

    # A scalar gate's sum over K is inside its count N (3K): no further term.
    count = float(max(rounding_counts(K, V, recipe.chunk_size).values()))
    most = group_size(problem, per_head_elements(problem, recipe))
    exact = reference_gradients(problem, do, d_final_state)
    return assemble_gradient_bounds(
        problem, units, do, d_final_state, one, count=count, gate_sum=0.0, most=most, exact=exact
    )


__all__ = ["ChunkInputs", "chunk_backward_bounds", "chunk_inputs"]
