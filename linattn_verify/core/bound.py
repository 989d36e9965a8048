# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A tensor's exact value with its rigorous error bound: what every family's bounds return.

The comparison engine (`linattn_verify.compare`) judges a kernel's output element by element
against one of these, whichever family computed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

ZeroDenominator = Literal["zero", "ieee", "any"]
"""What a normalized kernel returns where the exact denominator s φ(q_t)^T z_t + eps is exactly 0
(the exact result is undefined there; docs/design.md §3): ``zero``: 0 (our kernels' convention);
``ieee``: the IEEE quotient of the computed zero denominator (NaN for 0/0, ±inf for x/0);
``any``: any value (nothing is judged there)."""

ZERO_DENOMINATORS: tuple[ZeroDenominator, ...] = get_args(ZeroDenominator)
"""The zero-denominator conventions a kernel may declare."""


@dataclass(frozen=True)
class Residual:
    """The pieces of the residual test for a normalized output (docs/error-model.md §2.3)."""

    numerator: torch.Tensor  # N, exact (float64), [B, T, H, V]
    denominator: torch.Tensor  # Z (eps included), [B, T, H, 1]
    numerator_bound: torch.Tensor  # B^N
    denominator_bound: torch.Tensor  # B^Z, [B, T, H, 1]
    rounding: float  # u_div + u_out
    absolute: float  # absolute rounding error of a tiny output (below the normal range)
    numerator_magnitude: torch.Tensor | None = None  # M^N, [B, T, H, V]
    denominator_magnitude: torch.Tensor | None = None  # M^Z (eps included), [B, T, H, 1]


@dataclass(frozen=True)
class TensorBound:
    """Reference value, rigorous bound and magnitude for every element of one tensor.

    Attributes:
        name: ``"o"``, ``"final_state"``, ``"dq"``, ...
        reference: The float64 oracle value.
        bound: The absolute error bound B (+inf where the element is unverifiable).
        magnitude: M, the same computation on absolute values (the scale of the rounding errors).
        count: The largest rounding count c among the element's terms (for ρ/√c).
        unit: u_acc, the unit ρ is measured in.
        verifiable: Elements whose forward bound is meaningful (B^Z < |Z|/2 where it applies).
        eps_influence: eps / Z per row for normalized outputs, else `None`.
        residual: The residual-test pieces for normalized outputs, else `None`.
        undefined: Elements whose exact value is undefined (an exactly zero exact denominator
            of their row, or a gradient element depending on one: `depends_on_rows`), or `None`
            (none). ``reference`` and ``bound`` there are those of the ``"zero"`` convention.
        zero_denominator: The convention the kernel declared for undefined elements (see
            `ZeroDenominator`); `linattn_verify.compare.compare` judges
            them by it. Default: `"zero"`.
    """

    name: str
    reference: torch.Tensor
    bound: torch.Tensor
    magnitude: torch.Tensor
    count: torch.Tensor
    unit: float
    verifiable: torch.Tensor
    eps_influence: torch.Tensor | None = None
    residual: Residual | None = None
    undefined: torch.Tensor | None = None
    zero_denominator: ZeroDenominator = "zero"
