# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""How a kernel lays out what it takes and returns, where that is not the harness's convention.

The harness's tensors are token-major, ``[B, T, H, D]`` (FLA's convention), and its states are
``[N, H, K, V]``. Most PyTorch attention code is heads-first, ``[B, H, T, D]``, and some kernels
keep the state transposed, ``[N, H, V, K]``. A kernel declares its layout (``check --layout``,
``--state-layout``) instead of being wrapped: `Kernel.call` moves each tensor into the kernel's
layout on the way in and back on the way out, differentiably, so the gradients the harness
judges are the token-major ones. A kernel that returns only its output (no final state asked
for) may return the tensor alone instead of ``(o, None)``.

The moves are transposes. A contiguous input is handed over contiguous in the kernel's layout
(a copy), as a caller in that layout would hand it; a strided one (the layout property's views)
stays a view, so its strides still reach the kernel.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import torch

from linattn_verify.errors import InvalidArgument

AxisOrder = Literal["token-major", "heads-first"]
StateOrder = Literal["kv", "vk"]
AXIS_ORDERS: tuple[str, ...] = get_args(AxisOrder)
STATE_ORDERS: tuple[str, ...] = get_args(StateOrder)


def check_layouts(layout: str, state_layout: str) -> None:
    """Raise `InvalidArgument` unless both are known spellings."""
    if layout not in AXIS_ORDERS:
        raise InvalidArgument(f"Got layout={layout!r}; it must be one of {AXIS_ORDERS}.")
    if state_layout not in STATE_ORDERS:
        raise InvalidArgument(
            f"Got state_layout={state_layout!r}; it must be one of {STATE_ORDERS}."
        )


def _swapped(x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    moved = x.transpose(dim0, dim1)
    return moved.contiguous() if x.is_contiguous() else moved


def tokens_in(x: Any, layout: str) -> Any:
    """A per-token input (q, k, v, g, beta: ``[B, T, H, ...]``) in the kernel's layout."""
    if layout == "token-major" or not isinstance(x, torch.Tensor) or x.dim() < 3:
        return x
    return _swapped(x, 1, 2)


def state_in(state: Any, state_layout: str) -> Any:
    """An initial state (S_0, or the pair (S_0, z_0)) in the kernel's state layout."""
    if state_layout == "kv" or state is None:
        return state
    if isinstance(state, tuple):
        return (state_in(state[0], state_layout), *state[1:])
    return _swapped(state, -1, -2)


def _state_out(state: Any, state_layout: str) -> Any:
    if state_layout == "kv" or state is None:
        return state
    if isinstance(state, tuple | list):
        if not state or not isinstance(state[0], torch.Tensor) or state[0].dim() < 2:
            return state
        return (state[0].transpose(-1, -2), *state[1:])
    if isinstance(state, torch.Tensor) and state.dim() >= 2:
        return state.transpose(-1, -2)
    return state


def result_out(result: Any, layout: str, state_layout: str, *, final_state_asked: bool) -> Any:
    """A kernel's result back in the harness's convention: ``(o [B, T, H, V], final_state)``.

    A bare tensor is the output alone, accepted when no final state was asked for. Anything else
    that is not a pair is returned unchanged, for the caller's validation to name.
    """
    if isinstance(result, torch.Tensor) and not final_state_asked:
        result = (result, None)
    if not isinstance(result, tuple | list) or len(result) != 2:
        return result
    o, final = result
    if layout == "heads-first" and isinstance(o, torch.Tensor) and o.dim() >= 3:
        o = o.transpose(1, 2)
    return o, _state_out(final, state_layout)


__all__ = [
    "AXIS_ORDERS",
    "STATE_ORDERS",
    "AxisOrder",
    "StateOrder",
    "check_layouts",
    "result_out",
    "state_in",
    "tokens_in",
]
