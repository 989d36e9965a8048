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
    Put,
    adjoint_errors,
    backward_division_error,
    emitter,
    feature_chain,
    has_initial_state,
    initial_share,
    put_masks,
    reach_of_block,
    reverse_cumsum,
    unverifiable_rows,
)
from linattn_verify.linear_attn._bounds.lost import LostCharges
from linattn_verify.linear_attn._bounds.magnitudes import at_least_one, known_zero
from linattn_verify.linear_attn._bounds.vector_weights import VectorWeights


def vector_backward_sequence(f: ForwardPieces, ct: Cotangents, normalize: bool, put: Put) -> None:
    """Magnitudes, bounds and unverifiable masks of the gradients of one sequence (vector gate).

    Handed to ``put`` as `linattn_verify.linear_attn._bounds.gradients.backward_sequence`'s
    are, with ``M_g``, ``B_g`` and ``bad_g`` ``[H, L, K]``. Cost: a few block scans per
    gradient (`VectorWeights`). Memory: the gradients are formed one after another, each
    one's contractions freed once it is written; dG's two ``[H, L, K]`` sums are kept
    throughout.
    """
    seq, u = f.seq, f.seq.units
    s = seq.scale
    vw = VectorWeights(seq)
    H, L, K, V = seq.H, seq.L, seq.K, seq.V
    qa, ka, va, doa = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs(), ct.do_abs
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    dSa, dza = ct.dS.abs(), ct.dz.abs()
    # An exact feature map's errors are zero: their contractions are skipped (adding 0).
    exact_q, exact_k = known_zero(seq.q_err), known_zero(seq.k_err)
    nz = float(normalize)
    good = ~f.bad[..., None]
    zeta = torch.where(f.Z == 0, 1.0, 1.0 / f.Z.abs())  # [H, L, 1]
    e_Z = torch.where(good & (f.Z != 0), f.B_Z * zeta, 0.0)
    e_Z = e_Z + nz * backward_division_error(u)
    do_o = (doa * f.o.abs()).sum(-1) * nz  # [H, L]
    delta_err_raw = (doa * f.B_o).sum(-1) * nz
    delta_err = delta_err_raw * zeta[..., 0]
    R = (seq.outer(doa, va) + do_o[..., None]) * zeta  # |dP_tj|, [H, L, L]
    R0 = initial_share(seq, doa, do_o, zeta)  # [H, L, K]
    count = seq.K + seq.V + 10 + seq.acc_fwd + seq.acc_rev  # [L, L+1]
    U_c = u.acc * count + u.per_term + e_Z  # [H, L, L+1]: the part of U_tjm common to every m
    U_tok = U_c[..., 1:]

    def initial_weights() -> tuple[torch.Tensor, torch.Tensor]:
        """w_t0m and w_t0m U_t0m, ``[H, L, K]`` each (formed again where needed, not kept)."""
        w0 = vw.first_weights()
        return w0, w0 * (U_c[..., 0][..., None] + vw.first_weight_errors())

    def state_errors() -> torch.Tensor:
        """U_S of the final state's terms ``[H, L+1, K]`` (formed again where needed)."""
        return (
            u.acc * (seq.acc_state + seq.V + 4)[None, :, None]
            + seq.eps_w_end.reshape(H, K, L + 1).transpose(1, 2)
            + u.per_term
        )

    w0, WU0 = initial_weights()
    wE_all = seq.W_end.reshape(H, K, L + 1).transpose(1, 2)  # [H, L+1, K]
    wE0, wE = wE_all[:, 0], wE_all[:, 1:]  # [H, K], [H, L, K]
    # Underflow inside the m-sum, unweighted (before or after the multiply by w <= 1), and in
    # do_t·v_j (absolute, before the division by Z_t), as in the scalar path.
    under_A = u.underflow * (K + 2) * seq.token_pairs()
    dot_underflow = u.underflow * (seq.V + 2) * zeta  # [H, L, 1]
    adj = adjoint_errors(f, zeta, normalize)
    # Absolute errors of dP, [H, L, L].
    P_err = (delta_err[..., None] + dot_underflow + adj.P) * seq.token_pairs()
    # Weights that underflow: W^abs_tj per dimension (independent of m).
    Wa, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]  # [1, L, L], [1, L]
    WEa, WEa0 = seq.W_end_abs[:, 1:], seq.W_end_abs[:, 0]
    WaR = Wa * R
    lost = LostCharges(f, ct.do_abs, ct.dS, ct.dz, zeta)
    # Underflow inside the m-sum of an A_tj (the P·dP algorithm), charged to every dimension.
    under_G = under_A * R
    maxima: dict[str, torch.Tensor] = {}
    emit = emitter(put, maxima)

    # The sums over pairs with the weight of each dimension m, each once: over keys j <= t
    # (rows) for dφ(q), over rows t >= j (cols) for dφ(k), of |dP| R and of its error
    # U R + P_err (weights' errors ε_w(t, j, m) separately). dG_tm = q̃_tm dq̃_tm - k̃_tm dk̃_tm
    # takes its row part from the first and its column part from the second: its sums M_dG,
    # B_dG [H, L, K] gather each part while the contractions it needs are alive.
    # Each stage forms its lost-intermediate charge first, while little else is alive.
    C_dqf = lost.dq()
    # R's plain and weight-error sums share one scan of R (`rows_with_errors`).
    # The other sum first: no more is alive during either scan than when they were three.
    Rerr_ka = vw.rows(U_tok * R + P_err, ka)
    R_ka, Rerr_w_ka = vw.rows_with_errors(R, ka)
    Rerr_ka.add_(Rerr_w_ka)
    del Rerr_w_ka
    if not exact_k:
        Rerr_ka = Rerr_ka + vw.rows(R, seq.k_err)
    M_dqf = s * (R_ka + w0 * R0)
    B_dqf = Rerr_ka + WU0 * R0
    B_dqf.add_(nz * w0 * delta_err[..., None] * z0a[:, None, :]).add_(w0 * adj.P0).mul_(s)
    del w0, WU0  # formed again for the initial state's shares (`initial_weights`)
    WaR_ka = WaR @ ka
    B_dqf.add_(s * (WaR_ka + Wa0[..., None] * R0)).add_(C_dqf)
    M_dG = s * qa * R_ka  # Σ_j |q̃_tm| w_tjm R_tj |k̃_jm|
    E_row = qa * Rerr_ka
    if not exact_q:
        E_row.add_(seq.q_err * R_ka)
    del Rerr_ka
    B_dG = E_row.mul_(s).add_(s * under_G.sum(-1)[..., None])
    B_dG.add_(s * qa * WaR_ka).add_(at_least_one(seq.q_feat) * C_dqf)
    del R_ka, WaR_ka, C_dqf, E_row
    emit("q", *feature_chain(seq, "q", M_dqf, B_dqf))
    del M_dqf, B_dqf
    C_dkf = lost.dk()
    Rerr_qa = vw.cols(U_tok * R + P_err, qa)
    R_qa, Rerr_w_qa = vw.cols_with_errors(R, qa)
    Rerr_qa.add_(Rerr_w_qa)
    del Rerr_w_qa
    vw.forget()  # its error parts, [H, L+1, K] each, formed again for dv
    if not exact_q:
        Rerr_qa.add_(vw.cols(R, seq.q_err))
    final_k = va @ dSa.transpose(-1, -2) + nz * dza[:, None, :]  # (|dS_T||v_j| + |dz_T|)_m
    M_dkf = s * R_qa + wE * final_k
    US = state_errors()[:, 1:]
    B_dkf = s * Rerr_qa + US * wE * final_k
    WaR_qa = WaR.transpose(-1, -2) @ qa
    final_k_all = va @ dSa.transpose(-1, -2) + dza[:, None, :]
    del va
    B_dkf.add_(s * WaR_qa).add_(WEa[..., None] * final_k_all).add_(C_dkf)
    # dG's column part, then the final-state pairing w_Tjm k̃_jm (dS_T v_j + dz_T)_m with its
    # errors, each added as formed; their t = L shares [H, K] kept for the last token.
    M_dG.add_(s * ka * R_qa)
    E_col = ka * Rerr_qa
    if not exact_k:
        E_col.add_(seq.k_err * R_qa)
    del Rerr_qa
    B_dG.add_(s * E_col).add_(s * under_G.sum(-2)[..., None])
    del E_col
    F = wE * ka * final_k  # [H, L, K]
    M_dG.add_(F)
    last_M = F.sum(1)
    del F
    F_err = wE * (US * ka if exact_k else US * ka + seq.k_err) * final_k
    del US, final_k
    B_dG.add_(F_err)
    last_B = F_err.sum(1)
    del F_err
    B_dG.add_(s * ka * WaR_qa)
    Fa = WEa[..., None] * ka * final_k_all
    B_dG.add_(Fa).add_(at_least_one(seq.k_feat) * C_dkf)
    last_B += Fa.sum(1)
    del R_qa, final_k_all, WaR_qa, C_dkf, Fa
    del R, WaR, P_err, under_G
    emit("k", *feature_chain(seq, "k", M_dkf, B_dkf))
    del M_dkf, B_dkf
    # dv: Σ_m q̃_tm k̃_jm w_tjm is the forward's weighted |A|^w.
    lost_v = lost.dv()
    absA_w = vw.weighted(qa, ka)
    Ephi_w: object = under_A
    if not exact_q:
        Ephi_w = vw.weighted(seq.q_err, ka) + Ephi_w
    if not exact_k:
        Ephi_w = vw.weighted(qa, seq.k_err) + Ephi_w
    zdo = s * zeta * doa
    # The error-weighted scan first, while A_do and the final-state pairing are not formed: it
    # holds the weights' error parts and its [H, L+1, 2K] channels.
    B_v = (U_tok * absA_w + vw.weighted(qa, ka, error=True) + Ephi_w).transpose(-1, -2) @ zdo
    vw.forget()
    del Ephi_w
    kw = ka * wE  # [H, L, K]
    A_do = absA_w.transpose(-1, -2) @ torch.cat([zdo, s * torch.ones_like(zeta)], -1)
    del absA_w
    M_v = A_do[..., :V] + kw @ dSa
    US = state_errors()[:, 1:]
    kw_U = kw * US if exact_k else kw * US + seq.k_err * wE
    del US, kw
    B_v.add_(kw_U @ dSa).add_(adj.dN * A_do[..., V:])
    del A_do, kw_U
    B_v.add_((Wa * seq.outer(qa, ka)).transpose(-1, -2) @ zdo)
    B_v.add_(WEa[..., None] * (ka @ dSa)).add_(lost_v)
    del zdo, lost_v
    emit("v", M_v, B_v)
    del M_v, B_v
    w0, WU0 = initial_weights()
    US0 = state_errors()[:, 0]
    # dS_0 and dz_0, asked for only with an initial state.
    if has_initial_state(seq):
        lost_S0, lost_z0 = lost.states()
        qz = s * qa * w0 * zeta  # [H, L, K]
        qz_U = s * qa * WU0 * zeta
        M_S0 = qz.transpose(-1, -2) @ doa + wE0[..., None] * dSa
        qz_all = qz_U if exact_q else qz_U + s * seq.q_err * w0 * zeta
        B_S0 = qz_all.transpose(-1, -2) @ doa + (US0 * wE0)[..., None] * dSa
        del qz_all
        q0 = s * qa * w0  # [H, L, K]: the weights of dN_t and dZ_t in dS_0 and dz_0
        B_S0 = B_S0 + adj.dN * q0.sum(1)[..., None]
        M_z0 = (qz * do_o[..., None]).sum(1) + wE0 * dza
        B_z0 = (qz_U * do_o[..., None] + qz * delta_err_raw[..., None]).sum(1)
        if not exact_q:
            B_z0 = B_z0 + (s * seq.q_err * w0 * zeta * do_o[..., None]).sum(1)
        B_z0 = B_z0 + US0 * wE0 * dza + (q0 * adj.dZ).sum(1)
        del qz, qz_U, q0
        q_weight = s * qa * (Wa0 * zeta[..., 0])[..., None]
        B_S0 = B_S0 + q_weight.transpose(-1, -2) @ doa + WEa0[:, None, None] * dSa
        B_z0 = B_z0 + (q_weight * do_o[..., None]).sum(1) + WEa0[:, None] * dza
        del q_weight
        for key, x in (
            ("M_S0", M_S0),
            ("B_S0", B_S0 + lost_S0),
            ("M_z0", M_z0),
            ("B_z0", B_z0 + lost_z0),
        ):
            put(key, x)
    # dG's initial-state share, q̃_tm w_t0m (S_0 do_t - δ_t z_0)_m / Z_t, and its errors.
    qR0 = qa * R0
    E0 = WU0 * qR0
    if not exact_q:
        E0 = E0 + w0 * seq.q_err * R0
    E0 = E0 + nz * w0 * qa * z0a[:, None, :] * delta_err[..., None] + w0 * qa * adj.P0
    M_dG.add_(s * w0 * qR0)
    B_dG.add_(s * E0).add_(u.acc * (K + 2) * M_dG).add_(s * Wa0[..., None] * qR0)
    B_dG.add_(seq.units.lost_intermediate)
    del qR0, E0
    F0 = wE0 * ((dSa * S0a).sum(-1) + nz * dza * z0a)  # [H, K]
    if L:
        M_dG[:, -1] += last_M + F0
        B_dG[:, -1] += last_B + F0 * US0
    M_g = reverse_cumsum(M_dG.transpose(1, 2)).transpose(1, 2)
    steps = torch.arange(L, 0, -1, dtype=M_dG.dtype, device=M_dG.device)[:, None]
    B_g = reverse_cumsum(B_dG.transpose(1, 2)).transpose(1, 2) + u.acc * steps * M_g
    # Tokens last for the block's reach, then back to [H, L, K].
    M_g, B_g = reach_of_block(
        seq, M_dG.transpose(1, 2), B_dG.transpose(1, 2), M_g.transpose(1, 2), B_g.transpose(1, 2)
    )
    del M_dG, B_dG
    emit("g", M_g.transpose(1, 2), B_g.transpose(1, 2))
    del M_g, B_g
    # Unverifiable: anything that depends on a row whose denominator is not certified; per
    # dimension for dg (key j of dimension m is seen by row t when w_tjm > 0).
    bad = unverifiable_rows(f)
    bad_key_m = seq.keys_seen_by(bad).reshape(H, K, L).transpose(1, 2)  # [H, L, K]
    bad_G = bad[..., None] | bad_key_m
    bad_g = torch.flip(torch.cummax(torch.flip(bad_G.to(torch.int8), [1]), 1).values, [1]) > 0
    bad_key = bad_key_m.any(-1)
    masks = {"bad_q": bad, "bad_k": bad_key, "bad_v": bad_key, "bad_g": bad_g}
    masks["bad_S0"] = (bad & (w0 > 0).any(-1)).any(-1)  # [H]
    # Every form's count falls with j: the largest is in the initial-state column.
    put("count", (count[..., 0].max() if L else R0.new_zeros(())).expand(1))
    put_masks(put, masks, f, ct, maxima)
