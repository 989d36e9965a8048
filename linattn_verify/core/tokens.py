# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The token layout every family's problem shares, and the argument checks that build it.

``[B, T, H, ...]`` tensors with packed sequences (``cu_seqlens``); the checks raise
`InvalidArgument` naming the argument and what was expected, so every family's messages read
alike.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any, TypeVar

import torch

from linattn_verify.errors import InvalidArgument

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""Input dtypes the function is defined for."""


TokensT = TypeVar("TokensT", bound="PackedTokens")


class PackedTokens:
    """The token layout the problems of every family share.

    ``[B, T, H, ...]`` tensors, a gate g ``[B, T, H]`` or ``[B, T, H, K]`` (or `None`), and
    packed sequences (``cu_seqlens``). A mixin for the frozen problem dataclasses (`Problem`,
    `linattn_verify.delta.DeltaProblem`): it holds no fields of its own, only what follows from
    q, v, g and ``cu_seqlens``.
    """

    q: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    cu_seqlens: torch.Tensor | None

    def to(
        self: TokensT, dtype: torch.dtype | None, device: torch.device | str | None = None
    ) -> TokensT:
        """The same problem with every floating tensor converted (exactly, for float64).

        ``dtype`` `None` keeps each tensor's own (a move to ``device`` only). ``cu_seqlens``
        (integers) stays as it is.
        """
        converted = {
            f.name: value.to(device=device or value.device, dtype=dtype or value.dtype)
            for f in fields(self)  # type: ignore[arg-type]
            if isinstance(value := getattr(self, f.name), torch.Tensor)
            and value.is_floating_point()
        }
        return replace(self, **converted)  # type: ignore[type-var]

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """``(B, T, H, K, V)``."""
        B, T, H, K = self.q.shape
        return B, T, H, K, self.v.shape[-1]

    @property
    def vector_gate(self) -> bool:
        """Whether g is a vector gate ``[B, T, H, K]`` (one decay per key dimension)."""
        return self.g is not None and self.g.ndim == 4

    @property
    def num_sequences(self) -> int:
        """N: the number of independent sequences (B, or len(cu_seqlens) - 1)."""
        if self.cu_seqlens is None:
            return int(self.q.shape[0])
        return int(self.cu_seqlens.numel()) - 1

    def sequences(self) -> Iterator[tuple[int, int, int, int]]:
        """Yield ``(n, b, start, end)`` per sequence: its state row, batch row and token span."""
        T = self.q.shape[1]
        if self.cu_seqlens is None:
            for b in range(self.q.shape[0]):
                yield b, b, 0, T
        else:
            bounds = self.cu_seqlens.tolist()
            for n in range(len(bounds) - 1):
                yield n, 0, int(bounds[n]), int(bounds[n + 1])


def _fail(message: str) -> InvalidArgument:
    return InvalidArgument(message)


def check_tensor(name: str, x: Any, ndim: int, layout: str) -> torch.Tensor:
    """Return ``x`` if it is a finite floating tensor of ``ndim`` dims (``layout``), else raise."""
    if not isinstance(x, torch.Tensor):
        raise _fail(f"Expected {name} to be a torch.Tensor {layout} but got {type(x).__name__}.")
    if x.ndim != ndim:
        raise _fail(f"Expected {name} of shape {layout} but got shape {tuple(x.shape)}.")
    if x.dtype not in FLOAT_DTYPES:
        raise _fail(
            f"Expected {name} to be float16, bfloat16, float32 or float64 but got dtype={x.dtype}."
        )
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise _fail(f"Expected every element of {name} to be finite, but it holds NaN or inf.")
    return x


def check_flag(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool, else raise `InvalidArgument` naming ``name``."""
    if not isinstance(value, bool):
        raise _fail(f"Expected {name} to be a bool but got {name}={value!r}.")
    return value


def check_real(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite real number (not a bool), else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(f"Expected {name} to be a real number but got {name}={value!r}.")
    if not math.isfinite(float(value)):
        raise _fail(f"Expected {name} to be finite but got {name}={value!r}.")
    return float(value)


def check_cu_seqlens(cu_seqlens: Any, B: int, T: int) -> torch.Tensor:
    """Return packed-sequence bounds ``[N+1]`` (int64, CPU) rising from 0 to T, B == 1; or raise."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.ndim != 1:
        raise _fail(f"Expected cu_seqlens to be a 1-D integer tensor [N+1] but got {cu_seqlens!r}.")
    dtype = cu_seqlens.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise _fail(f"Expected cu_seqlens to hold integers but got dtype={cu_seqlens.dtype}.")
    if cu_seqlens.numel() < 2:
        raise _fail(f"Expected cu_seqlens to have N+1 >= 2 entries but got {cu_seqlens.numel()}.")
    if B != 1:
        raise _fail(f"Got B={B} with cu_seqlens, but packed sequences need B == 1.")
    bounds = cu_seqlens.to(device="cpu", dtype=torch.int64)
    if int(bounds[0]) != 0 or int(bounds[-1]) != T:
        raise _fail(
            f"Expected cu_seqlens to start at 0 and end at T={T} but got "
            f"cu_seqlens[0]={int(bounds[0])}, cu_seqlens[-1]={int(bounds[-1])}."
        )
    if bool((bounds[1:] < bounds[:-1]).any()):
        raise _fail(f"Expected cu_seqlens to be non-decreasing but got {bounds.tolist()}.")
    return bounds
