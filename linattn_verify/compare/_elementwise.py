# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Element-wise pieces every comparison shares: the safe ratio and the worst element."""

from __future__ import annotations

import math

import torch

from linattn_verify.results import Worst


def safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Return num / den with 0/0 := 0 and x/0 := inf (an error where none is allowed)."""
    ratio = num / torch.where(den == 0, 1.0, den)
    return torch.where(den == 0, torch.where(num == 0, 0.0, torch.inf), ratio)


def argmax_index(score: torch.Tensor) -> tuple[int, ...]:
    """Index of the largest element of ``score`` (NaN counts as largest)."""
    flat = int(torch.argmax(torch.nan_to_num(score, nan=math.inf).reshape(-1)))
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), score.shape))


def worst_at(
    index: tuple[int, ...], actual: torch.Tensor, expected: torch.Tensor, allowed: torch.Tensor
) -> Worst:
    """The `Worst` element at ``index``."""
    return Worst(
        index=index,
        actual=float(actual[index]),
        expected=float(expected[index]),
        allowed=float(allowed[index]),
    )


def shape_problem(
    actual: object, expected: torch.Tensor, *, dtype: torch.dtype | None = None
) -> str | None:
    """Why ``actual`` cannot be compared with ``expected`` element-wise, else `None`."""
    if not isinstance(actual, torch.Tensor):
        return f"expected a tensor but got {type(actual).__name__}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"expected shape {tuple(expected.shape)} but got {tuple(actual.shape)}"
    if dtype is not None and actual.dtype != dtype:
        return f"expected dtype {dtype} but got {actual.dtype}"
    return None
