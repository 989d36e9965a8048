# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run a kernel on another device than the one its problems live on.

The cases are built on the CPU (their seeded draws are the CPU's); a compiled Triton kernel needs
its inputs on the GPU. `on_device` wraps a kernel of any family so that every call moves its
tensor arguments to the device and its results back, through autograd (``.to`` is
differentiable), so the whole catalogue judges compiled kernels unchanged: the gradients it reads
are the CPU leaves' gradients of the device computation. The oracles and bounds follow the
judging device (`linattn_verify.core.judging`), which ``check --device`` sets to the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import torch

KernelT = TypeVar("KernelT")


def moved_to(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (in tuples, lists and dicts too) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(moved_to(x, device) for x in value)
    if isinstance(value, dict):  # the keyword arguments: initial_state, feature_weights, ...
        return {key: moved_to(x, device) for key, x in value.items()}
    return value


def on_device(kernel: KernelT, device: str | torch.device) -> KernelT:
    """Return ``kernel`` (a `Kernel` or `DeltaKernel`) computing on ``device``.

    Its name gains ``@<device>``; its signature is kept (the calls are shaped by it). Results
    come back on the device of the first tensor argument.

    Args:
        kernel: The kernel; its ``fn`` is wrapped.
        device: Where it computes (``"cuda"``, ``"cuda:1"``).
    """
    target = torch.device(device)
    fn: Callable[..., Any] = kernel.fn  # type: ignore[attr-defined]

    @functools.wraps(fn)
    def placed(*args: Any, **kwargs: Any) -> Any:
        home = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        result = fn(*moved_to(args, target), **moved_to(kwargs, target))
        return moved_to(result, home)

    name = f"{kernel.name}@{target}"  # type: ignore[attr-defined]
    return replace(kernel, name=name, fn=placed)  # type: ignore[type-var]


__all__ = ["moved_to", "on_device"]
