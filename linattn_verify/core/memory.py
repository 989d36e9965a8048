# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The memory paths a kernel meets in real use, for any family: layouts, views, allocations.

A tensor a kernel receives need not be contiguous: a transposed head-first tensor, a slice of a
larger one (a storage offset), a last dimension with a stride (every other feature of a packed
projection), a dimension expanded with stride 0 (one gate for every head), and in the backward
the cotangent ``o.sum().backward()`` hands it (a scalar expanded to o's shape, every stride 0).
Each layout here keeps the values and changes only the strides, so a correct kernel's results
are unchanged (bit for bit where it promises layout-exactness, else within its error bound).
Around a strided view the storage is NaN, so a kernel that ignores an offset or a stride reads
NaN, not plausible numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch

Layout = Callable[[torch.Tensor], torch.Tensor]
"""Same values, other strides (differentiable where the input requires grad)."""


def _nan_filled(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return torch.full(tuple(shape), math.nan, dtype=x.dtype, device=x.device)


def transposed(x: torch.Tensor) -> torch.Tensor:
    """Stored with dims 1 and 2 swapped (a head-first ``[B, H, T, D]`` tensor, transposed)."""
    if x.dim() < 3:
        return x
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def sliced(x: torch.Tensor) -> torch.Tensor:
    """A view into a larger NaN-filled tensor, offset 1 in every dim (a storage offset)."""
    big = _nan_filled(x, [s + 2 for s in x.shape])
    return big[tuple(slice(1, 1 + s) for s in x.shape)].copy_(x)


def last_dim_strided(x: torch.Tensor) -> torch.Tensor:
    """The last dim's elements two apart, NaN between (every other feature of a projection).

    A kernel that steps along the last dim by 1 instead of by its stride reads NaN.
    """
    if x.dim() == 0:
        return x
    return _nan_filled(x, [*x.shape[:-1], 2 * x.shape[-1]])[..., ::2].copy_(x)


def expanded(x: torch.Tensor) -> torch.Tensor:
    """``x``'s values from one element expanded with stride 0 in every dim.

    Only for a tensor whose elements are all equal (a constant cotangent: ``o.sum()`` hands the
    backward ``ones.expand(o.shape)``).

    Raises:
        ValueError: if the elements of ``x`` differ.
    """
    if x.numel() == 0:
        return x
    first = x.reshape(-1)[:1]
    if not bool((x == first).all()):
        raise ValueError("expanded() takes a tensor whose elements are all equal")
    # A storage of one element, as o.sum()'s backward makes: a kernel that reads it as dense
    # reads past its end rather than the values of a full-size buffer left behind.
    return first.clone().reshape([1] * x.dim()).expand(x.shape)


def same_layout(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return ``x``'s values with ``like``'s strides and storage offset (differentiably).

    The storage around a strided ``like`` is NaN, so a kernel that reads outside the view reads
    NaN. A ``like`` with a stride-0 dim (expanded) is rebuilt expanded from ``x``'s first
    element along that dim (the values are equal along it by construction).
    """
    if like.is_contiguous() and like.storage_offset() == 0:
        return x
    if any(st == 0 and n > 1 for n, st in zip(like.shape, like.stride(), strict=True)):
        index = tuple(
            slice(0, 1) if st == 0 else slice(None)
            for n, st in zip(like.shape, like.stride(), strict=True)
        )
        return same_layout(x[index], like[index]).expand(like.shape)
    extent = 1 + sum((n - 1) * abs(st) for n, st in zip(like.shape, like.stride(), strict=True))
    size = like.storage_offset() + (extent if like.numel() else 0)
    buffer = torch.full((size,), torch.nan, dtype=x.dtype, device=x.device)
    view = buffer.as_strided(like.shape, like.stride(), like.storage_offset())
    return view.copy_(x)


def expand_dim(tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int]) -> dict[str, Any]:
    """Each tensor of ``tensors`` with its index 0 along ``dims[name]`` expanded (stride 0).

    The values change (every index along the dim becomes index 0's), so a problem built from
    the result is a new problem, judged against its own dense contiguous run. Tensors not
    named in ``dims`` are returned as they are.
    """
    out: dict[str, Any] = {}
    for name, x in tensors.items():
        dim = dims.get(name)
        if dim is None or x.dim() <= dim:
            out[name] = x
            continue
        one = x.narrow(dim, 0, 1)
        out[name] = one.expand(*x.shape[:dim], x.shape[dim], *x.shape[dim + 1 :])
    return out


class _ContiguousCotangent(torch.autograd.Function):
    """Identity forward; the backward hands on its cotangent contiguous."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def contiguous_cotangent(x: Any) -> Any:
    """``x`` (a tensor, a tuple of them, or `None`) whose backward gets its cotangent contiguous.

    A torch kernel's reductions follow the cotangent's strides; a kernel that promises
    layout-exact results must not let them (as it makes its inputs contiguous).
    """
    if isinstance(x, tuple):
        return tuple(contiguous_cotangent(t) for t in x)
    if isinstance(x, torch.Tensor) and x.requires_grad:
        return _ContiguousCotangent.apply(x)  # type: ignore[no-untyped-call]
    return x


def _poison(x: torch.Tensor) -> torch.Tensor:
    # Only floating buffers: a garbage integer buffer (an index) could make an unchecked
    # interpreter load read far out of bounds and kill the process instead of failing.
    if x.is_floating_point():
        with torch.no_grad():
            x.fill_(math.nan)
    return x


@contextmanager
def nan_poisoned_allocations() -> Iterator[None]:
    """Make `torch.empty` and `torch.empty_like` return NaN-filled floating tensors.

    A kernel that reads memory it allocated but never wrote reads NaN where the oracle is
    finite.
    """
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        return _poison(real_empty(*args, **kwargs))

    def empty_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        return _poison(real_empty_like(*args, **kwargs))

    with mock.patch("torch.empty", empty), mock.patch("torch.empty_like", empty_like):
        yield


def vector_jacobian(
    outputs: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor | None],
    leaves: Sequence[torch.Tensor],
    layout: Layout | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``leaves`` for the cotangents of ``outputs``, handed over in ``layout``.

    Each cotangent is cast to its output's dtype and handed to the backward as ``layout`` lays
    it out (contiguous by default), as autograd hands a backward what the loss produced
    (``o.sum()``: an expanded tensor). The values are those of the float32 loss
    <output, cotangent>: its gradient reaches a low-precision output cast to that output's
    dtype too. A later output whose cotangent is `None`, or that does not require grad, is left
    out (a constant of the loss); the first (o) never is.
    """
    pairs = [
        (x, d)
        for n, (x, d) in enumerate(zip(outputs, cotangents, strict=True))
        if d is not None and (n == 0 or x.requires_grad)
    ]
    laid = [
        (layout or (lambda t: t))(d.to(device=x.device, dtype=x.dtype).contiguous())
        for x, d in pairs
    ]
    return torch.autograd.grad([x for x, _ in pairs], list(leaves), laid, allow_unused=True)


__all__ = [
    "Layout",
    "contiguous_cotangent",
    "expand_dim",
    "expanded",
    "last_dim_strided",
    "nan_poisoned_allocations",
    "same_layout",
    "sliced",
    "transposed",
    "vector_jacobian",
]
