# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Bugs in how a kernel meets memory, for a kernel of any family: wrappers of a correct kernel.

A correct kernel wrapped here is wrong only on the memory paths of real use (issue #26), which no
dense contiguous test shows: `last_dim_stride_ignored` walks the last dim of its tensor inputs
with ``ptr++`` (right for contiguous, transposed and sliced inputs, whose last stride is 1; wrong
for a strided last dim), `dense_cotangent_assumed` reads its cotangents as dense contiguous
tensors (wrong for ``o.sum()``'s expanded cotangent and for a transposed one). Loaded by path
from `bugs.py` and `delta_bugs.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def _last_stride_one(x: Any) -> Any:
    """Read a tensor stepping its last dim by 1 (``ptr++``), its other strides honoured."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return x
    return torch.as_strided(x, x.shape, (*x.stride()[:-1], 1), x.storage_offset())


def last_dim_stride_ignored(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` reading its positional tensors (q, k, v, g, beta) with last stride 1."""

    # wraps: the call is shaped by the wrapped kernel's signature, as the correct kernel's.
    @functools.wraps(fn)
    def kernel(*args: Any, **kw: Any) -> Any:
        gate = {"g": _last_stride_one(kw["g"])} if "g" in kw else {}
        return fn(*(_last_stride_one(x) for x in args), **{**kw, **gate})

    return kernel


class _DenseCotangent(torch.autograd.Function):
    """Identity forward; the backward reads its cotangent's storage as if it were contiguous."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        dense = torch.empty(grad.shape).stride()
        return torch.as_strided(grad, grad.shape, dense, grad.storage_offset())


def _dense_read(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_dense_read(t) for t in x)
    return _DenseCotangent.apply(x) if isinstance(x, torch.Tensor) else x


def dense_cotangent_assumed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose backward reads the cotangents of o and the final state as dense."""

    @functools.wraps(fn)
    def kernel(*args: Any, **kw: Any) -> Any:
        o, state = fn(*args, **kw)
        return _dense_read(o), _dense_read(state)

    return kernel


__all__ = ["dense_cotangent_assumed", "last_dim_stride_ignored"]
