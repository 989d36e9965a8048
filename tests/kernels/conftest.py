# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Helpers the kernel tests share, handed to them through the `kit` fixture.

Test modules cannot import each other (or this file) under ``--import-mode=importlib``, so the
helpers are plain functions collected in a namespace that the `kit` fixture returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from linattn_verify.compare import assert_linattn_close
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem

GRAD_NAMES = ("q", "k", "v", "g", "initial_state", "initial_key_sum")
TENSOR_NAMES = ("q", "k", "v", "g")


def as_list(state: Any) -> list[torch.Tensor]:
    """A final or initial state (None, a tensor, or ``(S, z)``) as a list of tensors."""
    if state is None:
        return []
    return list(state) if isinstance(state, tuple) else [state]


def detached(state: Any) -> Any:
    """``state`` (None, a tensor, or a tuple of tensors) detached from the graph."""
    if isinstance(state, tuple):
        return tuple(x.detach() for x in state)
    return None if state is None else state.detach()


def kernel_kwargs(
    case: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Any, initial_state: Any
) -> dict[str, Any]:
    """The kernel's keyword arguments: the given tensors plus the options of ``case``."""
    cu = None if case.cu_seqlens is None else torch.tensor(case.cu_seqlens, dtype=torch.int32)
    return {
        "q": q,
        "k": k,
        "v": v,
        "g": g,
        "scale": case.scale,
        "normalize": case.normalize,
        "eps": case.eps,
        "feature_map": case.feature_map,
        "initial_state": initial_state,
        "output_final_state": case.final_state,
        "cu_seqlens": cu,
    }


