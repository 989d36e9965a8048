# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Gradient bounds of one sequence: dq, dk, dv, dg, d initial state (and key sum)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from linattn_verify.linear_attn._bounds import lifted
from linattn_verify.linear_attn._bounds.forward import ForwardPieces
from linattn_verify.linear_attn._bounds.lost import LostCharges
from linattn_verify.linear_attn._bounds.magnitudes import at_least_one, known_zero
from linattn_verify.linear_attn._bounds.overflow import backward_overflow
from linattn_verify.linear_attn._bounds.pairwise import PairMatrix
from linattn_verify.linear_attn._bounds.terms import SequenceTerms
from linattn_verify.linear_attn._bounds.units import Units
from linattn_verify.typing import LIFTED_MAPS


@dataclass(frozen=True)
class Cotangents:
    """Cotangents of one sequence: |do| ``[H, L, V]``, dS_T ``[H, K, V]``, dz_T ``[H, K]``.

    The output's cotangent enters every gradient bound by its magnitude only: it is carried as
    |do| (float64), one tensor where do and |do| would be two of the largest of a sequence.
    """

    do_abs: torch.Tensor
    dS: torch.Tensor
    dz: torch.Tensor


Put = Callable[[str, torch.Tensor], None]
"""Where a gradient's piece goes: ``put(key, value)`` (`backward_sequence`'s keys)."""


