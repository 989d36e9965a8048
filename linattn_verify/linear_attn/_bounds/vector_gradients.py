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
    lost_intermediates,
    mark_overflow,
    reach_of_block,
    reverse_cumsum,
    unverifiable_rows,
)
from linattn_verify.linear_attn._bounds.vector_weights import VectorWeights


def vector_backward_sequence(
    f: ForwardPieces, ct: Cotangents, normalize: bool
) -> dict[str, torch.Tensor]:
    """Magnitudes, bounds and unverifiable masks of the gradients of one sequence (vector gate).

    ``M_g``, ``B_g`` and ``bad_g`` are ``[H, L, K]``; every other entry has the shape of the
    scalar path's (`linattn_verify.linear_attn._bounds.gradients.backward_sequence`).
    """
    seq, u = f.seq, f.seq.units
    s = seq.scale
    vw = VectorWeights(seq)
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
    R = (seq.outer(doa, va) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = (doa @ S0a.transpose(-1, -2) + do_o[..., None] * z0a[:, None, :]) * zeta  # [H, L, K]
    count = seq.K + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    U_c = u.acc * count + u.per_term + e_Z  # [H, L, L+1]: the part of U_tjm common to every m
    U_tok = U_c[..., 1:]
    w0 = vw.first_weights()  # [H, L, K]
    WU0 = w0 * (U_c[..., 0][..., None] + vw.first_weight_errors())  # w_t0m U_t0m
    wE_all = seq.W_end.reshape(H, K, L + 1).transpose(1, 2)  # [H, L+1, K]
    wE0, wE = wE_all[:, 0], wE_all[:, 1:]  # [H, K], [H, L, K]
    U_S = (
        u.acc * (seq.acc_state + seq.V + 4)[None, :, None]
        + seq.eps_w_end.reshape(H, K, L + 1).transpose(1, 2)
        + u.per_term
    )  # [H, L+1, K]
    US0, US = U_S[:, 0], U_S[:, 1:]
    # Underflow inside the m-sum, unweighted (before or after the multiply by w <= 1), and in
    # do_t·v_j (absolute, before the division by Z_t), as in the scalar path.
    under_A = u.underflow * (K + 2) * seq.token_pairs()
    dot_underflow = u.underflow * (seq.V + 2) * zeta  # [H, L, 1]
    adj = adjoint_errors(f, zeta, normalize)
    # Absolute errors of dP, [H, L, L].
    P_err = (delta_err[..., None] + dot_underflow + adj.P) * seq.token_pairs()
    out: dict[str, torch.Tensor] = {}
    # The sums over pairs with the weight of each dimension m, each once: over keys j <= t
    # (rows) and over rows t >= j (cols), of |dP| R and of its error U R + P_err (weights'
    # errors ε_w(t, j, m) separately).
    R_ka = vw.rows(R, ka)
    R_kerr = vw.rows(R, seq.k_err)
    Rerr_ka = vw.rows(U_tok * R + P_err, ka) + vw.rows(R, ka, error=True)
    R_qa = vw.cols(R, qa)
    R_qerr = vw.cols(R, seq.q_err)
    Rerr_qa = vw.cols(U_tok * R + P_err, qa) + vw.cols(R, qa, error=True)
    # dφ(q) and dφ(k).
    M_dqf = s * (R_ka + w0 * R0)
    B_dqf = s * (
        Rerr_ka + R_kerr + WU0 * R0 + nz * w0 * delta_err[..., None] * z0a[:, None, :] + w0 * adj.P0
    )
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # (|dS_T||v_j| + |dz_T|)_m
    M_dkf = s * R_qa + wE * final_k
    B_dkf = s * (Rerr_qa + R_qerr) + US * wE * final_k
    # dv: Σ_m q̃_tm k̃_jm w_tjm is the forward's weighted |A|^w.
    absA_w = vw.weighted(qa, ka)
    Ephi_w = vw.weighted(seq.q_err, ka) + vw.weighted(qa, seq.k_err) + under_A
    kw = ka * wE  # [H, L, K]
    zdo = s * zeta * doa
    A_do = absA_w.transpose(-1, -2) @ torch.cat([zdo, s * torch.ones_like(zeta)], -1)
    V = doa.shape[-1]
    out["M_v"] = A_do[..., :V] + kw @ dSa
    out["B_v"] = (U_tok * absA_w + vw.weighted(qa, ka, error=True) + Ephi_w).transpose(
        -1, -2
    ) @ zdo + ((kw * US + seq.k_err * wE) @ dSa)
    out["B_v"] = out["B_v"] + adj.dN * A_do[..., V:]
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
    q_row = s * qa * R_ka  # Σ_j |q̃_tm| w_tjm R_tj |k̃_jm|
    k_col = s * ka * R_qa
    Q0 = s * w0 * qa * R0  # the initial state's share, q̃_tm w_t0m (S_0 do_t - δ_t z_0)_m / Z_t
    # Underflow inside the m-sum of an A_tj (the P·dP algorithm), charged to every dimension.
    under_G = under_A * R
    err_row = s * (qa * (Rerr_ka + R_kerr) + seq.q_err * R_ka) + s * under_G.sum(-1)[..., None]
    err_col = s * (ka * (Rerr_qa + R_qerr) + seq.k_err * R_qa) + s * under_G.sum(-2)[..., None]
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
    WaR_ka, WaR_qa = WaR @ ka, WaR.transpose(-1, -2) @ qa
    final_k_all = va @ dSa.transpose(-1, -2) + dza[:, None, :]
    B_dqf = B_dqf + s * (WaR_ka + Wa0[..., None] * R0)
    B_dkf = B_dkf + s * WaR_qa + WEa[..., None] * final_k_all
    out["B_v"] = out["B_v"] + (Wa * seq.outer(qa, ka)).transpose(-1, -2) @ zdo
    out["B_v"] = out["B_v"] + WEa[..., None] * (ka @ dSa)
    q_weight = s * qa * (Wa0 * zeta[..., 0])[..., None]
    out["B_S0"] = out["B_S0"] + q_weight.transpose(-1, -2) @ doa + WEa0[:, None, None] * dSa
    out["B_z0"] = out["B_z0"] + (q_weight * do_o[..., None]).sum(1) + WEa0[:, None] * dza
    Fa = WEa[..., None] * ka * final_k_all
    B_dG = B_dG + s * (qa * WaR_ka + ka * WaR_qa + Wa0[..., None] * qa * R0)
    B_dG = B_dG + Fa
    if L:
        B_dG[:, -1] = B_dG[:, -1] + Fa.sum(1)
    # Partial products lost to underflow or casts: ℓ Π max(1, |f|) per term (as the scalar
    # path), dG_tm charged per dimension.
    C_dqf, C_dkf, q1, k1 = lost_intermediates(out, f, ct, zeta)
    B_dqf, B_dkf = B_dqf + C_dqf, B_dkf + C_dkf
    B_dG = B_dG + q1 * C_dqf + k1 * C_dkf + seq.units.lost_intermediate
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
    bad_key_m = seq.keys_seen_by(bad).reshape(H, K, L).transpose(1, 2)  # [H, L, K]
    bad_G = bad[..., None] | bad_key_m
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [1]), 1).values, [1]) > 0
    bad_key = bad_key_m.any(-1)
    out["bad_q"], out["bad_k"], out["bad_v"], out["bad_g"] = bad, bad_key, bad_key, bad_g
    out["bad_S0"] = (bad & (w0 > 0).any(-1)).any(-1)  # [H]
    # Every form's count falls with j: the largest is in the initial-state column.
    out["count"] = (count[..., 0].max() if L else R0.new_zeros(())).expand(1)
    mark_overflow(out, f, ct)
    return out