def draw_inputs(case: Any) -> dict[str, Any]:
    """Draw the kernel's arguments for ``case``; differentiable tensors are leaves.

    ``case.decay`` is "none", "mild" (g in [-0.1, 0]) or "steep" (g in [-20, 0]); steep decay
    also sets a gate of exactly 0 and one at the floor (both shipped bugs, docs/bug-classes.md).
    """
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H, K, V = case.B, case.T, case.H, case.K, case.V

    def leaf(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return x.to(dtype).requires_grad_()

    g = None
    if case.decay != "none":
        floor = 0.1 if case.decay == "mild" else 20.0
        g_value = -floor * torch.rand(B, T, H, generator=gen)
        if case.decay == "steep":
            g_value[:, 0] = 0.0
            g_value[:, -1] = -floor
        g = leaf(g_value, case.dtype)
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    initial_state: Any = None
    if case.initial_state:
        S0 = leaf(torch.randn(N, H, K, V, generator=gen), case.state_dtype)
        if case.normalize:
            z0 = leaf(torch.rand(N, H, K, generator=gen), case.state_dtype)
            initial_state = (S0, z0)
        else:
            initial_state = S0
    q = leaf(torch.randn(B, T, H, K, generator=gen), case.dtype)
    k = leaf(torch.randn(B, T, H, K, generator=gen), case.dtype)
    v = leaf(torch.randn(B, T, H, V, generator=gen), case.dtype)
    return kernel_kwargs(case, q, k, v, g, initial_state)


def leaves(kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The differentiable inputs keyed by `assert_linattn_close`'s gradient names."""
    tensors = [kwargs[name] for name in TENSOR_NAMES] + as_list(kwargs["initial_state"])
    return {n: x for n, x in zip(GRAD_NAMES, tensors, strict=False) if x is not None}


@dataclass
class Run:
    """One forward and backward: outputs, the cotangents used, and the gradients."""

    o: torch.Tensor
    final: Any
    grads: dict[str, torch.Tensor]
    do: torch.Tensor
    d_final: Any

    def tensors(self) -> list[torch.Tensor]:
        """Every output and gradient, in a fixed order."""
        return [self.o, *as_list(self.final), *self.grads.values()]


def forward_backward(
    kernel: Callable[..., Any], kwargs: dict[str, Any], seed: int = 0, **extra: Any
) -> Run:
    """Run forward, then backward with random non-zero cotangents for o and the final state."""
    q, k, v, g = (kwargs[name] for name in TENSOR_NAMES)
    options = {key: val for key, val in kwargs.items() if key not in TENSOR_NAMES}
    o, final = kernel(q, k, v, g, **options, **extra)
    gen = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(o.shape, generator=gen).to(o.dtype)
    finals = as_list(final)
    d_finals = [torch.randn(f.shape, generator=gen).to(f.dtype) for f in finals]
    inputs = leaves(kwargs)
    grads = torch.autograd.grad([o, *finals], list(inputs.values()), [do, *d_finals])
    d_final = None if not d_finals else tuple(d_finals) if len(d_finals) == 2 else d_finals[0]
    return Run(
        o=o.detach(),
        final=detached(final),
        grads=dict(zip(inputs, grads, strict=True)),
        do=do,
        d_final=d_final,
    )


def problem_of(kwargs: dict[str, Any]) -> Any:
    """The problem exactly as the kernel received it (same rounded tensors, detached)."""
    args = {
        key: detached(val) if isinstance(val, torch.Tensor | tuple) else val
        for key, val in kwargs.items()
    }
    return validate_problem(**args)


def assert_close(kwargs: dict[str, Any], run: Run, recipe: PrecisionRecipe, name: str) -> None:
    """The run's output, final state and gradients lie within the float64 oracle's bounds."""
    __tracebackhide__ = True
    assert_linattn_close(
        problem_of(kwargs),
        run.o,
        run.final,
        recipe=recipe,
        grads=run.grads,
        do=run.do,
        d_final_state=run.d_final,
        name=name,
    )


def poisoned_empty(empty: Any, int_fill: int | None = None) -> Any:
    """``empty`` with every floating buffer NaN-filled (and integer ones ``int_fill``, if set)."""

    def poisoned(*args: Any, **kwargs: Any) -> torch.Tensor:
        x = empty(*args, **kwargs)
        if x.is_floating_point():
            x.fill_(math.nan)
        elif int_fill is not None:
            x.fill_(int_fill)
        return x

    return poisoned


def assert_poison_never_leaks(
    monkeypatch: pytest.MonkeyPatch,
    outputs: Callable[[], list[torch.Tensor]],
    int_fill: int | None = None,
) -> None:
    """With every torch.empty buffer poisoned, all outputs are finite and bitwise unchanged."""
    clean = outputs()
    monkeypatch.setattr(torch, "empty", poisoned_empty(torch.empty, int_fill))
    assert bool(torch.isnan(torch.empty(2)).all())
    dirty = outputs()
    monkeypatch.undo()
    for a, b in zip(clean, dirty, strict=True):
        assert bool(torch.isfinite(b).all())
        # Every element is written before it is read: poisoning changes nothing.
        assert torch.equal(a, b)


def assert_reruns_identical(
    kwargs: dict[str, Any],
    outputs: Callable[[dict[str, Any]], list[torch.Tensor]],
    strided_view: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Reruns are bitwise equal, inputs are unchanged, and strided views give the same bits."""
    tensors = {n: x for n, x in kwargs.items() if isinstance(x, torch.Tensor)}
    before = {n: x.detach().clone() for n, x in tensors.items()}
    states_before = [x.detach().clone() for x in kwargs["initial_state"]]
    first = outputs(kwargs)
    second = outputs(kwargs)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    for name, x in before.items():
        assert torch.equal(tensors[name].detach(), x), name
    for x, y in zip(kwargs["initial_state"], states_before, strict=True):
        assert torch.equal(x.detach(), y)
    strided = dict(kwargs)
    for name in ("q", "k", "v"):
        view = strided_view(kwargs[name].detach()).requires_grad_()
        assert not view.is_contiguous()
        strided[name] = view
    for a, b in zip(first, outputs(strided), strict=True):
        assert torch.equal(a, b)


def call_with_defaults(kernel: Callable[..., Any], **overrides: Any) -> None:
    """Call ``kernel`` on small valid inputs with ``overrides`` replacing some arguments."""
    args: dict[str, Any] = {
        "q": torch.randn(1, 4, 2, 8),
        "k": torch.randn(1, 4, 2, 8),
        "v": torch.randn(1, 4, 2, 6),
    }
    args.update(overrides)
    kernel(**args)


@pytest.fixture
def kit() -> SimpleNamespace:
    """The shared helpers of this folder, as attributes."""
    return SimpleNamespace(
        GRAD_NAMES=GRAD_NAMES,
        Run=Run,
        as_list=as_list,
        assert_close=assert_close,
        assert_poison_never_leaks=assert_poison_never_leaks,
        assert_reruns_identical=assert_reruns_identical,
        call_with_defaults=call_with_defaults,
        draw_inputs=draw_inputs,
        forward_backward=forward_backward,
        kernel_kwargs=kernel_kwargs,
        leaves=leaves,
        problem_of=problem_of,
    )
