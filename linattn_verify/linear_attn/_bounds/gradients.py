# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Gradient bounds of one sequence: dq, dk, dv, dg, d initial state (and key sum)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from linattn_verify.linear_attn._bounds import lifted
from linattn_verify.linear_attn._bounds.forward import ForwardPieces
from linattn_verify.linear_attn._bounds.overflow import backward_overflow
from linattn_verify.linear_attn._bounds.terms import SequenceTerms
from linattn_verify.linear_attn._bounds.units import Units


@dataclass(frozen=True)
class Cotangents:
    """Cotangents of one sequence: do ``[H, L, V]``, dS_T ``[H, K, V]``, dz_T ``[H, K]``."""

    do: torch.Tensor
    dS: torch.Tensor
    dz: torch.Tensor


def backward_sequence(f: ForwardPieces, ct: Cotangents, normalize: bool) -> dict[str, torch.Tensor]:
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
    e_Z = e_Z + nz * backward_division_error(u)
    do_o = (doa * f.o.abs()).sum(-1) * nz  # |do_t|·|o_t|, [H, L]
    delta_err_raw = (doa * f.B_o).sum(-1) * nz  # error of δ_t from the kernel's ô, [H, L]
    delta_err = delta_err_raw * zeta[..., 0]
    R = (seq.outer(doa, va) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = (doa @ S0a.transpose(-1, -2) + do_o[..., None] * z0a[:, None, :]) * zeta  # [H, L, K]
    count = seq.dot_length + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    Ub = u.acc * count + seq.eps_w + u.per_term + e_Z  # [H, L, L+1]
    Ub0, Ub_tok = Ub[..., 0], Ub[..., 1:]
    W_tok, w0 = seq.W[..., 1:], seq.W[..., 0]
    wE0, wE = seq.W_end[:, 0], seq.W_end[:, 1:]  # [H], [H, L]
    U_S = u.acc * (seq.acc_state + seq.V + 4) + seq.eps_w_end + u.per_term  # [H, L+1]
    US0, US = U_S[:, 0], U_S[:, 1:]
    absA = seq.outer(qa, ka)
    # φ errors, and underflow inside the K-dot, as absolute errors of A_tj (as in the forward):
    # an underflowed A_tj is later divided by a possibly tiny Z_t, so it must enter before ζ.
    Ephi = seq.outer(seq.q_err, ka) + seq.outer(qa, seq.k_err)
    Ephi = Ephi + u.underflow * (seq.dot_length + 2)
    WR = W_tok * R
    # Underflow in do_t·v_j is likewise absolute before the division by Z_t; so are the quotient
    # adjoints' below the division dtype's normal range.
    dot_underflow = u.underflow * (seq.V + 2) * zeta
    adj = adjoint_errors(f, zeta, normalize)
    out: dict[str, torch.Tensor] = {}
    # The contractions over pairs, each once (a row factor such as ζ_t rides on the vector it
    # multiplies): over keys j <= t for dφ(q), over rows t >= j for dφ(k) and dv. dG pairs them
    # with q̃_t and k̃_t: Σ_j w_tj |A_tj| R_tj = |q̃_t|·(Σ_j w_tj R_tj |k̃_j|), and so on.
    K = ka.shape[-1]
    WR_k = WR @ torch.cat([ka, seq.k_err, torch.ones_like(ka[..., :1])], -1)
    WR_ka, WR_kerr, WR_rows = WR_k[..., :K], WR_k[..., K : 2 * K], WR_k[..., -1]
    WR_q = WR.transpose(-1, -2) @ torch.cat([qa, seq.q_err, torch.ones_like(qa[..., :1])], -1)
    WR_qa, WR_qerr, WR_cols = WR_q[..., :K], WR_q[..., K : 2 * K], WR_q[..., -1]
    # The relative-error part of |dP| (counts, weights, e_Z), δ_t's error and the adjoints'.
    core = W_tok * (Ub_tok * R + delta_err[..., None] + adj.P)
    core_ka = core @ ka
    core_qa = core.transpose(-1, -2) @ qa
    # dφ(q) and dφ(k).
    M_dqf = s * (WR_ka + w0[..., None] * R0)
    B_dqf = s * (
        core_ka
        + dot_underflow * (W_tok @ ka)
        + WR_kerr
        + (Ub0 * w0)[..., None] * R0
        + (w0 * delta_err)[..., None] * z0a[:, None, :] * nz
        + w0[..., None] * adj.P0
    )
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # [H, L, K]
    M_dkf = s * WR_qa + wE[..., None] * final_k
    B_dkf = s * (core_qa + W_tok.transpose(-1, -2) @ (dot_underflow * qa) + WR_qerr) + (
        (wE * US)[..., None] * final_k
    )
    # dv: Σ_t w_tj |A_tj| ζ_t |do_t| and Σ_t w_tj |A_tj| (the adjoint dN's weight).
    final_v = ka @ dSa  # [H, L, V]
    V = doa.shape[-1]
    A_do = (W_tok * absA).transpose(-1, -2) @ torch.cat([zeta * doa, torch.ones_like(zeta)], -1)
    out["M_v"] = s * A_do[..., :V] + wE[..., None] * final_v
    out["B_v"] = (s * W_tok * (Ub_tok * absA + Ephi)).transpose(-1, -2) @ (zeta * doa) + (
        (wE * US)[..., None] * final_v + wE[..., None] * (seq.k_err @ dSa)
    )
    out["B_v"] = out["B_v"] + adj.dN * s * A_do[..., V:]
    # dS_0 and dz_0.
    qz = s * qa * (w0 * zeta[..., 0])[..., None]  # [H, L, K]
    qz_err = s * seq.q_err * (w0 * zeta[..., 0])[..., None]
    out["M_S0"] = qz.transpose(-1, -2) @ doa + wE0[:, None, None] * dSa
    out["B_S0"] = (qz * Ub0[..., None] + qz_err).transpose(-1, -2) @ doa + (
        (US0 * wE0)[:, None, None] * dSa
    )
    q0 = s * qa * w0[..., None]  # [H, L, K]: the weights of dN_t and dZ_t in dS_0 and dz_0
    out["B_S0"] = out["B_S0"] + adj.dN * q0.sum(1)[..., None]
    out["M_z0"] = (qz * do_o[..., None]).sum(1) + wE0[:, None] * dza
    out["B_z0"] = (
        (qz * (Ub0 * do_o + delta_err_raw)[..., None]).sum(1)
        + (qz_err * do_o[..., None]).sum(1)
        + (US0 * wE0)[:, None] * dza
        + (q0 * adj.dZ).sum(1)
    )
    # dG_t = q̃_t·dq̃_t - k̃_t·dk̃_t (+ the final-state pairing at t = L); dg = reverse cumsum.
    # Its pair terms Q_tj = s w_tj |A_tj| R_tj, summed over j and over t, and their errors
    # s w_tj (U_tj |A_tj| R_tj + |A_tj| (δ-error_t + adjoint_tj) + E^φ_tj R_tj), with
    # E^φ = |Δφ(q)|·|φ(k)| + |φ(q)|·|Δφ(k)| + λ (K + 2), from the contractions above.
    c_E = u.underflow * (seq.dot_length + 2)
    Q_rows = s * (qa * WR_ka).sum(-1)
    Q_cols = s * (ka * WR_qa).sum(-1)
    Q_err_rows = s * (
        (qa * core_ka).sum(-1)
        + (seq.q_err * WR_ka).sum(-1)
        + (qa * WR_kerr).sum(-1)
        + c_E * WR_rows
    )
    Q_err_cols = s * (
        (ka * core_qa).sum(-1)
        + (seq.k_err * WR_qa).sum(-1)
        + (ka * WR_qerr).sum(-1)
        + c_E * WR_cols
    )
    Q0 = s * w0 * (qa * R0).sum(-1)
    Q0_err = (
        s
        * w0
        * (
            (qa * R0).sum(-1) * Ub0
            + (seq.q_err * R0).sum(-1)
            + nz * (qa * z0a[:, None, :]).sum(-1) * delta_err
            + (qa * adj.P0).sum(-1)
        )
    )
    F = wE * ((final_v * va).sum(-1) + nz * (ka * dza[:, None, :]).sum(-1))  # [H, L]
    F_err = wE * US * ((final_v * va).sum(-1) + nz * (ka * dza[:, None, :]).sum(-1)) + wE * (
        ((seq.k_err @ dSa) * va).sum(-1) + nz * (seq.k_err * dza[:, None, :]).sum(-1)
    )
    F0 = wE0 * ((dSa * S0a).sum((-1, -2)) + nz * (dza * z0a).sum(-1))
    M_dG = Q_rows + Q0 + Q_cols + F
    B_dG = Q_err_rows + Q0_err + Q_err_cols + F_err + u.acc * (seq.dot_length + 2) * M_dG
    if seq.L:
        M_dG[:, -1] += F.sum(-1) + F0
        B_dG[:, -1] += F_err.sum(-1) + F0 * US0
    C_dqf, C_dkf, q1, k1 = lost_intermediates(out, f, ct, zeta)
    B_dqf, B_dkf = B_dqf + C_dqf, B_dkf + C_dkf
    lost = seq.units.lost_intermediate
    B_dG = B_dG + (q1 * C_dqf).sum(-1) + (k1 * C_dkf).sum(-1) + lost * seq.dot_length
    B_dqf, B_dkf, B_dG = _add_weight_underflow(
        out, f, ct, R, R0, zeta, do_o, final_k, final_v, B_dqf, B_dkf, B_dG
    )
    out["M_g"] = reverse_cumsum(M_dG)
    steps = torch.arange(seq.L, 0, -1, dtype=M_dG.dtype, device=M_dG.device)
    out["B_g"] = reverse_cumsum(B_dG) + u.acc * steps * out["M_g"]
    out["M_g"], out["B_g"] = reach_of_block(seq, M_dG, B_dG, out["M_g"], out["B_g"])
    add_feature_map_chain(out, seq, (M_dqf, B_dqf), (M_dkf, B_dkf))
    # Unverifiable: anything that depends on a row whose denominator is not certified.
    bad = unverifiable_rows(f)
    bad_key = seq.keys_seen_by(bad)  # [H, L]: some later row t >= j is bad
    bad_G = bad | bad_key
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [-1]), -1).values, [-1]) > 0
    out["bad_q"], out["bad_k"], out["bad_v"], out["bad_g"] = bad, bad_key, bad_key, bad_g
    out["bad_S0"] = (bad & (w0 > 0)).any(-1)  # [H]
    # Every form's count falls with j: the largest is in the initial-state column.
    out["count"] = (count[..., 0].max() if seq.L else R0.new_zeros(())).expand(1)
    mark_overflow(out, f, ct)
    return out


