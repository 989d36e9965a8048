# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The triangular inverse of a chunk of the delta rule and the magnitude its error is charged on.

The chunk (WY / UT) form inverts L = I + strict_tril(diag(β) K K^T ⊙ e^{G_i - G_j}) per chunk;
how a kernel computes T = L^-1 (forward substitution, a pivoting solver, or a product form)
decides how far its computed T̂ may be from T (docs/error-model.md §8.10). The forward bounds
(`linattn_verify.delta.bounds`) and the gradient bounds
(`linattn_verify.delta.chunk_gradient_bounds`) charge their T's on `inverse_magnitude`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from linattn_verify.delta.kernel import DeltaRecipe

PIVOT_NUDGE = 2.0**-10
"""How close to a tie a pivot candidate may be and still be taken the other way by the kernel's
fp32 factorization: `inverse_magnitude` also factors L with its off-diagonal grown by this."""

InverseKind = Literal["substitution", "pivoting", "products"]
"""How a chunk's triangular inverse is computed, as far as its error is concerned
(`inverse_magnitude`)."""


def inverse_kind(recipe: DeltaRecipe, *, causal_exact: bool) -> InverseKind:
    """The inverse a kernel is charged for (`inverse_magnitude`).

    Its declared method; for ``substitution``, a pivoting solver when the kernel does not promise
    bit-exact causality (a general solver's row exchanges would break it).
    """
    if recipe.inverse_method == "products":
        return "products"
    return "substitution" if causal_exact else "pivoting"


def inverse_magnitude(
    L_off: torch.Tensor,
    T: torch.Tensor,
    *,
    kind: InverseKind = "substitution",
    L_abs: torch.Tensor | None = None,
) -> torch.Tensor:
    """M, the magnitude the error of a computed inverse T̂ of L = I + L_off is charged on.

    ``substitution``: forward substitution, a triangular solve or FLA's block merge satisfy
    |T̂ - T| <= γ_{2c} M with M = |T| (I + |L_off|) |T|, lower triangular (Higham Thm 8.5):
    T̂ is exactly 0 above the diagonal and the chunk's outputs are bitwise causal.

    ``pivoting``: a general solver, LU with partial pivoting (``torch.linalg.inv``, ``solve``:
    LAPACK getrf/getri, cuSOLVER), whose row exchanges mix the rows: X̂ L - I <= c u |X̂|
    |P^T L̂| |Û| (Higham §14.3), so |T̂ - T| <= γ_{3c} |T| |P^T L̂| |Û| |T|, a full matrix. The
    factors are evaluated in float64 on L, and on L with its off-diagonal grown by
    `PIVOT_NUDGE` (a near-tie the kernel's fp32 factorization may break the other way); M is
    the largest of the three, the pivoted ones doubled (γ_{3c} <= 2 γ_{2c}).

    ``products``: a Neumann or doubling product T = Π_k (I + (-N)^{2^k}), N = L_off, the powers
    by repeated squaring: every rounding of its m = ⌈log2 c⌉ squarings and m products is
    relative to the product of the absolute values around it, whose sum over the expansion is
    Π_k (I + |N|^{2^k}) = Σ_j |N|^j (|N| is nilpotent): |T̂ - T| <= γ_{2m(c+1)} Σ_j |N|^j,
    charged as (m + 1) Σ_j |N|^j against γ_{2c}. That sum grows like binomial coefficients
    where the entries of N exceed 1 (β near 2, parallel keys), far above |T|: such a kernel is
    that much less accurate than substitution (docs/error-model.md §8.10).

    Args:
        L_off: The strictly lower part of L, ``[..., c, c]``.
        T: The exact inverse L^-1.
        kind: How the kernel computes it. Default: `"substitution"`.
        L_abs: The magnitude of L_off's entries (the sums of |terms|, >= |L_off|).
            Default: `|L_off|`.
    """
    c = L_off.shape[-1]
    eye = torch.eye(c, dtype=L_off.dtype, device=L_off.device)
    N = L_off.abs() if L_abs is None else L_abs
    T_abs = T.abs()
    M = T_abs @ (eye + N) @ T_abs
    if kind == "substitution" or c < 2:
        return M
    if kind == "products":
        power, series = eye.expand_as(N), eye.expand_as(N)
        for _ in range(c - 1):
            power = power @ N
            series = series + power
        rounds = math.ceil(math.log2(c)) + 1
        return torch.maximum(M, rounds * series)
    for grow in (1.0, 1.0 + PIVOT_NUDGE):
        P, L_f, U_f = torch.linalg.lu(eye + grow * L_off)
        M = torch.maximum(M, 2 * T_abs @ (P @ L_f.abs() @ U_f.abs()) @ T_abs)
    return M


__all__ = ["PIVOT_NUDGE", "InverseKind", "inverse_kind", "inverse_magnitude"]
