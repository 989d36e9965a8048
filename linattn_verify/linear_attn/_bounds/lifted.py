# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Errors of a kernel's lifted features and the chain rule back through them (error-model §2.8).

A kernel applies a lifted map (`linattn_verify.linear_attn.feature_maps`) in its fp32 arithmetic
(unit u); for the score maps it first multiplies the query by the scale (one rounding, and one more
for the scale itself, rounded to fp32: δ_x = 2u on every query element, 0 on keys). First order:

* taylor2: the constant 1 is exact; a linear feature x_i carries δ_x|x_i|; a quadratic feature
  fl(fl(x_i x_j)·fl(1/√2)) carries (2δ_x + 3u)|x_i x_j|/√2.
* rebased: fl(x_i x_j) carries (2δ_x + u)|x_i x_j|.
* favor+: y_f = w_f·x - |x|²/2 in fp32 has the absolute error E_f = γ_{K+2}(Σ_i|W_fi x_i| +
  |x|²/2) + u Σ_i|W_fi x_i| + u|y_f| (a K-dot, a K-sum, a halving and a subtraction, and W
  itself rounded to fp32 when given wider); exp turns it into the
  relative error E_f, plus ε_exp of its argument, plus 2u for the multiply by fl(1/√m). A
  stabilised query (`linattn_verify.linear_attn.semantics.Problem.stabilised_queries`) subtracts the
  row's largest computed exponent ĉ: whatever ĉ is, it multiplies the row's features by one factor
  that cancels exactly in o, so only the subtraction (u|y_f - c|) adds; ε_exp is charged for the
  larger of |y_f| and |y_f - c|, which covers a kernel that does not stabilise as well.

* softmax: e_i = exp(x_i - m) over the row's maximum m (exact), then e_i / Σ_j e_j. The
  subtraction rounds (u|x_i - m|, which exp turns into a relative error), exp adds
  ε_exp(x_i - m), the sum γ_{K-1} and the largest relative error of its terms, the division u.
  A kernel that does not subtract the maximum exponentiates x_i itself: both are covered by
  charging a_i = max(|x_i|, |x_i - m|) for the argument.

Every feature can also underflow (an absolute error of one smallest normal).

The score maps' parallel form may skip the features and evaluate κ(x̂), x̂ = fl(s q·k), directly.
Its error |κ'(x)||x̂ - x| + (κ's own roundings) is at most γ_{2K+3}(1 + a + a²/2) for taylor2 and
γ_{2K+1} a² for rebased (a = s Σ_i |q_i k_i|), both covered by a feature dot of `dot_length`
terms charged on the feature magnitudes Σ_f |φ_f(q)||φ_f(k)| = 1 + a + a²/2 and a².

Gradients reach x through dx = p J_φ(x)^T dφ (p the prescale): its magnitude is p|J|^T M_φ, and
its bound p(|J|^T B_φ + (δ_x + 2u + γ_n)|J|^T M_φ), with n = 2K + 2 terms in each row of J^T dφ
(taylor2, rebased) or m + 1 (favor+: Σ_f φ_f dφ_f (W_fi - x_i)), plus for favor+ |ΔJ|^T M_φ
with ΔJ_fi = Δφ_f |W_fi - x_i| (its Jacobian is built on the features, errors included).
"""

from __future__ import annotations

import torch

from linattn_verify.core.rounding import gamma
from linattn_verify.linear_attn._bounds.units import exp_error
from linattn_verify.linear_attn.feature_maps import favor_exponent, lift_vjp
from linattn_verify.linear_attn.semantics import Problem


def prescale_error(p: Problem, u: float, *, query: bool) -> float:
    """δ_x: the relative error of the map's input (the scaled query of a score map)."""
    return 2 * u if query and p.query_prescale != 1.0 else 0.0


def map_input(p: Problem, x: torch.Tensor, *, query: bool) -> torch.Tensor:
    """The vector the map is applied to: s q for a score map's queries, else x itself."""
    return x * p.query_prescale if query else x


def dot_length(p: Problem) -> int:
    """The rounding count a feature dot φ(q)·φ(k) is charged (covers the fused score form)."""
    K, F = p.q.shape[-1], p.feature_dim
    if p.feature_map == "taylor2":
        return max(F, 2 * K + 3)
    if p.feature_map == "rebased":
        return max(F, 2 * K + 1)
    return F


