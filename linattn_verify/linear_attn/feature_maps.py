# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Feature maps φ and their derivatives, in whatever precision the caller's tensors hold.

Elementwise maps keep the key dimension K. Lifted maps (docs/design.md §3) take a key
dimension K to a feature dimension F, so the state is F x V:

* ``taylor2`` (Based): φ(x) = (1, x_1..x_K, (x_i x_j / √2) for i, j in 1..K, i-major), F = 1 + K
  + K², so that φ(x)·φ(y) = 1 + x·y + (x·y)²/2, the second-order Taylor polynomial of exp.
* ``rebased``: φ(x) = (x_i x_j) i-major, F = K², so that φ(x)·φ(y) = (x·y)².
* ``favor+`` (Performer positive random features): φ(x) = exp(W x - |x|²/2) / √m with the
  problem's projection W ``[m, K]``, F = m.
* ``softmax`` over the feature dimension: φ(x)_i = exp(x_i) / Σ_j exp(x_j), F = K (the query
  map of "efficient attention", linear-attention-transformer's and performer-pytorch's
  ``no_projection``); its Jacobian diag(φ) - φ φ^T is a matrix, so it goes the lifted way.

The elementwise ``exp`` (those libraries' key map) is φ(x) = e^x.

For ``taylor2`` and ``rebased`` (`linattn_verify.typing.SCORE_MAPS`) the scale multiplies the query
*before* the map, so the attention weight is κ(s q·k) (as Based and ReBased define it), and no
scale multiplies the result; every other map keeps the scale outside: s φ(q)·φ(k).
"""

from __future__ import annotations

import math

import torch

from linattn_verify.typing import LIFTED_MAPS, FeatureMap

INV_SQRT2 = 0.5**0.5
"""The quadratic features' factor 1/√2 (float64: relative error below 2^-53)."""


def feature_dim(feature_map: FeatureMap, K: int, m: int = 0) -> int:
    """Return F, the number of features φ makes of a K-vector (m, the rows of W, for favor+)."""
    if feature_map == "taylor2":
        return 1 + K + K * K
    if feature_map == "rebased":
        return K * K
    if feature_map == "favor+":
        return m
    return K  # elementwise maps, and softmax


def _outer(x: torch.Tensor) -> torch.Tensor:
    """(x_i x_j), i-major, as the last dimension ``[..., K*K]``."""
    return (x[..., :, None] * x[..., None, :]).flatten(-2)


def favor_exponent(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Y = W x - |x|²/2 ``[..., m]``, in x's dtype (W converted exactly or rounded to it)."""
    W = weights.to(device=x.device, dtype=x.dtype)
    # An elementwise product and sum, not a matmul: a matmul's summation order depends on the
    # batch's shape and strides, and the torch references must round alike for any layout.
    return (x[..., None, :] * W).sum(-1) - 0.5 * (x * x).sum(-1, keepdim=True)


def lift(x: torch.Tensor, feature_map: FeatureMap, weights: torch.Tensor | None) -> torch.Tensor:
    """Return φ(x) ``[..., F]`` of a lifted map, computed in x's dtype."""
    if feature_map == "taylor2":
        ones = torch.ones_like(x[..., :1])
        return torch.cat([ones, x, _outer(x) * INV_SQRT2], dim=-1)
    if feature_map == "rebased":
        return _outer(x)
    if feature_map == "softmax":
        return torch.softmax(x, dim=-1)
    assert feature_map == "favor+"
    assert weights is not None, "favor+ needs its projection W [m, K]"
    return torch.exp(favor_exponent(x, weights)) / math.sqrt(weights.shape[0])


def apply_feature_map(
    x: torch.Tensor, feature_map: FeatureMap, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Return φ(x): elementwise, or ``[..., F]`` for a lifted map (`lift`).

    elu1 is ``where(x > 0, x + 1, exp(x))``.
    """
    if feature_map in LIFTED_MAPS:
        return lift(x, feature_map, weights)
    if feature_map == "identity":
        return x
    if feature_map == "relu":
        return torch.relu(x)
    if feature_map == "exp":
        return torch.exp(x)
    # Clamping keeps exp finite on the branch `where` discards, so autograd never sees inf * 0.
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


def lift_sensitivity(
    x: torch.Tensor, feature_map: FeatureMap, weights: torch.Tensor | None, features: torch.Tensor
) -> torch.Tensor:
    """Return |J_φ(x)| 1 ``[..., F]``: each feature's first-order move when all of x moves by 1.

    favor+ reads its Jacobian φ_f (W_fi - x_i) off ``features``; softmax's row i of
    diag(φ) - φ φ^T sums to 2 φ_i (1 - φ_i) in absolute value.
    """
    if feature_map == "softmax":
        return 2 * features.abs() * (1 - features).abs()
    if feature_map in ("taylor2", "rebased"):
        a = x.abs()
        quad = (a[..., :, None] + a[..., None, :]).flatten(-2)
        if feature_map == "rebased":
            return quad
        ones = torch.ones_like(x)
        return torch.cat([torch.zeros_like(x[..., :1]), ones, INV_SQRT2 * quad], dim=-1)
    assert feature_map == "favor+"
    assert weights is not None, "favor+ needs its projection W [m, K]"
    W = weights.to(device=x.device, dtype=x.dtype)
    return features.abs() * (W - x[..., None, :]).abs().sum(-1)


def lift_vjp(
    x: torch.Tensor,
    cotangent: torch.Tensor,
    feature_map: FeatureMap,
    weights: torch.Tensor | None,
    *,
    absolute: bool = False,
    features: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return J_φ(x)^T c ``[..., K]`` for a cotangent c ``[..., F]`` of a lifted map's features.

    With ``absolute`` it returns |J_φ(x)|^T c instead (c >= 0): the magnitude that carries a
    bound on the features' gradient back to x. favor+ takes its features from ``features`` when
    given (a stabilised query's φ e^{-c}, whose Jacobian is e^{-c} J_φ), else computes φ(x).
    Entries of J: taylor2 1 (linear features) and (δ_ai x_b + δ_bi x_a)/√2 (quadratic); rebased
    the same without 1/√2; favor+ φ_f (W_fi - x_i); softmax φ_i (δ_ij - φ_j), so that
    J^T c = φ ⊙ (c - φ·c) and |J|^T c = φ ⊙ ((1 - 2φ) ⊙ c + φ·c) (each term of it >= 0).
    """
    mag = torch.abs if absolute else (lambda t: t)
    K = x.shape[-1]
    if feature_map == "softmax":
        p = torch.softmax(x, dim=-1) if features is None else features
        if absolute:
            p = p.abs()
            return p * ((1 - 2 * p) * cotangent + (p * cotangent).sum(-1, keepdim=True))
        return p * (cotangent - (p * cotangent).sum(-1, keepdim=True))
    if feature_map in ("taylor2", "rebased"):
        quad = cotangent[..., -K * K :].reshape(*cotangent.shape[:-1], K, K)
        sym = quad + quad.transpose(-1, -2)
        grad: torch.Tensor = (sym @ mag(x)[..., None])[..., 0]
        if feature_map == "taylor2":
            return cotangent[..., 1 : 1 + K] + INV_SQRT2 * grad
        return grad
    assert feature_map == "favor+"
    assert weights is not None, "favor+ needs its projection W [m, K]"
    W = weights.to(device=x.device, dtype=x.dtype)
    phi = lift(x, feature_map, weights) if features is None else features
    pc = phi * cotangent
    if absolute:
        return (pc[..., :, None] * (W - x[..., None, :]).abs()).sum(-2)
    return pc @ W - pc.sum(-1, keepdim=True) * x


def feature_map_derivative(x: torch.Tensor, feature_map: FeatureMap) -> torch.Tensor:
    """Return φ'(x) of an elementwise map (relu' and elu1' take x > 0 as 1, else 0 / exp(x))."""
    if feature_map == "identity":
        return torch.ones_like(x)
    if feature_map == "relu":
        return (x > 0).to(x.dtype)
    if feature_map == "exp":
        return torch.exp(x)
    return torch.where(x > 0, torch.ones_like(x), torch.exp(torch.clamp(x, max=0)))


def vanishes(denominator: torch.Tensor) -> torch.Tensor:
    """Whether a normalizer counts as zero: below the smallest normal number of its dtype.

    In a computation of a given precision such a denominator cannot be certified (its underflow
    error alone exceeds it) and its reciprocal overflows, so the zero-denominator convention of
    `linattn_verify.linear_attn.semantics` applies to it. In float64 this only moves exact zeros by
    2^-1022.
    """
    return denominator.abs() < torch.finfo(denominator.dtype).tiny


__all__ = [
    "INV_SQRT2",
    "apply_feature_map",
    "favor_exponent",
    "feature_dim",
    "feature_map_derivative",
    "lift",
    "lift_sensitivity",
    "lift_vjp",
    "vanishes",
]
