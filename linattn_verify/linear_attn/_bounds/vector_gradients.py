# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Gradient bounds of one sequence for a vector gate (docs/error-model.md §5.1).

With g ``[B, T, H, K]`` every gradient term carries the weight w_tjm of its key dimension m:

    dq̃_tm = s Σ_j w_tjm dP_tj k̃_jm + s w_t0m (S_0 do_t - δ_t z_0)_m / Z_t
    dk̃_jm = s Σ_t w_tjm dP_tj q̃_tm + w_Tjm (dS_T v_j + dz_T)_m
    dv_j  = s Σ_t (Σ_m q̃_tm k̃_jm w_tjm) do_t / Z_t + Σ_m w_Tjm k̃_jm dS_T[m, :]
    dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm (+ (S_T ⊙ dS_T)_m· + z_Tm dz_Tm at the last token)
    dg_sm = Σ_{t>=s} dG_tm

Each bound is the scalar one (`linattn_verify.linear_attn._bounds.gradients`) with the term's
relative error U_tjm = u_acc c_tj + ε_w(t, j, m) + u_pt + e_Z(t) and its weight w_tjm kept inside
the sum over m. Memory: [H, K, L, L] float64 tensors, O(L²K) per head, as the forward's.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn._bounds.forward import ForwardPieces
from linattn_verify.linear_attn._bounds.gradients import (
    Cotangents,
    add_feature_map_chain,
    adjoint_errors,
    backward_division_error,
    mark_overflow,
    reach_of_block,
    reverse_cumsum,
    unverifiable_rows,
)