def backward_sequence(f: ForwardPieces, ct: Cotangents, normalize: bool, put: Put) -> None:
    """Magnitudes, bounds and unverifiable masks of the gradients of one sequence.

    Each is handed to ``put`` as soon as it is formed: ``M_x``, ``B_x`` for x in q, k, v
    (``[H, L, K|V]``), g (``[H, L]``), S0 (``[H, K, V]``) and z0 (``[H, K]``); then the masks
    ``bad_q``, ``bad_k``, ``bad_v``, ``bad_g`` (``[H, L]``), ``bad_S0`` (``[H]``), ``count``
    and ``overflow_heads``. Cost: a few block scans over the pairs per gradient, O(L) time.
    Memory: the gradients are formed one after another (dφ(q), dφ(k), dv, the initial state,
    dg), each one's contractions freed once it is written: about a dozen ``[H, L, K]`` float64
    tensors at a time besides the sequence's own.
    """
    seq, u = f.seq, f.seq.units
    s, V = seq.scale, seq.V
    nz = float(normalize)
    qa, ka, va, doa = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs(), ct.do_abs
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    dSa, dza = ct.dS.abs(), ct.dz.abs()
    # An exact feature map's errors are zero: their contractions are skipped (adding 0).
    exact_q, exact_k = known_zero(seq.q_err), known_zero(seq.k_err)
    good = ~f.bad[..., None]  # [H, L, 1]
    zeta = torch.where(f.Z == 0, 1.0, 1.0 / f.Z.abs())  # [H, L, 1]
    e_Z = torch.where(good & (f.Z != 0), f.B_Z * zeta, 0.0)  # relative error of the kernel's Z
    e_Z = e_Z + nz * backward_division_error(u)
    do_o = (doa * f.o.abs()).sum(-1) * nz  # |do_t|·|o_t|, [H, L]
    delta_err_raw = (doa * f.B_o).sum(-1) * nz  # error of δ_t from the kernel's ô, [H, L]
    delta_err = delta_err_raw * zeta[..., 0]
    R = (seq.outer(doa, va) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = initial_share(seq, doa, do_o, zeta)  # [H, L, K]
    count = seq.dot_length + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    Ub = u.acc * count + seq.eps_w + u.per_term + e_Z  # [H, L, L+1]
    Ub0, Ub_tok = Ub[..., 0], Ub[..., 1:]
    W_tok, w0 = seq.W[..., 1:], seq.W[..., 0]
    wE0, wE = seq.W_end[:, 0], seq.W_end[:, 1:]  # [H], [H, L]
    U_S = u.acc * (seq.acc_state + seq.V + 4) + seq.eps_w_end + u.per_term  # [H, L+1]
    US0, US = U_S[:, 0], U_S[:, 1:]
    # Decay weights that underflow: their absolute errors W^abs (`SequenceTerms.W_abs`) stand
    # in for the weights in each term, as one more term of every bound.
    Wa, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]
    WEa = seq.W_end_abs[:, 1:]
    WR, WaR = W_tok * R, Wa * R
    # Underflow in do_t·v_j is absolute before the division by Z_t; so are the quotient
    # adjoints' below the division dtype's normal range.
    dot_underflow = u.underflow * (seq.V + 2) * zeta
    adj = adjoint_errors(f, zeta, normalize)
    # The relative-error part of |dP| (counts, weights, e_Z), δ_t's error and the adjoints'.
    core = W_tok * (Ub_tok * R + delta_err[..., None] + adj.P)
    lost = LostCharges(f, ct.do_abs, ct.dS, ct.dz, zeta)
    # φ errors and underflow inside the K-dot, absolute errors of A_tj (before ζ), as dG's c_E.
    c_E = u.underflow * (seq.dot_length + 2)
    maxima: dict[str, torch.Tensor] = {}
    emit = emitter(put, maxima)

    # dG_t = q̃_t·dq̃_t - k̃_t·dk̃_t (+ the final-state pairing at t = L); dg = reverse cumsum.
    # Its pair terms Q_tj = s w_tj |A_tj| R_tj, summed over j (rows) and over t (columns), and
    # their errors, come from the contractions of dφ(q) and dφ(k): Σ_j w_tj |A_tj| R_tj =
    # |q̃_t|·(Σ_j w_tj R_tj |k̃_j|). Collected as [H, L] sums while those are alive.
    # dφ(q): contractions over keys j <= t (a row factor such as ζ_t rides on its vector).
    # Each stage forms its lost-intermediate charge first, while little else is alive.
    C_dqf = lost.dq()
    WR_ka, WR_kerr, WR_rows = _contract(WR, ka, None if exact_k else seq.k_err)
    core_ka = core @ ka
    M_dqf = s * (WR_ka + w0[..., None] * R0)
    M_dG = s * (qa * WR_ka).sum(-1)
    E_rows = (qa * core_ka).sum(-1) + c_E * WR_rows
    if not exact_q:
        E_rows = E_rows + (seq.q_err * WR_ka).sum(-1)
    if WR_kerr is not None:
        E_rows = E_rows + (qa * WR_kerr).sum(-1)
    WaR_ka = WaR @ ka
    B_dG = s * E_rows + (at_least_one(seq.q_feat) * C_dqf).sum(-1) + s * (qa * WaR_ka).sum(-1)
    del WR_ka, WR_rows, E_rows
    # The bound of dφ(q), accumulated in place in core_ka's tensor (a temporary of the size of
    # dφ(q) per term otherwise: the peak of the whole evaluation).
    B_dqf = core_ka
    B_dqf.addcmul_(dot_underflow, W_tok @ ka)
    if WR_kerr is not None:
        B_dqf += WR_kerr
    B_dqf += WaR_ka
    del WR_kerr, WaR_ka
    B_dqf.addcmul_((Ub0 * w0 + Wa0)[..., None], R0)
    B_dqf.addcmul_((w0 * delta_err)[..., None], z0a[:, None, :], value=nz)
    B_dqf.addcmul_(w0[..., None], adj.P0)
    B_dqf *= s
    B_dqf += C_dqf
    del C_dqf, core_ka
    emit("q", *feature_chain(seq, "q", M_dqf, B_dqf))
    del M_dqf, B_dqf
    # dφ(k): contractions over rows t >= j, and the final state's share.
    C_dkf = lost.dk()
    WR_qa, WR_qerr, WR_cols = _contract(WR.transpose(-1, -2), qa, None if exact_q else seq.q_err)
    core_qa = core.transpose(-1, -2) @ qa
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # [H, L, K]
    M_dkf = s * WR_qa + wE[..., None] * final_k
    M_dG = M_dG + s * (ka * WR_qa).sum(-1)
    E_cols = (ka * core_qa).sum(-1) + c_E * WR_cols
    if not exact_k:
        E_cols = E_cols + (seq.k_err * WR_qa).sum(-1)
    if WR_qerr is not None:
        E_cols = E_cols + (ka * WR_qerr).sum(-1)
    del WR_qa, WR_cols
    WaR_qa = WaR.transpose(-1, -2) @ qa
    B_dG = B_dG + s * E_cols + (at_least_one(seq.k_feat) * C_dkf).sum(-1)
    B_dG = B_dG + s * (ka * WaR_qa).sum(-1)
    del E_cols, core, WR, WaR, R
    # dφ(k)'s bound, in place in core_qa's tensor (as dφ(q)'s).
    B_dkf = core_qa
    B_dkf += W_tok.transpose(-1, -2) @ (dot_underflow * qa)
    if WR_qerr is not None:
        B_dkf += WR_qerr
    B_dkf += WaR_qa
    del WR_qerr, WaR_qa
    B_dkf *= s
    B_dkf.addcmul_((wE * US + WEa)[..., None], final_k)
    B_dkf += C_dkf
    del C_dkf, core_qa, final_k
    emit("k", *feature_chain(seq, "k", M_dkf, B_dkf))
    del M_dkf, B_dkf
    # dv: Σ_t w_tj |A_tj| ζ_t |do_t| and Σ_t w_tj |A_tj| (the adjoint dN's weight).
    lost_v = lost.dv()
    absA = seq.outer(qa, ka)
    Ephi: object = c_E
    if not exact_q:
        Ephi = seq.outer(seq.q_err, ka) + Ephi
    if not exact_k:
        Ephi = seq.outer(qa, seq.k_err) + Ephi
    final_v = ka @ dSa  # [H, L, V]
    zdo = zeta * doa
    A_do = (W_tok * absA).transpose(-1, -2) @ torch.cat([zdo, torch.ones_like(zeta)], -1)
    M_v = s * A_do[..., :V] + wE[..., None] * final_v
    B_v = (s * W_tok * (Ub_tok * absA + Ephi)).transpose(-1, -2) @ zdo + (
        (wE * US)[..., None] * final_v
    )
    kerr_dS = None if exact_k else seq.k_err @ dSa
    if kerr_dS is not None:
        B_v = B_v + wE[..., None] * kerr_dS
    B_v = B_v + adj.dN * s * A_do[..., V:]
    del A_do
    B_v = B_v + lost_v
    B_v = B_v + (s * Wa * absA).transpose(-1, -2) @ zdo
    B_v = B_v + WEa[..., None] * final_v
    # dG's final-state pairing ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ by key j, with its errors.
    paired = (final_v * va).sum(-1) + nz * (ka * dza[:, None, :]).sum(-1)  # [H, L]
    F = wE * paired
    F_err = wE * US * paired
    if kerr_dS is not None:
        F_err = F_err + wE * ((kerr_dS * va).sum(-1) + nz * (seq.k_err * dza[:, None, :]).sum(-1))
    # dz_T is zero for unnormalized problems, so the key-sum pairing adds nothing there.
    Fa = WEa * ((final_v * va).sum(-1) + (ka * dza[:, None, :]).sum(-1))
    del final_v, kerr_dS, absA, Ephi, zdo, paired, lost_v
    emit("v", M_v, B_v)
    del M_v, B_v
    # dS_0 and dz_0, and the initial state's share of dG.
    if has_initial_state(seq):
        weights = (Ub0, US0, w0, wE0)
        _initial_state(put, f, ct, adj, lost, zeta, R0, (qa, doa, do_o, delta_err_raw), weights)
    qR0 = (qa * R0).sum(-1)
    Q0 = s * w0 * qR0
    E0 = qR0 * Ub0 + nz * (qa * z0a[:, None, :]).sum(-1) * delta_err + (qa * adj.P0).sum(-1)
    if not exact_q:
        E0 = E0 + (seq.q_err * R0).sum(-1)
    Q0_err = s * w0 * E0
    F0 = wE0 * ((dSa * S0a).sum((-1, -2)) + nz * (dza * z0a).sum(-1))
    B_dG = B_dG + Q0_err + F_err + u.acc * (seq.dot_length + 2) * (M_dG + Q0 + F)
    M_dG = M_dG + Q0 + F
    B_dG = B_dG + seq.units.lost_intermediate * seq.dot_length + s * Wa0 * qR0 + Fa
    if seq.L:
        M_dG[:, -1] += F.sum(-1) + F0
        B_dG[:, -1] += F_err.sum(-1) + F0 * US0 + Fa.sum(-1)
    del qR0, E0, qa, ka, va, doa
    M_g = reverse_cumsum(M_dG)
    steps = torch.arange(seq.L, 0, -1, dtype=M_dG.dtype, device=M_dG.device)
    B_g = reverse_cumsum(B_dG) + u.acc * steps * M_g
    emit("g", *reach_of_block(seq, M_dG, B_dG, M_g, B_g))
    # Unverifiable: anything that depends on a row whose denominator is not certified.
    bad = unverifiable_rows(f)
    bad_key = seq.keys_seen_by(bad)  # [H, L]: some later row t >= j is bad
    bad_G = bad | bad_key
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [-1]), -1).values, [-1]) > 0
    masks = {"bad_q": bad, "bad_k": bad_key, "bad_v": bad_key, "bad_g": bad_g}
    masks["bad_S0"] = (bad & (w0 > 0)).any(-1)  # [H]
    # Every form's count falls with j: the largest is in the initial-state column.
    put("count", (count[..., 0].max() if seq.L else R0.new_zeros(())).expand(1))
    put_masks(put, masks, f, ct, maxima)


