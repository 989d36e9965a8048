# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Forward bounds of one sequence: output, denominator, residual pieces, final state."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.linear_attn._bounds.overflow import forward_overflow
from linattn_verify.linear_attn._bounds.terms import MainTerms, SequenceTerms
from linattn_verify.linear_attn._bounds.vector import vector_main_terms
from linattn_verify.linear_attn.semantics import Problem


@dataclass
class ForwardPieces:
    """Per-sequence forward quantities, kept for the gradient bounds."""

    seq: SequenceTerms
    Z: torch.Tensor  # [H, L, 1] (ones when unnormalized)
    B_Z: torch.Tensor  # [H, L, 1] (zeros when unnormalized)
    bound_o: torch.Tensor  # [H, L, V] forward bound of o (inf where unverifiable: see `bad`)
    o: torch.Tensor  # [H, L, V]
    bad: torch.Tensor  # [H, L] rows with an unverifiable denominator (or an overflow)
    # Where the kernel's 16-bit arithmetic may overflow (`_bounds.overflow`): rows [H, L], and
    # heads [H] of the final state.
    overflow: torch.Tensor
    end_overflow: torch.Tensor
    numerator_magnitude: torch.Tensor  # [H, L, V]: M^N, the output's magnitude unnormalized
    # Rows [H, L] where a clamped denominator max(Z, eps) may take the other branch in the
    # kernel (|Z - eps| within Z's bound): its gradient jumps there (none where unclamped).
    kink: torch.Tensor | None = None

    @property
    def B_o(self) -> torch.Tensor:
        """The forward bound of o ``[H, L, V]``, 0 where unverifiable (formed on each call)."""
        return torch.where(self.bad[..., None], 0.0, self.bound_o)


def scalar_main_terms(seq: SequenceTerms, p: Problem) -> MainTerms:
    """The gate-specific sums of the bound for a scalar gate (or none): docs/error-model.md §2.2."""
    u = seq.units
    s = seq.scale
    qa, ka, va = seq.q_feat.abs(), seq.k_feat.abs(), seq.v.abs()
    S0a, z0a = seq.S0.abs(), seq.z0.abs()
    K = seq.dot_length
    count = K + 2 + seq.acc_fwd  # [L, L+1]
    U = u.acc * count + seq.eps_w + u.per_term  # [H?, L, L+1]
    W = seq.W
    absA = seq.outer(qa, ka)  # [H, L, L]
    # φ errors, and underflow inside the K-dot, as absolute errors of A_tj.
    Ephi = seq.outer(seq.q_err, ka) + seq.outer(qa, seq.k_err)
    Ephi = Ephi + u.underflow * (K + 2)
    qS0a = qa @ S0a  # [H, L, V]
    qz0a = (qa * z0a[:, None, :]).sum(-1)  # [H, L]
    w0, W_tok = W[..., 0], W[..., 1:]
    U0, U_tok = U[..., 0], U[..., 1:]
    # Exact values (the float64 parallel form) and their magnitudes.
    A = seq.outer(seq.q_feat, seq.k_feat)
    N = seq.signed_scale * ((W_tok * A) @ seq.v + w0[..., None] * (seq.q_feat @ seq.S0))
    M_N = s * ((W_tok * absA) @ va + w0[..., None] * qS0a)
    Wa_tok, Wa0 = seq.W_abs[..., 1:], seq.W_abs[..., 0]  # absolute weight errors (underflow)
    B_N = s * (
        ((U_tok * W_tok * absA) + W_tok * Ephi + Wa_tok * absA) @ va
        + (U0 * w0 + Wa0)[..., None] * qS0a
        + w0[..., None] * (seq.q_err @ S0a)
    )
    Zsum = M_Zsum = B_Zsum = None
    if p.normalize:
        Zsum = seq.signed_scale * (
            (W_tok * A).sum(-1) + w0 * (seq.q_feat * seq.z0[:, None, :]).sum(-1)
        )
        M_Zsum = s * ((W_tok * absA).sum(-1) + w0 * qz0a)
        B_Zsum = s * (
            ((U_tok * W_tok * absA) + W_tok * Ephi + Wa_tok * absA).sum(-1)
            + (U0 * w0 + Wa0) * qz0a
            + w0 * (seq.q_err * z0a[:, None, :]).sum(-1)
        )
    # Final state and key sum: terms φ(k_j) v_j w_Tj (no K-dot, no scale).
    wE = seq.W_end  # [H, L+1]
    count_S = seq.acc_state  # [L+1]
    U_S = u.acc * count_S + seq.eps_w_end + u.per_term  # [H, L+1]
    kw = seq.k_feat * wE[:, 1:, None]
    S_T = kw.transpose(-1, -2) @ seq.v + wE[:, :1, None] * seq.S0
    z_T = kw.sum(1) + wE[:, :1] * seq.z0
    kaw = ka * wE[:, 1:, None]
    M_S = kaw.transpose(-1, -2) @ va + wE[:, :1, None] * S0a
    WEa = seq.W_end_abs  # [1, L+1] absolute weight errors (underflow)
    B_S = (
        (kaw * U_S[:, 1:, None] + ka * WEa[:, 1:, None]).transpose(-1, -2) @ va
        + (seq.k_err * wE[:, 1:, None]).transpose(-1, -2) @ va
        + (U_S[:, :1] * wE[:, :1] + WEa[:, :1])[..., None] * S0a
    )
    M_z = kaw.sum(1) + wE[:, :1] * z0a
    B_z = (
        (kaw * U_S[:, 1:, None] + ka * WEa[:, 1:, None]).sum(1)
        + (seq.k_err * wE[:, 1:, None]).sum(1)
        + (U_S[:, :1] * wE[:, :1] + WEa[:, :1]) * z0a
    )
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
        live_end=(wE[:, 1:] > 0).to(S_T.dtype),
        Z=Zsum,
        M_Z=M_Zsum,
        B_Z=B_Zsum,
    )


