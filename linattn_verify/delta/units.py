# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The unit roundoffs of a delta-rule recipe on inputs of one dtype (docs/error-model.md §8).

Shared by the forward bounds (`linattn_verify.delta.bounds`) and both gradient bound models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.core.rounding import UNIT_ROUNDOFF, gamma
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.typing import dtype_name

SMALLEST_SUBNORMAL = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}
"""Spacing of the subnormals of each output dtype: rounding o there errs by half of it."""


def _half_subnormal(u: float) -> float:
    """Half the smallest subnormal of the format whose unit roundoff is ``u``.

    fp32 and wider formats get fp32's (the arithmetic's range); bf16 shares fp32's range.
    """
    return {2.0**-11: 2.0**-25, 2.0**-8: 2.0**-134}.get(u, 2.0**-150)


@dataclass(frozen=True)
class Units:
    """The unit roundoffs of one recipe on inputs of one dtype (docs/error-model.md §8)."""

    u: float  # elementwise arithmetic
    acc: float  # dot accumulation
    op: float  # relative error of a tf32 operand (0 for IEEE)
    inter: float  # W, U, Vn, normalised q/k stored
    inverse: float  # T stored
    state: float  # the chunk-boundary state read by the dots
    out: float  # o rounded to the input dtype
    casts: float  # casts_on_path further roundings, in total
    floor: float  # absolute rounding error of a subnormal output
    under: float  # absolute error of one arithmetic operation in the subnormal range
    initial: float  # S_0 rounded where it is read (a 16-bit state, or 16-bit arithmetic)

    @classmethod
    def of(cls, recipe: DeltaRecipe, dtype: torch.dtype) -> Units:
        """Resolve ``recipe``'s storage formats for inputs of ``dtype``."""
        name = dtype_name(dtype)
        inter = recipe.u_storage("intermediate_dtype", dtype)
        u = recipe.u(dtype)
        state = recipe.u_storage("state_dtype", dtype)
        return cls(
            u=u,
            acc=max(u, recipe.u_acc(dtype)),
            op=recipe.u_operand,
            inter=inter,
            inverse=recipe.u_storage("inverse_dtype", dtype),
            state=state,
            out=max(UNIT_ROUNDOFF.get(name, u), u),
            casts=recipe.casts_on_path * inter,
            floor=SMALLEST_SUBNORMAL.get(name, 0.0) / 2,
            # Half the smallest subnormal of the arithmetic's format (fp16's for fp16 arithmetic).
            under=2.0**-1075 if recipe.accumulation == "float64" else _half_subnormal(u),
            # An fp32 S_0 read into 16-bit arithmetic or a 16-bit state rounds once.
            initial=max(state, u if u > 2.0**-24 else 0.0),
        )

    def gamma(self, n: int) -> float:
        """γ_n = n u / (1 - n u) with the accumulation's u (inf where n u >= 1)."""
        return gamma(n, self.acc)

    def l2norm(self, K: int, normalized: bool) -> float:
        """ε_k: the relative error of an L2-normalised component, 0 without the norm.

        Σx² within γ_K, + eps, sqrt and divide one rounding each (the sqrt halves the error
        under it), then the store.
        """
        return self.gamma(K + 3) + self.inter if normalized else 0.0


__all__ = ["SMALLEST_SUBNORMAL", "Units"]