def has_initial_state(seq: SequenceTerms) -> bool:
    """Whether the problem has an initial state (or key sum), whose gradients are asked for."""
    return seq.problem.initial_state is not None or seq.problem.initial_key_sum is not None


def initial_share(
    seq: SequenceTerms, doa: torch.Tensor, do_o: torch.Tensor, zeta: torch.Tensor
) -> torch.Tensor:
    """|dP| of the initial state's column, (|do_t| |S_0|^T + |do_t|·|o_t| |z_0|) ζ_t, [H, L, K].

    Without an initial state it is exactly zero wherever its factors are finite: then one zero
    expanded, not [H, L, K] of them (with an inf factor it is formed, NaN and all).
    """
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    if not has_initial_state(seq) and all(bool(torch.isfinite(x).all()) for x in (doa, do_o, zeta)):
        return zeta.new_zeros(()).expand(seq.H, seq.L, seq.S0.shape[-2])
    return (doa @ S0a.transpose(-1, -2) + do_o[..., None] * z0a[:, None, :]) * zeta


def _contract(
    P: PairMatrix, x: torch.Tensor, err: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """P @ x, P @ err (`None` for `None`) and P's row sums, as one contraction (views)."""
    parts = [x] if err is None else [x, err]
    out = P @ torch.cat([*parts, torch.ones_like(x[..., :1])], -1)
    K = x.shape[-1]
    return out[..., :K], None if err is None else out[..., K : 2 * K], out[..., -1]


def _initial_state(
    put: Put,
    f: ForwardPieces,
    ct: Cotangents,
    adj: AdjointErrors,
    lost: LostCharges,
    zeta: torch.Tensor,
    R0: torch.Tensor,
    rows: tuple[torch.Tensor, ...],
    weights: tuple[torch.Tensor, ...],
) -> None:
    """Put ``M_S0``, ``B_S0``, ``M_z0``, ``B_z0`` (scalar gate). Memory: three [H, L, K]."""
    seq, s = f.seq, f.seq.scale
    Ub0, US0, w0, wE0 = weights
    qa, doa, do_o, delta_err_raw = rows  # |φ(q)|, |do| [H, L, K|V]; |do|·|o|, δ's error [H, L]
    dSa, dza = ct.dS.abs(), ct.dz.abs()
    lost_S0, lost_z0 = lost.states()
    Wa0, WEa0 = seq.W_abs[..., 0], seq.W_end_abs[:, 0]
    qz = s * qa * (w0 * zeta[..., 0])[..., None]  # [H, L, K]
    qz_U = qz * Ub0[..., None]
    if not known_zero(seq.q_err):
        qz_U = qz_U + s * seq.q_err * (w0 * zeta[..., 0])[..., None]
    M_S0 = qz.transpose(-1, -2) @ doa + wE0[:, None, None] * dSa
    B_S0 = qz_U.transpose(-1, -2) @ doa + (US0 * wE0)[:, None, None] * dSa
    del qz_U
    q0 = s * qa * w0[..., None]  # [H, L, K]: the weights of dN_t and dZ_t in dS_0 and dz_0
    B_S0 = B_S0 + adj.dN * q0.sum(1)[..., None]
    M_z0 = (qz * do_o[..., None]).sum(1) + wE0[:, None] * dza
    B_z0 = (qz * (Ub0 * do_o + delta_err_raw)[..., None]).sum(1)
    if not known_zero(seq.q_err):
        B_z0 = B_z0 + (s * seq.q_err * (w0 * zeta[..., 0])[..., None] * do_o[..., None]).sum(1)
    B_z0 = B_z0 + (US0 * wE0)[:, None] * dza + (q0 * adj.dZ).sum(1)
    del qz, q0
    B_S0, B_z0 = B_S0 + lost_S0, B_z0 + lost_z0
    q_weight = s * qa * (Wa0 * zeta[..., 0])[..., None]
    B_S0 = B_S0 + q_weight.transpose(-1, -2) @ doa + WEa0[:, None, None] * dSa
    B_z0 = B_z0 + (q_weight * do_o[..., None]).sum(1) + WEa0[:, None] * dza
    for key, x in (("M_S0", M_S0), ("B_S0", B_S0), ("M_z0", M_z0), ("B_z0", B_z0)):
        put(key, x)


def emitter(
    put: Put, maxima: dict[str, torch.Tensor]
) -> Callable[[str, torch.Tensor, torch.Tensor], None]:
    """The ``emit(name, M, B)`` of a gradient's magnitude and bound.

    Puts both, and keeps M's largest element per head in ``maxima`` for the overflow check
    (`put_masks`).
    """

    def emit(name: str, M: torch.Tensor, B: torch.Tensor) -> None:
        if M.numel():  # an empty sequence is not checked (`backward_overflow`)
            maxima["M_" + name] = M.flatten(1).amax(-1, keepdim=True)
        put("M_" + name, M)
        put("B_" + name, B)

    return emit


def put_masks(
    put: Put,
    masks: dict[str, torch.Tensor],
    f: ForwardPieces,
    ct: Cotangents,
    maxima: dict[str, torch.Tensor],
) -> None:
    """Put the unverifiable masks, each widened to every element of a head that may overflow.

    `backward_overflow` says which heads of the sequence from the gradients' magnitudes
    (``maxima``: each ``M_x``'s largest element per head, ``[H, 1]``); put as
    ``overflow_heads``.
    """
    heads = backward_overflow(f, ct, maxima)
    put("overflow_heads", heads)
    widen = bool(heads.any())
    for key, mask in masks.items():
        put(key, mask | heads.reshape(-1, *([1] * (mask.ndim - 1))) if widen else mask)


def feature_chain(
    seq: SequenceTerms, name: str, M_f: torch.Tensor, B_f: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Magnitude and bound of dq (``name`` "q") or dk ("k") from its features' (M_f, B_f).

    dq = dφ(q) ⊙ φ'(q): one more multiply, and the error of φ' (the same for a vector gate); a
    lifted map's dq = J_φ^T dφ(q) (`linattn_verify.linear_attn._bounds.lifted.chain`).
    """
    u = seq.units
    query = name == "q"
    feature_map = seq.problem.map_of(query=query)
    if feature_map in LIFTED_MAPS:
        x, feat, err = (
            (seq.q_in, seq.q_feat, seq.q_err) if query else (seq.k_in, seq.k_feat, seq.k_err)
        )
        return lifted.chain(
            seq.problem, x, M_f, B_f, u.arith, query=query, features=feat, feature_err=err
        )
    if feature_map == "identity":
        # φ' = 1 and its error 0 exactly: M_f itself, and B_f + u M_f formed in place (B_f is
        # the caller's to give up). An inf in M_f leaves inf here where the general formula's
        # inf·0 leaves NaN: either is an unverifiable element.
        return M_f, B_f.add_(u.arith * M_f)
    dphi = seq.q_dphi if query else seq.k_dphi
    dphi_err = seq.q_dphi_err if query else seq.k_dphi_err
    M = M_f * dphi.abs()
    return M, B_f * dphi.abs() + M_f * dphi_err + u.arith * M


def unverifiable_rows(f: ForwardPieces) -> torch.Tensor:
    """Rows ``[H, L]`` whose gradients are unverifiable.

    The forward's (a denominator not certified nonzero), a clamped denominator's rows where the
    kernel may take the other branch of max(Z, eps) (the gradient jumps by the whole of Z's
    share there: `ForwardPieces.kink`), and for a reciprocal division the rows
    where the backward's (1/Z)^2 may leave its dtype's normal range: autograd of a reciprocal
    forms it even where the cotangent is 0, and 0·inf is NaN; below the normal range it loses
    the denominator's gradient, which cancels the numerator's to the true result (0 for a
    single-token row), so no bound tighter than the gradient's own terms holds (§2.3).
    """
    u = f.seq.units
    bad = f.bad if f.kink is None else f.bad | f.kink
    if u.reciprocal_max == float("inf"):
        return bad
    Z, B_Z = f.Z.abs()[..., 0], f.B_Z[..., 0]
    overflow: torch.Tensor = u.reciprocal_max**-0.5 >= Z - B_Z
    underflow: torch.Tensor = u.reciprocal_tiny**-0.5 <= Z + B_Z
    return bad | overflow | underflow


class AdjointErrors(NamedTuple):
    """Absolute errors of the quotient adjoints below the division dtype's normal range.

    Attributes:
        dN: Of each element of dN_t = do_t / Z_t (a float; 0 unnormalized).
        dZ: Of dZ_t = -(do_t·N_t) / Z_t^2, ``[H, L, 1]``.
        P: Of dP_tj = dN_t·v_j + dZ_t, the adjoint of the score A_tj, ``[H, L, L]``.
        P0: Of (S_0 dN_t + z_0 dZ_t)_k, the initial state's share, ``[H, L, K]``.
    """

    dN: float
    dZ: torch.Tensor
    P: torch.Tensor
    P0: torch.Tensor


def adjoint_errors(f: ForwardPieces, zeta: torch.Tensor, normalize: bool) -> AdjointErrors:
    """`AdjointErrors` of one sequence (docs/error-model.md §5, quotient adjoints).

    Each of dN_t's elements is one operation (a division, or a multiply by 1/Z): λ. dZ_t is a
    V-term sum of products do·N and one multiply by 1/Z^2 (or division by Z^2), in some order:
    each of the 2V + 1 operations loses at most λ, and the ones before the multiply are
    magnified by up to 1/Z^2, so λ (2V + 1)(1 + 1/Z^2).
    """
    seq = f.seq
    lam = seq.units.adjoint_abs if normalize else 0.0
    dZ = lam * (2 * seq.V + 1) * (1 + zeta**2)  # [H, L, 1]
    P = seq.column(lam * seq.v.abs().sum(-1)) + dZ  # [H, L(t), L(j)]
    if normalize:
        P0 = lam * seq.S0.abs().sum(-1)[:, None, :] + dZ * seq.z0.abs()[:, None, :]
    else:  # λ = 0 and ζ = 1: exactly zero, one element expanded (not [H, L, K] of zeros)
        P0 = dZ.new_zeros(()).expand(seq.H, seq.L, seq.S0.shape[-2])
    return AdjointErrors(lam, dZ, P, P0)


def backward_division_error(u: Units) -> float:
    """The relative error the backward's divisions by Z add beyond the count's fp32 slack.

    The backward divides twice per row (dN = do / Z, dZ = -(do·o) / Z; a reciprocal kernel
    multiplies by 1/Z and forms (1/Z)^2 through autograd), each in the division's dtype: 2 u_div.
    The rounding counts already hold 4u of fp32 slack per division, so only what a division in
    a narrower dtype adds is charged (an fp16 reciprocal: 2 (4 u_fp16 - 4 u)).
    """
    return 2 * max(0.0, u.div - 4 * u.arith)


def reach_of_block(
    seq: SequenceTerms,
    M_dG: torch.Tensor,
    B_dG: torch.Tensor,
    M_g: torch.Tensor,
    B_g: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dg's magnitude and bound for a kernel that is causal only within rounding.

    Tokens on the last axis. A kernel with a decay reference point in the block (FLA's chunk
    end) forms dG of that point as the cancelling sum of every token's terms in the block:
    dg_s then holds the rounding of the whole block's dG from its start, not only of the tokens
    after s (docs/error-model.md §4.1). Unchanged for a kernel promising bit-exact causality,
    and for per-step decays (no reference point).
    """
    scan = seq.recipe.decay_scan
    if seq.causal_exact or scan == "per_step" or not seq.L:
        return M_g, B_g
    block = seq.recipe.chunk_size if scan == "chunk_local" else seq.L
    starts = torch.div(torch.arange(seq.L, device=M_g.device), block, rounding_mode="floor") * block
    from_start = reverse_cumsum(M_dG)[..., starts]
    steps = (seq.L - starts).to(M_g.dtype)
    B_wide = reverse_cumsum(B_dG)[..., starts] + seq.units.acc * steps * from_start
    return torch.maximum(M_g, from_start), torch.maximum(B_g, B_wide)


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1])
