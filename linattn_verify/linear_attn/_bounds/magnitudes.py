# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Two elementwise facts the bounds read of their factors: max(1, |x|), and a known zero.

A leaf module: the forward terms (`_bounds.vector`), the gradient bounds and the
lost-intermediate charges (`_bounds.lost`) all read these, and `_bounds.lost` itself builds on
the forward pieces.
"""

from __future__ import annotations

import torch


def at_least_one(x: torch.Tensor) -> torch.Tensor:
    """max(1, |x|), elementwise."""
    return x.abs().clamp(min=1.0)


def known_zero(x: torch.Tensor) -> bool:
    """``x`` is one zero expanded to its shape (an exact feature map's error): O(1).

    Contractions with it are zero; skipping them adds exactly 0 to every (non-negative) bound.
    """
    if x.numel() == 0:
        return True
    if any(stride != 0 for stride in x.stride()):
        return False
    return float(x[(0,) * x.ndim]) == 0.0


__all__ = ["at_least_one", "known_zero"]