def forward_sequence(
    seq: SequenceTerms, p: Problem
) -> tuple[dict[str, torch.Tensor], ForwardPieces]:
    u = seq.units
    s = seq.scale
    qa, va = seq.q_feat.abs(), seq.v.abs()
    count = seq.dot_length + 2 + seq.acc_fwd  # [L, L+1]
    main = vector_main_terms(seq, p) if seq.vector else scalar_main_terms(seq, p)
    N, M_N, B_N = main.N, main.M_N, main.B_N
    # Every form's count falls with j: a row's largest is its initial-state column's.
    max_count = count[..., 0].reshape(seq.L).to(N.dtype)  # [L]
    L = seq.L
    # Absolute errors: an underflowing rounding anywhere on a term's path (at most one smallest
    # normal each), and tiny values lost to casts of P (per term) or of the state (per feature).
    terms = torch.arange(2, L + 2, dtype=N.dtype, device=N.device)  # t tokens + the state
    underflow = (u.underflow * terms * max_count)[None, :, None]  # [1, L, 1]
    lost = u.lost_intermediate
    cast_row = lost * s * qa.sum(-1, keepdim=True)  # [H, L, 1]
    # Casts of P's terms: every key j <= t (those whose float64 weight underflows to 0 too,
    # an over-count of at most ℓ Σ|v| per row that keeps the sum a prefix sum).
    B_N = B_N + underflow + cast_row + lost * torch.cumsum(va, 1)
    out: dict[str, torch.Tensor] = {}
    if p.normalize:
        assert main.Z is not None
        assert main.M_Z is not None
        assert main.B_Z is not None
        if p.clamp:
            # max(Z, eps) moves by no more than Z does (1-Lipschitz): Z's bound stands.
            Z = torch.clamp(main.Z, min=p.eps)[..., None]  # [H, L, 1]
            M_Z = torch.clamp(main.M_Z, min=p.eps)[..., None]
        else:
            Z = (main.Z + p.eps)[..., None]  # [H, L, 1]
            M_Z = (main.M_Z + p.eps)[..., None]
        B_Z = main.B_Z[..., None] + u.acc * Z.abs()
        B_Z = B_Z + underflow + cast_row + lost * terms[None, :, None] + u.division_cast_abs
        kink = ((main.Z[..., None] - p.eps).abs() <= B_Z)[..., 0] if p.clamp else None
        B_N = B_N + u.division_cast_abs
        # A reciprocal 1/Z below its dtype's normal range errs by up to λ_r absolutely: |N| λ_r
        # on o, which is the numerator error |N| |Z| λ_r in the residual N - ô Z (§2.3).
        B_N = B_N + u.reciprocal_abs * N.abs() * Z.abs()
        exact_zero = M_Z == 0  # every term vanishes: the 0/0 row, whose value is exactly 0
        o = torch.where(Z == 0, torch.zeros_like(N), N / torch.where(Z == 0, 1, Z))
        # Where 1/Z may overflow the reciprocal's dtype, o is inf: unverifiable, like Z ≈ 0;
        # so is a row where the declared 16-bit arithmetic may overflow.
        overflow, end_overflow = forward_overflow(seq, M_N, M_Z)
        good = ((Z.abs() / 2 > B_Z) & ((Z.abs() - B_Z) * u.reciprocal_max > 1)) | exact_zero
        good = good & ~overflow[..., None]
        rounding = u.div + u.out
        B_o = torch.where(
            good,
            (B_N + o.abs() * B_Z) / torch.where(good, Z.abs() - B_Z, 1)
            + rounding * o.abs()
            + u.out_abs,
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
            M_N=M_N,
            M_Z=M_Z,
            eps_influence=(p.eps / torch.where(Z == 0, 1, Z.abs()))[..., 0],
        )
        Z_rows = Z
    else:
        kink = None
        o = N
        overflow, end_overflow = forward_overflow(seq, M_N, None)
        bad = overflow
        B_o = torch.where(bad[..., None], torch.inf, B_N + u.out * N.abs() + u.out_abs)
        out.update(o=o, B_o=B_o, M_o=M_N)
        Z_rows = torch.ones_like(N[..., :1])
    out["count_o"] = (max_count[None, :, None]).expand(seq.H, L, 1)
    count_S = seq.acc_state  # [L+1]
    S_T = main.S_T
    underflow_S = u.underflow * (L + 1) * count_S.max()
    # A decayed key w_Tj k_jm cast to the intermediate dtype before its product with v_j (FLA's
    # chunk_h does this) loses up to ℓ where it is tiny, as P's terms do in the output.
    live = main.live_end  # [H, L]
    lost_S = lost * (live[..., None] * va).sum(1)[:, None, :]  # [H, 1, V]
    lost_z = lost * live.sum(1, keepdim=True)  # [H, 1]
    out.update(
        S_T=S_T,
        M_S=main.M_S,
        B_S=torch.where(end_overflow[:, None, None], torch.inf, main.B_S + underflow_S + lost_S),
        z_T=main.z_T,
        M_z=main.M_z,
        B_z=torch.where(end_overflow[:, None], torch.inf, main.B_z + underflow_S + lost_z),
        count_S=count_S.max().expand(1),
    )
    B_Z_rows = out["B_Z"] if p.normalize else torch.zeros_like(Z_rows)
    pieces = ForwardPieces(
        seq=seq,
        Z=Z_rows,
        B_Z=B_Z_rows,
        bound_o=B_o,
        o=o,
        bad=bad,
        overflow=overflow,
        end_overflow=end_overflow,
        numerator_magnitude=M_N,
        kink=kink,
    )
    return out, pieces
