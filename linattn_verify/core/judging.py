# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Where the float64 oracles and bounds run: the judging device.

A problem lives on the device its case was built on (the CPU for every property today), but
its oracle and bounds need not: float64 on a data-center GPU is tens to hundreds of times faster
than one CPU thread (measured on an H100: the linear family's chunk-recipe forward and gradient
bounds at T = 4096 took 0.045 s there against 26 s on the CPU). Each family's bound functions
move their problem to `judging_device` on entry and return their `TensorBound`s on the
problem's own device, so the properties and the comparisons are unchanged.

The device is, in order: the one set by `judging_on` (a context manager), the environment
variable ``LINATTN_JUDGE_DEVICE`` (``cuda``, ``cuda:1``, ``cpu``: it reaches ``check``'s worker
processes too), else the problem's own device.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields, replace
from typing import Any, TypeVar

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.errors import InvalidArgument

ENVIRONMENT = "LINATTN_JUDGE_DEVICE"
"""The environment variable naming the judging device for a whole process tree."""

_JUDGING: ContextVar[torch.device | None] = ContextVar("linattn_judging_device", default=None)


def _device(value: str | torch.device, where: str) -> torch.device:
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        raise InvalidArgument(
            f"Got {where}={value!r}; expected a torch device such as 'cpu', 'cuda' or 'cuda:1'."
        ) from None


@contextmanager
def judging_on(device: str | torch.device) -> Iterator[torch.device]:
    """Run the oracles and bounds inside the block on ``device``.

    Raises:
        InvalidArgument: if ``device`` names no torch device.
    """
    token = _JUDGING.set(_device(device, "device"))
    try:
        yield _JUDGING.get() or torch.device("cpu")
    finally:
        _JUDGING.reset(token)


def judging_device(home: torch.device) -> torch.device:
    """The device a problem living on ``home`` is judged on (module docstring)."""
    chosen = _JUDGING.get()
    if chosen is not None:
        return chosen
    named = os.environ.get(ENVIRONMENT)
    return _device(named, ENVIRONMENT) if named else home


ProblemT = TypeVar("ProblemT")


def _tensors_on(obj: object, device: torch.device, *, floating: bool) -> dict[str, Any]:
    """The tensor fields of dataclass ``obj`` on ``device`` (only floating ones if asked)."""
    return {
        f.name: value.to(device)
        for f in fields(obj)  # type: ignore[arg-type]
        if isinstance(value := getattr(obj, f.name), torch.Tensor)
        and (value.is_floating_point() or not floating)
    }


def problem_on(problem: ProblemT, device: torch.device) -> ProblemT:
    """``problem`` (a frozen dataclass) with its floating tensors on ``device``, dtypes kept.

    ``cu_seqlens`` stays where it is (the CPU): it is read as a list of sequence bounds.
    """
    return replace(problem, **_tensors_on(problem, device, floating=True))  # type: ignore[type-var]


def bound_on(bound: TensorBound, device: torch.device) -> TensorBound:
    """``bound`` with every tensor in it (its residual's too) on ``device``."""
    residual = bound.residual
    if residual is not None:
        residual = replace(residual, **_tensors_on(residual, device, floating=False))
    return replace(bound, residual=residual, **_tensors_on(bound, device, floating=False))


__all__ = ["ENVIRONMENT", "bound_on", "judging_device", "judging_on", "problem_on"]