def _rows(X: torch.Tensor, P: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ_j X_mtj P_tj b_jm ``[H, L, K]``: X ``[H, K, L, L]``, P ``[H, L, L]``, b ``[H, L, K]``."""
    return torch.einsum("hmtj,htj,hjm->htm", X, P, b)


def _cols(X: torch.Tensor, P: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Σ_t X_mtj P_tj a_tm ``[H, L, K]`` (indexed by j)."""
    return torch.einsum("hmtj,htj,htm->hjm", X, P, a)


def _weighted(X: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ_m X_mtj a_tm b_jm ``[H, L, L]``."""
    return torch.einsum("hmtj,htm,hjm->htj", X, a, b)


def vector_backward_sequence(
    f: ForwardPieces, ct: Cotangents, normalize: bool
) -> dict[str, torch.Tensor]:
    """Magnitudes, bounds and unverifiable masks of the gradients of one sequence (vector gate).

    ``M_g``, ``B_g`` and ``bad_g`` are ``[H, L, K]``; every other entry has the shape of the
    scalar path's (`linattn_verify.linear_attn._bounds.gradients.backward_sequence`).
    """
    seq, u = f.seq, f.seq.units
    s = seq.scale
    H, L, K = seq.H, seq.L, seq.K
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    doa, dSa, dza = ct.do.abs(), ct.dS.abs(), ct.dz.abs()
    nz = float(normalize)
    good = ~f.bad[..., None]
    zeta = torch.where(f.Z == 0, 1.0, 1.0 / f.Z.abs())  # [H, L, 1]
    e_Z = torch.where(good & (f.Z != 0), f.B_Z * zeta, 0.0)
    e_Z = e_Z + nz * backward_division_error(u)
    do_o = (doa * f.o.abs()).sum(-1) * nz  # [H, L]
    delta_err_raw = (doa * f.B_o).sum(-1) * nz
    delta_err = delta_err_raw * zeta[..., 0]
    R = (doa @ va.transpose(-1, -2) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = (doa @ S0a.transpose(-1, -2) + do_o[..., None] * z0a[:, None, :]) * zeta  # [H, L, K]
    count = seq.K + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    U_c = u.acc * count + u.per_term + e_Z  # [H, L, L+1]: the part common to every m
    W = seq.W.reshape(H, K, L, L + 1)  # w_tjm
    WU = W * (U_c[:, None] + seq.eps_w.reshape(H, K, L, L + 1))  # w_tjm U_tjm
    W_tok, WU_tok = W[..., 1:], WU[..., 1:]
    w0, WU0 = W[..., 0].transpose(1, 2), WU[..., 0].transpose(1, 2)  # [H, L, K]
    wE_all = seq.W_end.reshape(H, K, L + 1).transpose(1, 2)  # [H, L+1, K]
    wE0, wE = wE_all[:, 0], wE_all[:, 1:]  # [H, K], [H, L, K]
    U_S = (
        u.acc * (seq.acc_state + seq.V + 4)[None, :, None]
        + seq.eps_w_end.reshape(H, K, L + 1).transpose(1, 2)
        + u.per_term
    )  # [H, L+1, K]
    US0, US = U_S[:, 0], U_S[:, 1:]
    causal = seq.causal[:, 1:].to(qa.dtype)  # [L, L]
    # Underflow inside the m-sum, unweighted (before or after the multiply by w <= 1), and in
    # do_t·v_j (absolute, before the division by Z_t), as in the scalar path.
    under_A = u.underflow * (K + 2) * causal
    dot_underflow = u.underflow * (seq.V + 2) * zeta  # [H, L, 1]
    adj = adjoint_errors(f, zeta, normalize)
    # Absolute errors of dP, [H, L, L].
    P_err = (delta_err[..., None] + dot_underflow + adj.P) * causal
    out: dict[str, torch.Tensor] = {}
    # dφ(q) and dφ(k).
    M_dqf = s * (_rows(W_tok, R, ka) + w0 * R0)
    B_dqf = s * (
        _rows(WU_tok, R, ka)
        + _rows(W_tok, P_err, ka)
        + _rows(W_tok, R, seq.k_err)
        + WU0 * R0
        + nz * w0 * delta_err[..., None] * z0a[:, None, :]
        + w0 * adj.P0
    )
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # (|dS_T||v_j| + |dz_T|)_m
    M_dkf = s * _cols(W_tok, R, qa) + wE * final_k
    B_dkf = (
        s * (_cols(WU_tok, R, qa) + _cols(W_tok, P_err, qa) + _cols(W_tok, R, seq.q_err))
        + US * wE * final_k
    )
    # dv: Σ_m q̃_tm k̃_jm w_tjm is the forward's weighted |A|^w.
    absA_w = _weighted(W_tok, qa, ka)
    Ephi_w = _weighted(W_tok, seq.q_err, ka) + _weighted(W_tok, qa, seq.k_err) + under_A
    kw = ka * wE  # [H, L, K]
    out["M_v"] = (s * absA_w * zeta).transpose(-1, -2) @ doa + kw @ dSa
    out["B_v"] = (s * (_weighted(WU_tok, qa, ka) + Ephi_w) * zeta).transpose(-1, -2) @ doa + (
        (kw * US + seq.k_err * wE) @ dSa
    )
    out["B_v"] = out["B_v"] + adj.dN * (s * absA_w).sum(-2)[..., None]
    # dS_0 and dz_0.
    qz = s * qa * w0 * zeta  # [H, L, K]
    qz_U = s * qa * WU0 * zeta
    qz_err = s * seq.q_err * w0 * zeta
    out["M_S0"] = qz.transpose(-1, -2) @ doa + wE0[..., None] * dSa
    out["B_S0"] = (qz_U + qz_err).transpose(-1, -2) @ doa + (US0 * wE0)[..., None] * dSa
    q0 = s * qa * w0  # [H, L, K]: the weights of dN_t and dZ_t in dS_0 and dz_0
    out["B_S0"] = out["B_S0"] + adj.dN * q0.sum(1)[..., None]
    out["M_z0"] = (qz * do_o[..., None]).sum(1) + wE0 * dza
    out["B_z0"] = (
        (qz_U * do_o[..., None] + qz * delta_err_raw[..., None]).sum(1)
        + (qz_err * do_o[..., None]).sum(1)
        + US0 * wE0 * dza
        + (q0 * adj.dZ).sum(1)
    )
    # dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm: the row part of dimension m and its column part.
    q_row = s * qa * _rows(W_tok, R, ka)  # Σ_j |q̃_tm| w_tjm R_tj |k̃_jm|
    k_col = s * ka * _cols(W_tok, R, qa)
    Q0 = s * w0 * qa * R0  # the initial state's share, q̃_tm w_t0m (S_0 do_t - δ_t z_0)_m / Z_t
    err_row = s * (
        qa * (_rows(WU_tok, R, ka) + _rows(W_tok, P_err, ka) + _rows(W_tok, R, seq.k_err))
        + seq.q_err * _rows(W_tok, R, ka)
    )
    # Underflow inside the m-sum of an A_tj (the P·dP algorithm), charged to every dimension.
    under_G = s * (under_A * R)
    err_row = err_row + under_G.sum(-1)[..., None]
    err_col = (
        s
        * (
            ka * (_cols(WU_tok, R, qa) + _cols(W_tok, P_err, qa) + _cols(W_tok, R, seq.q_err))
            + seq.k_err * _cols(W_tok, R, qa)
        )
        + under_G.sum(-2)[..., None]
    )
    Q0_err = s * (
        WU0 * qa * R0
        + w0 * seq.q_err * R0
        + nz * w0 * qa * z0a[:, None, :] * delta_err[..., None]
        + w0 * qa * adj.P0
    )
    F = wE * ka * final_k  # [H, L, K]
    F_err = wE * (US * ka + seq.k_err) * final_k
    F0 = wE0 * ((dSa * S0a).sum(-1) + nz * dza * z0a)  # [H, K]
    M_dG = q_row + Q0 + k_col + F
    B_dG = err_row + Q0_err + err_col + F_err + u.acc * (K + 2) * M_dG
    if L:
        M_dG[:, -1] += F.sum(1) + F0
        B_dG[:, -1] += F_err.sum(1) + F0 * US0
    # Weights that underflow: W^abs_tj per dimension (independent of m).
    Wa, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]  # [1, L, L], [1, L]
    WEa, WEa0 = seq.W_end_abs[:, 1:], seq.W_end_abs[:, 0]
    WaR = Wa * R
    final_k_all = va @ dSa.transpose(-1, -2) + dza[:, None, :]
    B_dqf = B_dqf + s * (WaR @ ka + Wa0[..., None] * R0)
    B_dkf = B_dkf + s * WaR.transpose(-1, -2) @ qa + WEa[..., None] * final_k_all
    absA = qa @ ka.transpose(-1, -2)
    out["B_v"] = out["B_v"] + (s * Wa * absA * zeta).transpose(-1, -2) @ doa
    out["B_v"] = out["B_v"] + WEa[..., None] * (ka @ dSa)
    q_weight = s * qa * (Wa0 * zeta[..., 0])[..., None]
    out["B_S0"] = out["B_S0"] + q_weight.transpose(-1, -2) @ doa + WEa0[:, None, None] * dSa
    out["B_z0"] = out["B_z0"] + (q_weight * do_o[..., None]).sum(1) + WEa0[:, None] * dza
    Fa = WEa[..., None] * ka * final_k_all
    B_dG = B_dG + s * (
        qa * (WaR @ ka) + ka * (WaR.transpose(-1, -2) @ qa) + Wa0[..., None] * qa * R0
    )
    B_dG = B_dG + Fa
    if L:
        B_dG[:, -1] = B_dG[:, -1] + Fa.sum(1)
    # Partial products lost to underflow or casts: ℓ Π max(1, |f|) per term (as the scalar path).
    live = (W_tok > 0).any(1).to(R.dtype)  # [H, L, L]
    B_dqf, B_dkf, B_dG = _add_lost_intermediates(out, f, ct, live, zeta, B_dqf, B_dkf, B_dG)
    out["M_g"] = reverse_cumsum(M_dG.transpose(1, 2)).transpose(1, 2)
    steps = torch.arange(L, 0, -1, dtype=M_dG.dtype, device=M_dG.device)[:, None]
    out["B_g"] = reverse_cumsum(B_dG.transpose(1, 2)).transpose(1, 2) + u.acc * steps * out["M_g"]
    # Tokens last for the block's reach, then back to [H, L, K].
    M_g, B_g = reach_of_block(
        seq,
        M_dG.transpose(1, 2),
        B_dG.transpose(1, 2),
        out["M_g"].transpose(1, 2),
        out["B_g"].transpose(1, 2),
    )
    out["M_g"], out["B_g"] = M_g.transpose(1, 2), B_g.transpose(1, 2)
    add_feature_map_chain(out, seq, (M_dqf, B_dqf), (M_dkf, B_dkf))
    # Unverifiable: anything that depends on a row whose denominator is not certified; per
    # dimension for dg (key j of dimension m is seen by row t when w_tjm > 0).
    bad = unverifiable_rows(f)
    seen = (W_tok > 0) & bad[:, None, :, None]  # [H, K, L, L]
    bad_key_m = seen.any(2).transpose(1, 2)  # [H, L, K]
    bad_G = bad[..., None] | bad_key_m
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [1]), 1).values, [1]) > 0
    bad_key = bad_key_m.any(-1)
    out["bad_q"], out["bad_k"], out["bad_v"], out["bad_g"] = bad, bad_key, bad_key, bad_g
    out["bad_S0"] = (bad & (w0 > 0).any(-1)).any(-1)  # [H]
    out["count"] = (count.max() if count.numel() else R.new_zeros(())).expand(1)
    mark_overflow(out, f, ct)
    return out


def _add_lost_intermediates(
    out: dict[str, torch.Tensor],
    f: ForwardPieces,
    ct: Cotangents,
    live: torch.Tensor,
    zeta: torch.Tensor,
    B_dqf: torch.Tensor,
    B_dkf: torch.Tensor,
    B_dG: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scalar path's charge ℓ Π max(1, |f|) per term, with weights (<= 1) counting 1.

    The factors of a term do not involve the weight's value, so the charge is the scalar one
    with a term (t, j) live when some w_tjm > 0; dG_tm is charged per dimension.
    """
    seq, c = f.seq, f.seq.units.lost_intermediate

    def m1(x: torch.Tensor) -> torch.Tensor:
        return x.abs().clamp(min=1.0)

    s1 = max(1.0, seq.scale)
    q1, k1, v1 = m1(seq.q_feat), m1(seq.k_feat), m1(seq.v)
    S01, z01, do1, o1 = m1(seq.S0), m1(seq.z0), m1(ct.do), m1(f.o)
    dS1, dz1 = m1(ct.dS), m1(ct.dz)
    z1 = m1(zeta)
    P1 = (do1 @ v1.transpose(-1, -2) + (do1 * o1).sum(-1, keepdim=True)) * z1
    A1 = q1 @ k1.transpose(-1, -2)
    P0 = (do1 @ S01.transpose(-1, -2) + (do1 * o1).sum(-1, keepdim=True) * z01[:, None, :]) * z1
    final_k = v1 @ dS1.transpose(-1, -2) + dz1[:, None, :]
    C_dqf = c * s1 * ((live * P1) @ k1 + P0)
    C_dkf = c * (s1 * (live * P1).transpose(-1, -2) @ q1 + final_k)
    out["B_v"] = out["B_v"] + c * (s1 * (live * A1 * z1).transpose(-1, -2) @ do1 + k1 @ dS1)
    qz1 = q1 * z1
    out["B_S0"] = out["B_S0"] + c * (s1 * qz1.transpose(-1, -2) @ do1 + dS1)
    out["B_z0"] = out["B_z0"] + c * (s1 * (qz1 * (do1 * o1).sum(-1, keepdim=True)).sum(1) + dz1)
    C_dG = q1 * C_dqf + k1 * C_dkf + c
    return B_dqf + C_dqf, B_dkf + C_dkf, B_dG + C_dG