def feature_error(
    p: Problem, x: torch.Tensor, features: torch.Tensor, u: float, underflow: float, *, query: bool
) -> torch.Tensor:
    """Δφ ``[..., F]``: absolute error of a kernel's lifted features of x (the raw q or k rows).

    ``features`` are the exact features the bound uses (`Problem.query_features`).
    """
    d = prescale_error(p, u, query=query)
    K = x.shape[-1]
    feature_map = p.map_of(query=query)
    if feature_map == "softmax":
        a = torch.maximum(x.abs(), (x - x.amax(-1, keepdim=True)).abs())
        per = exp_error(a, u) + u * a  # [..., K]
        rel = per + per.amax(-1, keepdim=True) + gamma(max(K - 1, 0), u) + u
        return rel * features.abs() + underflow
    if feature_map in ("taylor2", "rebased"):
        quad_rel = 2 * d + (3 * u if feature_map == "taylor2" else u)
        rel = torch.full_like(features, quad_rel)
        if feature_map == "taylor2":
            rel[..., 0] = 0.0
            rel[..., 1 : 1 + K] = d
        return rel * features.abs() + underflow
    assert p.feature_weights is not None
    W = p.feature_weights.to(x.dtype)
    y = favor_exponent(x, p.feature_weights)
    # K+2 roundings of the dot, the sum of squares, the halving and the subtraction, plus one
    # more on each product for W itself rounded to the kernel's arithmetic (a float64 W to fp32).
    Wx = x.abs() @ W.abs().transpose(0, 1)
    E = gamma(K + 2, u) * (Wx + 0.5 * (x * x).sum(-1, True)) + u * Wx
    E = E + u * y.abs()
    arg = y.abs()
    if query and p.stabilised_queries:
        shifted = y - y.amax(-1, keepdim=True)
        E = E + u * shifted.abs()
        arg = torch.maximum(arg, shifted.abs())
    rel = E + (4 + 2.4 * arg) * u + 2 * u
    return rel * features.abs() + underflow


def chain(
    p: Problem,
    x: torch.Tensor,
    M_f: torch.Tensor,
    B_f: torch.Tensor,
    u: float,
    *,
    query: bool,
    features: torch.Tensor,
    feature_err: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, B) of dx from the magnitude and bound of dφ(x) ``[..., F]`` (module docstring).

    ``features`` are the exact features of x the bound uses and ``feature_err`` their errors
    (`feature_error`); favor+'s Jacobian φ_f (W_fi - x_i) is built on both.
    """
    xin = map_input(p, x, query=query)
    pre = abs(p.query_prescale) if query else 1.0
    W = p.feature_weights
    feature_map = p.map_of(query=query)

    def vjp(c: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        out = lift_vjp(xin, c, feature_map, W, absolute=True, features=feats)
        if query and p.stabilised_queries:
            # Σ_f φ_f dφ_f = 0 exactly there, so a kernel may drop the -x_i Σ_f φ_f dφ_f term
            # of J^T dφ and form Σ_f φ_f dφ_f W_fi alone: charge |W_fi| as well as |W_fi - x_i|.
            out = out + lift_vjp(
                torch.zeros_like(xin), c, feature_map, W, absolute=True, features=feats
            )
        return pre * out

    JM = vjp(M_f, features)
    JB = vjp(B_f, features)
    K = x.shape[-1]
    terms = p.feature_dim + 1 if feature_map == "favor+" else 2 * K + 2
    rel = prescale_error(p, u, query=query) + 2 * u + gamma(terms, u)
    B = JB + rel * JM
    if feature_map == "favor+":
        B = B + vjp(M_f, feature_err)
    elif feature_map == "softmax":
        # The kernel's Jacobian is built on its features φ + Δφ: |ΔJ_ij| <= |Δφ_i||δ_ij - φ_j|
        # + φ_i|Δφ_j|, so |ΔJ|^T M <= Δφ·M + |Δφ_j| (φ·M) (first order, |δ_ij - φ_j| <= 1).
        phi = features.abs()
        B = B + pre * (
            (feature_err * M_f).sum(-1, keepdim=True)
            + feature_err * (phi * M_f).sum(-1, keepdim=True)
        )
    return JM, B


__all__ = ["chain", "dot_length", "feature_error", "gamma", "map_input", "prescale_error"]