def _add_weight_underflow(
    out: dict[str, torch.Tensor],
    f: ForwardPieces,
    ct: Cotangents,
    R: torch.Tensor,
    R0: torch.Tensor,
    zeta: torch.Tensor,
    do_o: torch.Tensor,
    final_k: torch.Tensor,
    final_v: torch.Tensor,
    B_dqf: torch.Tensor,
    B_dkf: torch.Tensor,
    B_dG: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add the absolute error of decay weights that underflow (`SequenceTerms.W_abs`).

    Each gradient term carries one weight; its absolute error times the term's other factors is
    the magnitude computation with the weights replaced by their absolute errors.
    """
    seq, s = f.seq, f.seq.scale
    Wa, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]
    WEa, WEa0 = seq.W_end_abs[:, 1:], seq.W_end_abs[:, 0]
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    doa, dSa, dza = ct.do.abs(), ct.dS.abs(), ct.dz.abs()
    WaR = Wa * R
    WaR_ka = WaR @ ka
    WaR_qa = WaR.transpose(-1, -2) @ qa
    B_dqf = B_dqf + s * (WaR_ka + Wa0[..., None] * R0)
    B_dkf = B_dkf + s * WaR_qa + WEa[..., None] * final_k
    out["B_v"] = out["B_v"] + (s * Wa * seq.outer(qa, ka)).transpose(-1, -2) @ (zeta * doa)
    out["B_v"] = out["B_v"] + WEa[..., None] * final_v
    q_weight = s * qa * (Wa0 * zeta[..., 0])[..., None]
    out["B_S0"] = out["B_S0"] + q_weight.transpose(-1, -2) @ doa + WEa0[:, None, None] * dSa
    out["B_z0"] = out["B_z0"] + (q_weight * do_o[..., None]).sum(1) + WEa0[:, None] * dza
    # The pair terms s w^abs_tj |A_tj| R_tj summed over j and over t (as Q in the caller).
    Qa_rows, Qa_cols = s * (qa * WaR_ka).sum(-1), s * (ka * WaR_qa).sum(-1)
    B_dG = B_dG + Qa_rows + Qa_cols + s * Wa0 * (qa * R0).sum(-1)
    # dz_T is zero for unnormalized problems, so the key-sum pairing adds nothing there.
    F = WEa * ((final_v * va).sum(-1) + (ka * dza[:, None, :]).sum(-1))
    B_dG = B_dG + F
    if seq.L:
        B_dG[..., -1] = B_dG[..., -1] + F.sum(-1)
    return B_dqf, B_dkf, B_dG


def lost_intermediates(
    out: dict[str, torch.Tensor], f: ForwardPieces, ct: Cotangents, zeta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add to dv, dS_0, dz_0 the absolute error of partial products lost to underflow or casts.

    A partial product of a term that underflows (or is cast to the intermediate dtype) loses up
    to c = `Units.lost_intermediate` before the remaining factors multiply it. Which factors
    remain depends on the kernel's evaluation order, but their product is at most the product
    of max(1, |f|) over all the term's factors, so each term is charged c · Π max(1, |f|): a
    bound valid for every order (weights w <= 1 contribute 1). Every pair of tokens j <= t is
    charged, those whose float64 weight underflows to 0 too: an over-count (the terms are ~ℓ,
    1e-37 for fp32) that keeps the charge a block scan.

    Returns:
        The charges to dφ(q) and dφ(k) ``[H, L, K]`` and the factors max(1, |φ(q)|),
        max(1, |φ(k)|) with which the caller charges dG.
    """
    seq, c = f.seq, f.seq.units.lost_intermediate

    def m1(x: torch.Tensor) -> torch.Tensor:
        return x.abs().clamp(min=1.0)

    s1 = max(1.0, seq.scale)
    q1, k1, v1 = m1(seq.q_feat), m1(seq.k_feat), m1(seq.v)  # [H, L, K|V]
    S01, z01, do1, o1 = m1(seq.S0), m1(seq.z0), m1(ct.do), m1(f.o)
    dS1, dz1 = m1(ct.dS), m1(ct.dz)
    z1 = m1(zeta)  # [H, L, 1]
    mask = seq.token_pairs()  # [L, L]
    # dP_tj = (do_t·v_j - do_t·o_t) ζ_t: Σ over the value index of its factor products.
    P1 = (seq.outer(do1, v1) + (do1 * o1).sum(-1, keepdim=True)) * z1  # [H, L, L]
    A1 = seq.outer(q1, k1)  # [H, L, L], Σ_m of max1 factor products of q̃·k̃
    P0 = (do1 @ S01.transpose(-1, -2) + (do1 * o1).sum(-1, keepdim=True) * z01[:, None, :]) * z1
    final_k = v1 @ dS1.transpose(-1, -2) + dz1[:, None, :]  # [H, L, K]
    C_dqf = c * s1 * ((mask * P1) @ k1 + P0)
    C_dkf = c * (s1 * (mask * P1).transpose(-1, -2) @ q1 + final_k)
    out["B_v"] = out["B_v"] + c * (s1 * (mask * A1).transpose(-1, -2) @ (z1 * do1) + k1 @ dS1)
    qz1 = q1 * z1  # [H, L, K]
    out["B_S0"] = out["B_S0"] + c * (s1 * qz1.transpose(-1, -2) @ do1 + dS1)
    out["B_z0"] = out["B_z0"] + c * (s1 * (qz1 * (do1 * o1).sum(-1, keepdim=True)).sum(1) + dz1)
    return C_dqf, C_dkf, q1, k1


def add_feature_map_chain(
    out: dict[str, torch.Tensor],
    seq: SequenceTerms,
    dq_features: tuple[torch.Tensor, torch.Tensor],
    dk_features: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """Set ``M_q, B_q, M_k, B_k`` from the features' gradients ``(M, B)`` of dφ(q), dφ(k).

    dq = dφ(q) ⊙ φ'(q): one more multiply, and the error of φ' (the same for a vector gate); a
    lifted map's dq = J_φ^T dφ(q) (`linattn_verify.linear_attn._bounds.lifted.chain`).
    """
    u = seq.units
    if seq.problem.lifted:
        p = seq.problem
        for name, (M_f, B_f), x, feat, err, query in (
            ("q", dq_features, seq.q_in, seq.q_feat, seq.q_err, True),
            ("k", dk_features, seq.k_in, seq.k_feat, seq.k_err, False),
        ):
            M, B = lifted.chain(
                p, x, M_f, B_f, u.arith, query=query, features=feat, feature_err=err
            )
            out["M_" + name], out["B_" + name] = M, B
        return
    for name, (M_f, B_f), dphi, dphi_err in (
        ("q", dq_features, seq.q_dphi, seq.q_dphi_err),
        ("k", dk_features, seq.k_dphi, seq.k_dphi_err),
    ):
        out["M_" + name] = M_f * dphi.abs()
        out["B_" + name] = B_f * dphi.abs() + M_f * dphi_err + u.arith * out["M_" + name]


def unverifiable_rows(f: ForwardPieces) -> torch.Tensor:
    """Rows ``[H, L]`` whose gradients are unverifiable.

    The forward's (a denominator not certified nonzero), and for a reciprocal division the rows
    where the backward's (1/Z)^2 may leave its dtype's normal range: autograd of a reciprocal
    forms it even where the cotangent is 0, and 0·inf is NaN; below the normal range it loses
    the denominator's gradient, which cancels the numerator's to the true result (0 for a
    single-token row), so no bound tighter than the gradient's own terms holds (§2.3).
    """
    u = f.seq.units
    if u.reciprocal_max == float("inf"):
        return f.bad
    Z, B_Z = f.Z.abs()[..., 0], f.B_Z[..., 0]
    overflow: torch.Tensor = u.reciprocal_max**-0.5 >= Z - B_Z
    underflow: torch.Tensor = u.reciprocal_tiny**-0.5 <= Z + B_Z
    return f.bad | overflow | underflow


def mark_overflow(out: dict[str, torch.Tensor], f: ForwardPieces, ct: Cotangents) -> None:
    """Mark every gradient of a head whose declared 16-bit arithmetic may overflow (in place).

    `backward_overflow` says which heads of the sequence (kept as ``overflow_heads``); each
    ``bad_<x>`` mask of ``out`` is widened to all of that head's elements.
    """
    heads = backward_overflow(f, ct, out)
    out["overflow_heads"] = heads
    if not bool(heads.any()):
        return
    for key in ("bad_q", "bad_k", "bad_v", "bad_g", "bad_S0"):
        mask = out[key]
        out[key] = mask | heads.reshape(-1, *([1] * (mask.ndim - 1)))


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
    P0 = lam * seq.S0.abs().sum(-1)[:, None, :] + dZ * seq.z0.abs()[:, None, :]
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
