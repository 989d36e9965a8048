# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The gate-specific sums of the forward bound for a vector gate (docs/error-model.md §2.7).

A vector gate g ``[B, T, H, K]`` decays each key dimension m on its own: the terms of N are
τ_tjmi = s φ(q)_tm φ(k)_jm w_tjm v_ji with w_tjm = exp(G_tm - G_jm), and a term's relative error
is U_tjm = u_acc c_tj + ε_w(t, j, m) + u_pt: the rounding count c_tj of the scalar case (the
products φ(q)_tm φ(k)_jm w_tjm summed over m take the roundings the scalar q̃·k̃ dot and its
weight multiply take) and the scalar weight error ε_w of dimension m's cumulative sums. Where the
scalar bound has w_tj |A|_tj the vector bound has Σ_m U_tjm w_tjm |φ(q)_tm| |φ(k)_jm|, keeping
the per-dimension factor inside the sum.

The sums over m are `VectorWeights.weighted`: dense [H, K, L, L] float64 weights for short
sequences, a block scan with one decay per key dimension beyond (O(L·K) memory); the weights
are exp of the masked difference G_tm - G_jm, never exp(G_tm) / exp(G_jm).
"""

from __future__ import annotations

from linattn_verify.linear_attn._bounds.magnitudes import known_zero
from linattn_verify.linear_attn._bounds.pairwise import PairMatrix
from linattn_verify.linear_attn._bounds.terms import MainTerms, SequenceTerms
from linattn_verify.linear_attn._bounds.vector_weights import VectorWeights
from linattn_verify.linear_attn.semantics import Problem


def vector_main_terms(seq: SequenceTerms, p: Problem) -> MainTerms:
    """The gate-specific sums of the bound for a vector gate (docs/error-model.md §2.7)."""
    u = seq.units
    s = seq.scale
    # ε_w of the final state's weights first, while little else is alive: its formation takes
    # several [H*K, L+1] temporaries (it is kept by `seq` for the final-state terms below).
    seq.eps_w_end  # noqa: B018
    vw = VectorWeights(seq)
    H, L, K = seq.H, seq.L, seq.K
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    w0 = vw.first_weights()  # [H, L, K]: w_t0m = exp(G_tm)
    count = K + 2 + seq.acc_fwd  # [L, L+1], as for a scalar gate
    # The part of U_tjm common to every m, and its initial-state column per m.
    U_cnt = u.acc * count + u.per_term
    U0 = (u.acc * count[..., 0] + u.per_term).reshape(1, L, 1) + vw.first_weight_errors()
    # Exact values (the float64 parallel form) and their magnitudes, one pair matrix at a time:
    # each lazy one holds [H, L+1, K] column features (the error-weighted one three of them),
    # freed once its sums are formed.
    A_w = vw.weighted(seq.q_feat, seq.k_feat)  # Σ_m φ(q)_tm φ(k)_jm w_tjm
    q_in = seq.q_feat * w0  # φ(q)_tm w_t0m
    N = p.scale * (A_w @ seq.v + q_in @ seq.S0)
    Zsum = M_Zsum = B_Zsum = None
    if p.normalize:
        Zsum = p.scale * (A_w.sum(-1) + (q_in * seq.z0[:, None, :]).sum(-1))
    del A_w, q_in
    absA_w = vw.weighted(qa, ka)  # |A|^w
    M_N = s * (absA_w @ va + (qa * w0) @ S0a)
    if p.normalize:
        M_Zsum = s * (absA_w.sum(-1) + (qa * w0 * z0a[:, None, :]).sum(-1))
    # Per term (t, j): relative errors (counts, casts, weights per m), φ errors weighted per m,
    # underflow inside the m-sum (at most λ per operation, K + 2 of them, weighted or not),
    # and a weight that underflows in dimension m (λ per exp or product: W_abs per (t, j, m)).
    # An exact feature map's errors are zero: their weighted sums are skipped (adding 0).
    phi_terms = [
        vw.weighted(a, b)
        for a, b, err in ((seq.q_err, ka, seq.q_err), (qa, seq.k_err, seq.k_err))
        if not known_zero(err)
    ]
    Ephi_w: PairMatrix = sum(phi_terms[1:], phi_terms[0]) if phi_terms else 0.0
    Ephi_w = Ephi_w + u.underflow * (K + 2) * seq.token_pairs()
    del phi_terms
    absA = seq.outer(qa, ka)  # unweighted: the absolute (underflow) weight errors
    Wa_tok, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]  # [1, L, L], [1, L]
    term = (
        U_cnt[..., 1:] * absA_w + vw.weighted(qa, ka, error=True) + Ephi_w + Wa_tok * absA
    )  # [H, L, L]
    del absA_w, absA, Ephi_w
    state_rel = (U0 * w0 + Wa0[..., None]) * qa  # [H, L, K]
    state_phi = w0 * seq.q_err
    B_N = s * (term @ va + state_rel @ S0a + state_phi @ S0a)
    if p.normalize:
        B_Zsum = s * (term.sum(-1) + ((state_rel + state_phi) * z0a[:, None, :]).sum(-1))
    del term, state_rel, state_phi, U0, w0, vw
    # Final state and key sum: terms w_Tjm φ(k)_jm v_ji (no K-dot, no scale), ε_w(T, j, m).
    wE = seq.W_end.reshape(H, K, L + 1).transpose(1, 2)  # [H, L+1, K]
    U_S = (
        u.acc * seq.acc_state[None, :, None]
        + seq.eps_w_end.reshape(H, K, L + 1).transpose(1, 2)
        + u.per_term
    )  # [H, L+1, K]
    WEa = seq.W_end_abs  # [1, L+1]
    kw = seq.k_feat * wE[:, 1:]
    S_T = kw.transpose(-1, -2) @ seq.v + wE[:, 0, :, None] * seq.S0
    z_T = kw.sum(1) + wE[:, 0] * seq.z0
    kaw = ka * wE[:, 1:]
    M_S = kaw.transpose(-1, -2) @ va + wE[:, 0, :, None] * S0a
    key_rel = kaw * U_S[:, 1:] + ka * WEa[:, 1:, None] + seq.k_err * wE[:, 1:]  # [H, L, K]
    state0 = U_S[:, 0] * wE[:, 0] + WEa[:, :1]  # [H, K]
    B_S = key_rel.transpose(-1, -2) @ va + state0[..., None] * S0a
    M_z = kaw.sum(1) + wE[:, 0] * z0a
    B_z = key_rel.sum(1) + state0 * z0a
    return MainTerms(
        N=N,
        M_N=M_N,
        B_N=B_N,
        S_T=S_T,
        M_S=M_S,
        B_S=B_S,
        z_T=z_T,
        M_z=M_z,
        B_z=B_z,
        live_end=(wE[:, 1:] > 0).any(-1).to(S_T.dtype),
        Z=Zsum,
        M_Z=M_Zsum,
        B_Z=B_Zsum,
    )
