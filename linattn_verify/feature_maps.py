# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Feature maps φ and their derivatives, in whatever precision the caller's tensors hold."""

from __future__ import annotations

import torch

from linattn_verify.typing import FeatureMap


def apply_feature_map(x: torch.Tensor, feature_map: FeatureMap) -> torch.Tensor:
    """Return φ(x) elementwise; ``elu1`` is ``where(x > 0, x + 1, exp(x))``."""
    if feature_map == "identity":
        return x
    if feature_map == "relu":
        return torch.relu(x)
    # Clamping keeps exp finite on the branch `where` discards, so autograd never sees inf * 0.
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


def feature_map_derivative(x: torch.Tensor, feature_map: FeatureMap) -> torch.Tensor:
    """Return φ'(x) elementwise (relu' and elu1' take the x > 0 branch as 1, else 0 / exp(x))."""
    if feature_map == "identity":
        return torch.ones_like(x)
    if feature_map == "relu":
        return (x > 0).to(x.dtype)
    return torch.where(x > 0, torch.ones_like(x), torch.exp(torch.clamp(x, max=0)))


def vanishes(denominator: torch.Tensor) -> torch.Tensor:
    """Whether a normalizer counts as zero: below the smallest normal number of its dtype.

    In a computation of a given precision such a denominator cannot be certified (its underflow
    error alone exceeds it) and its reciprocal overflows, so the zero-denominator convention of
    `linattn_verify.semantics` applies to it. In float64 this only moves exact zeros by 2^-1022.
    """
    return denominator.abs() < torch.finfo(denominator.dtype).tiny


__all__ = ["apply_feature_map", "feature_map_derivative", "vanishes"]
