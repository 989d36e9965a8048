# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Gradient error bounds of the delta rule for the recurrent recipe (docs/error-model.md §8.4).

For the loss <o, do> + <S_T, dS_T>, the adjoint of the state Λ_t = ∂loss/∂S_t runs backward:

    Λ_T = dS_T + s q_T do_T^T,     Λ_{t-1} = A_t^T Λ_t + s q_{t-1} do_{t-1}^T,     dS_0 = A_1^T Λ_1

with A_t^T Λ = D_t Λ'_t, Λ'_t = (I - β_t k_t k_t^T) Λ_t (the adjoint of S'_t), D_t = diag(e^{g_t}).
||A_t^T||_2 = ||A_t||_2 <= ρ_t, so a computed adjoint's column errors F_t obey the forward
model's running bound backward: F_{t-1} <= ρ_t F_t + ||δΛ_{t-1}[:, j]||_2 with

    |δΛ_{t-1}| <= γ_{K+6} (D |Λ_t| + D β |k| (|k|^T |Λ_t|)) + 2 ε_k D β |k| (|k|^T |Λ_t|)
                  + ε_d D |Λ'_t|
                  + (γ_{K+6} + ε_q) s |q_{t-1}| |do_{t-1}|^T

(ε_q: the relative error of an in-kernel L2-normalised q).

Per token, with e_t = v_t - S'^T_t k_t, the gradients and their first-order bounds (the kernel's
recomputed states err by the forward bound E_t per column; σ' = max d_t E_{t-1} + ε_d |S'| bounds
the error of S'_t, δe_j = ||k|| max d E_{t-1,j} + (γ_{K+1} + ε_d + ε_k) (|v_j| + |S'|^T |k|)_j):

    dq_t = s S_t do_t               s Σ_j E_tj |do_tj| + γ_{V+2} s |S_t| |do_t|
    dv_t = β Λ_t^T k_t              β (||k|| F_t + (γ_{K+2} + ε_k) |Λ_t|^T |k|)
    dβ_t = (Λ_t^T k_t)·e_t          Σ_j (||k|| F_tj |e_j| + (|Λ|^T|k|)_j δe_j)
                                        + (γ_{K+V+2} + 2ε_k) m
    dk_t = β (Λ_t e_t - S'_t Λ_t^T k_t)    β Σ_j (F_j |e_j| + |Λ_ij| δe_j + σ'_ij |Λ^T k|_j
                                        + |S'_ij| ||k|| F_j) + (γ_{K+V+4} + 2ε_k) m
    dg_ti = Σ_j S'_ij Λ'_ij         Σ_j (σ'_ij |Λ'_ij| + |S'_ij| δΛ'_ij) + γ_{V+K+4} m
                                    (δΛ'_ij = F_j (1 + β |k_i| ||k||); m = Σ_j |S'_ij| (|Λ_ij|
                                    + β |k_i| (|k|^T |Λ|)_j), the terms before Λ' cancels;
                                    a scalar gate sums over i)
    dS_0 = A_1^T Λ_1                F_0

where m is each formula's magnitude (the same sum on absolute values). With the in-kernel L2
norm the gradient of the raw x = q or k is J (dx̂) with J = (I - x̂ x̂^T) / r, r = sqrt(Σx² +
eps): its bound is |J| (the bound of dx̂) + (γ_{K+6} + 2 ε_k) |J| |dx̂| with |J| <= (I + |x̂||x̂|^T)/r.

With `DeltaRecipe.stored_corrections` (FLA's fused recurrent DeltaNet) the backward recomputes
S_t = S_0 + Σ_{j<=t} k_j û_j^T from the corrections û_j = β_j e_j stored in the intermediate
dtype (no decay in that kernel) and stores its dk and dv partials there: S_t then errs by
(γ_{t+2} + u_I) (|S_0| + Σ_{j<=t} |k_j| |û_j|) (a plain sum, not the contracting recurrence),
which dq and dk's correction -β S_{t-1} Λ^T k read, and dk and dβ carry 2 u_I m and u_I m more.

The reference gradients are float64 autograd through the recurrent oracle.
"""

from __future__ import annotations

from typing import Any

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.judging import bound_on, judging_device, problem_on
from linattn_verify.delta.bounds import Units, contraction, decay_error, per_head_elements
from linattn_verify.delta.gradient_assembly import assemble_gradient_bounds, l2norm_chain
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import DeltaSequence, group_size


def _sequence(
    seq: DeltaSequence,
    raw_q: torch.Tensor,
    raw_k: torch.Tensor,
    do: torch.Tensor,
    dS_T: torch.Tensor,
    scale: float,
    units: Units,
    l2norm_qk: bool,
    stored: bool = False,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Bounds and magnitudes of one sequence's gradients (heads first), by input name.

    ``stored``: the recipe's `DeltaRecipe.stored_corrections` (module docstring).
    """
    H, L, K = seq.q.shape
    V = seq.v.shape[-1]
    eps_k = units.l2norm(K, l2norm_qk)
    g = units.gamma
    d = (
        torch.ones(H, L, K, dtype=seq.q.dtype, device=seq.q.device)
        if seq.g is None
        else torch.exp(seq.g if seq.g.ndim == 3 else seq.g[..., None].expand(H, L, K))
    )
    eps_d = decay_error(seq, units)
    # Each formula's operations may underflow (2^-150 each); the L2-norm chain divides by
    # r >= sqrt(eps).
    underflow = (K + V + 8) * units.under * (L2NORM_EPS**-0.5 if l2norm_qk else 1.0)
    rho = contraction(seq.beta, seq.k, seq.g)
    max_d = d.amax(-1)  # [H, L]
    k, q, beta = seq.k, seq.q, seq.beta
    k_norm = k.norm(dim=-1)  # [H, L]
    # Forward: exact S'_t, S_t and the running column error E_t of the states.
    S = seq.S0
    E = S.new_zeros(H, V)
    Sp_all, S_all, E_prev, E_all, S_prev = [], [], [], [], []
    summed: list[torch.Tensor] = []
    # e^g that is subnormal in fp32 errs by 2^-150 absolutely (0 without a gate).
    under_d = 0.0 if seq.g is None else units.under
    for t in range(L):
        S_before = S
        Sp = d[:, t, :, None] * S
        kt, bt = k[:, t, :, None], beta[:, t, None, None]
        a = (kt.abs() * Sp.abs()).sum(1, keepdim=True)
        S = Sp + kt * (bt * (seq.v[:, t, None, :] - (kt * Sp).sum(1, keepdim=True)))
        local = (
            g(K + 5) * (Sp.abs() + S.abs())
            + (eps_d[:, t, None, None] * Sp.abs() + under_d * S_before.abs())
            * (1 - bt * kt.pow(2).sum(1, keepdim=True)).abs().clamp(min=1)
            + (g(K + 5) + eps_k) * bt * kt.abs() * (seq.v[:, t, None, :].abs() + 2 * a)
            + (K + 6) * units.under
        )
        E_prev.append(E)
        # |S_0| + Σ_{j<=t} |k_j| |β_j e_j|: the terms of S_t recomputed from the corrections.
        summed.append((summed[-1] if summed else S_before.abs()) + (kt * (S - Sp)).abs())
        E = rho[:, t, None] * E + local.norm(dim=1)
        Sp_all.append(Sp)
        S_prev.append(S_before)
        S_all.append(S)
        E_all.append(E)
    # Backward: exact Λ_t and its running column error F_t.
    Lam, F = dS_T, dS_T.new_zeros(H, V)
    if L:
        last = scale * q[:, L - 1, :, None] * do[:, L - 1, None, :]
        # s q do^T: the scale's rounding and the multiply, and an in-kernel normalised q's ε.
        Lam, F = Lam + last, (g(3) + eps_k) * last.abs().norm(dim=1)
    out: dict[str, list[torch.Tensor]] = {n: [] for n in ("q", "k", "v", "beta", "g")}
    mags: dict[str, list[torch.Tensor]] = {n: [] for n in ("q", "k", "v", "beta", "g")}
    for t in reversed(range(L)):
        Sp, St, Et, Ep = Sp_all[t], S_all[t], E_all[t], E_prev[t]
        kt, bt = k[:, t], beta[:, t, None]  # [H, K], [H, 1]
        kn = k_norm[:, t, None]  # [H, 1]
        e = seq.v[:, t] - (kt[:, :, None] * Sp).sum(1)  # [H, V]
        pred_mag = (kt.abs()[:, :, None] * Sp.abs()).sum(1)  # |S'|^T |k|, [H, V]
        # S' = e^g S_{t-1} formed in fp32 errs by ε_d |S'|, by the subnormal e^g's 2^-150
        # |S_{t-1}|, and, where S' itself is below the normal range, by 2^-150 absolutely.
        sigma = (
            max_d[:, t, None, None] * Ep[:, None, :]
            + eps_d[:, t, None, None] * Sp.abs()
            + under_d * (S_prev[t].abs() + 1)
        )
        de = (
            kn * max_d[:, t, None] * Ep
            + (g(K + 1) + eps_d[:, t, None] + eps_k) * (seq.v[:, t].abs() + pred_mag)
            + under_d * kt.abs().sum(-1, keepdim=True)
        )
        lam_k = (Lam * kt[:, :, None]).sum(1)  # Λ^T k, [H, V]
        lam_k_mag = (Lam.abs() * kt.abs()[:, :, None]).sum(1)
        # dq (before the L2-norm chain)
        do_t = do[:, t]
        dq_mag = scale * (St.abs() * do_t.abs()[:, None, :]).sum(-1)  # [H, K]
        dq_b = scale * (Et * do_t.abs()).sum(-1, keepdim=True) + g(V + 2) * dq_mag
        # dv
        dv_mag = bt * lam_k_mag
        dv_b = bt * (kn * F + (g(K + 2) + eps_k) * lam_k_mag)
        # dbeta
        db_mag = (lam_k_mag * e.abs()).sum(-1)
        db_b = (kn * F * e.abs() + lam_k_mag * de).sum(-1) + (g(K + V + 2) + 2 * eps_k) * db_mag
        # dk (before the L2-norm chain)
        dk_mag = bt * (
            (Lam.abs() * e.abs()[:, None, :]).sum(-1) + (Sp.abs() * lam_k_mag[:, None, :]).sum(-1)
        )
        dk_b = (
            bt
            * (
                (F * e.abs()).sum(-1, keepdim=True)
                + (Lam.abs() * de[:, None, :]).sum(-1)
                + (sigma * lam_k.abs()[:, None, :]).sum(-1)
                + (Sp.abs() * (kn * F)[:, None, :]).sum(-1)
            )
            + (g(K + V + 4) + 2 * eps_k) * dk_mag
        )
        # dg
        Lam_p = Lam - bt[:, :, None] * kt[:, :, None] * lam_k[:, None, :]
        dLam_p = F[:, None, :] * (1 + bt[:, :, None] * kt.abs()[:, :, None] * kn[:, :, None])
        # Λ' = Λ - β k (k^T Λ) can cancel (β ||k||² = 1): its rounding scales with the terms.
        Lam_p_terms = Lam.abs() + bt[:, :, None] * kt.abs()[:, :, None] * lam_k_mag[:, None, :]
        dg_mag = (Sp.abs() * Lam_p_terms).sum(-1)  # [H, K]
        dg_b = (sigma * Lam_p.abs() + Sp.abs() * dLam_p).sum(-1) + g(V + K + 4) * dg_mag
        if stored:
            # States recomputed from the stored corrections û_j: each errs by u_I |û_j|, the
            # sum by γ_{t+2}; dk's partial (Λ e β, from û) and dβ (dv · û) are read back from
            # u_I storage, and dk's correction reads the stored dv against S_{t-1}.
            u_I = units.inter
            recomputed = (g(t + 2) + u_I) * summed[t]
            before = (g(t + 2) + u_I) * (summed[t - 1] if t else S_prev[0].abs())
            dq_b = dq_b + scale * (recomputed * do_t.abs()[:, None, :]).sum(-1)
            dk_b = (
                dk_b
                + 2 * u_I * dk_mag
                + bt
                * (
                    (before * lam_k_mag[:, None, :]).sum(-1)
                    + u_I * (S_prev[t].abs() * lam_k_mag[:, None, :]).sum(-1)
                )
            )
            db_b = db_b + u_I * db_mag
        if l2norm_qk:
            dq_b, dq_mag = l2norm_chain(raw_q[:, t], q[:, t], dq_b, dq_mag, units, eps_k)
            dk_b, dk_mag = l2norm_chain(raw_k[:, t], kt, dk_b, dk_mag, units, eps_k)
        for name, bound, mag in (
            ("q", dq_b, dq_mag),
            ("k", dk_b, dk_mag),
            ("v", dv_b, dv_mag),
            ("beta", db_b, db_mag),
            ("g", dg_b, dg_mag),
        ):
            out[name].append(bound + underflow)
            mags[name].append(mag)
        # Λ_{t-1} = D_t Λ'_t + s q_{t-1} do_{t-1}^T (dS_0 = D_1 Λ'_1 at t = 0)
        step_mag = d[:, t, :, None] * (
            Lam.abs() + bt[:, :, None] * kt.abs()[:, :, None] * lam_k_mag[:, None, :]
        )
        Lam = d[:, t, :, None] * Lam_p
        # k enters A_t^T twice (β k (k^T Λ)): an in-kernel normalised k's ε_k on each.
        k_part = d[:, t, :, None] * bt[:, :, None] * kt.abs()[:, :, None] * lam_k_mag[:, None, :]
        local = (
            g(K + 6) * step_mag
            + 2 * eps_k * k_part
            + eps_d[:, t, None, None] * Lam.abs()
            + under_d * Lam_p.abs()
            + (K + 8) * units.under
        )
        if t:
            outer = scale * q[:, t - 1, :, None] * do[:, t - 1, None, :]
            Lam = Lam + outer
            local = local + (g(K + 6) + eps_k) * outer.abs()
        F = rho[:, t, None] * F + local.norm(dim=1)
    result: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in out:
        bounds, magnitudes = out[name][::-1], mags[name][::-1]
        if not bounds:
            continue
        result[name] = (torch.stack(bounds, 1), torch.stack(magnitudes, 1))
    result["initial_state"] = (F[:, None, :].expand(H, K, V).clone(), Lam.abs())
    return result


def backward_bounds(
    problem: DeltaProblem,
    recipe: DeltaRecipe,
    *,
    do: torch.Tensor,
    d_final_state: torch.Tensor | None,
    causal_exact: bool = True,
) -> dict[str, TensorBound]:
    """Return a `TensorBound` per gradient (``dq``, ``dk``, ``dv``, ``dbeta``, ``dg``, ...).

    The recurrent recipe's bound is this module's; the chunk (WY) recipe's, through the
    triangular inverse, is `linattn_verify.delta.chunk_gradient_bounds.chunk_backward_bounds`
    (``causal_exact=False``: for a kernel that may invert with a pivoting solver).
    """
    home = problem.q.device
    judge = judging_device(home)
    problem, do = problem_on(problem, judge), do.to(judge)
    d_final_state = None if d_final_state is None else d_final_state.to(judge)
    judged = _judged_bounds(problem, recipe, do, d_final_state, causal_exact=causal_exact)
    return {name: bound_on(b, home) for name, b in judged.items()}


def _judged_bounds(
    problem: DeltaProblem,
    recipe: DeltaRecipe,
    do: torch.Tensor,
    d_final_state: torch.Tensor | None,
    *,
    causal_exact: bool,
) -> dict[str, TensorBound]:
    """`backward_bounds` on the device ``problem`` is on."""
    if recipe.form == "chunk":
        from linattn_verify.delta.chunk_gradient_bounds import chunk_backward_bounds

        return chunk_backward_bounds(
            problem, recipe, do=do, d_final_state=d_final_state, causal_exact=causal_exact
        )
    units = Units.of(recipe, problem.q.dtype)
    _, _, _, K, V = problem.shape

    def one(
        seq: DeltaSequence, q: torch.Tensor, k: torch.Tensor, do: torch.Tensor, dS: torch.Tensor
    ) -> dict[str, Any]:
        stored = recipe.stored_corrections
        return _sequence(seq, q, k, do, dS, problem.scale, units, problem.l2norm_qk, stored)

    # A scalar gate's dg sums the per-dimension terms: K more roundings.
    most = group_size(problem, per_head_elements(problem, recipe))
    return assemble_gradient_bounds(
        problem, units, do, d_final_state, one, count=K + V + 6, gate_sum=units.gamma(K), most=most
    )


__all__ = ["backward_bounds"]
