# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Reusing an oracle's result for the same inputs, within a scope that asks for it.

The size reach (`linattn_verify.checking`) judges the same case several times: the forward pass,
then the backward pass (whose bounds start from the forward ones), then the forward pass again
`linattn_verify.reach.RERUNS` times, to catch a kernel that is wrong only now and then. The
kernel runs every time; the oracle's bounds cannot change, since they are a function of the
problem and the recipe alone. Inside `reusing_results`, `reused` returns the result computed for
inputs equal to these (tensors bit for bit), instead of computing it again: at T = 8192 that is
three of the reach's four forward bound evaluations per size.

Outside the scope nothing is kept, so a search, a test or a library call computes every result
afresh. Within it one result per name is kept, the last, and it is dropped before another is
computed, so that two never coexist (a result at T = 65,536 holds hundreds of MB). The key is a
snapshot (tensors cloned when the result is stored): a kernel that writes into its inputs after
the bounds were formed changes what later calls see, and then they are computed again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import torch

Result = TypeVar("Result")

_HELD: ContextVar[dict[str, tuple[Any, Any]] | None] = ContextVar("_HELD", default=None)


@contextmanager
def reusing_results() -> Iterator[None]:
    """A scope in which `reused` keeps each name's last result (nested scopes share none)."""
    token = _HELD.set({})
    try:
        yield
    finally:
        _HELD.reset(token)


def reused(name: str, key: Any, compute: Callable[[], Result]) -> Result:
    """``compute()``, or within `reusing_results` the result it gave for an equal ``key``.

    ``key`` holds everything the result depends on: tensors (compared by dtype, shape, device
    and value, NaN never equal), dataclasses (field by field), tuples, lists, dicts and values
    compared with ``==``.
    """
    held = _HELD.get()
    if held is None:
        return compute()
    last = held.pop(name, None)
    if last is not None and _equal(last[0], key):
        held[name] = last
        result: Result = last[1]
        return result
    del last  # freed before the new result is formed
    result = compute()
    held[name] = (_snapshot(key), result)
    return result


def _snapshot(key: Any) -> Any:
    """``key`` with every tensor cloned (detached), so later writes to the inputs don't reach it."""
    if isinstance(key, torch.Tensor):
        return key.detach().clone()
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        return _fields(key, _snapshot)
    if isinstance(key, tuple | list):
        return tuple(_snapshot(x) for x in key)
    if isinstance(key, dict):
        return tuple((k, _snapshot(v)) for k, v in key.items())
    return key


def _fields(key: Any, part: Callable[[Any], Any]) -> tuple[Any, ...]:
    """A dataclass as (its class, (name, part(value)) per field): equal only to its own kind."""
    named = tuple((field.name, part(getattr(key, field.name))) for field in dataclasses.fields(key))
    return (type(key), *named)


def _equal(snapshot: Any, key: Any) -> bool:
    if isinstance(key, torch.Tensor) or isinstance(snapshot, torch.Tensor):
        return (
            isinstance(key, torch.Tensor)
            and isinstance(snapshot, torch.Tensor)
            and key.dtype == snapshot.dtype
            and key.shape == snapshot.shape
            and key.device == snapshot.device
            and bool(torch.equal(key.detach(), snapshot))
        )
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        key = _fields(key, lambda x: x)
    elif isinstance(key, list):
        key = tuple(key)
    elif isinstance(key, dict):
        key = tuple(key.items())
    if isinstance(key, tuple):
        return (
            isinstance(snapshot, tuple)
            and len(snapshot) == len(key)
            and all(_equal(s, k) for s, k in zip(snapshot, key, strict=True))
        )
    return type(snapshot) is type(key) and bool(snapshot == key)


__all__ = ["reused", "reusing_results"]
