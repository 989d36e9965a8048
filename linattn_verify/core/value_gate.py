# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A value gate folded into single-column problems: what every family's fold shares.

A value gate gv ``[B, T, H, V]`` (FLA's ``gv``) decays the state column by column, S_t =
diag(exp(g_t)) S_{t-1} diag(exp(gv_t)) + ...: column c of head h then follows its family's rule
on its own, with the gate g_t + gv_tc. A family's ``fold`` makes that problem, with H·V heads of
V = 1 (head h·V + c is column c of head h), so its oracles and bounds judge it unchanged;
`unfold_tensor` puts their results back in ``[..., H, V]`` order, and `judged_folded` wraps an
oracle so it takes value-gated problems. Each family's fold is in its own package
(`linattn_verify.linear_attn.value_gate`, `linattn_verify.delta.value_gate`); the gate sum
(`folded_gate`) is formed here, in float64.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import torch

from linattn_verify.core.bound import TensorBound


def per_column(x: torch.Tensor, V: int) -> torch.Tensor:
    """``[B, T, H, ...]`` -> ``[B, T, H*V, ...]``: each head repeated once per value column."""
    B, T, H = x.shape[:3]
    return x.unsqueeze(3).expand(B, T, H, V, *x.shape[3:]).reshape(B, T, H * V, *x.shape[3:])


def folded_gate(g: torch.Tensor | None, gv: torch.Tensor) -> torch.Tensor:
    """The gate of the folded problem: g + gv per value column, in float64.

    ``[B, T, H*V]`` for no g or a scalar g ``[B, T, H]``; ``[B, T, H*V, K]`` for a vector g
    ``[B, T, H, K]`` (gv_tc added to each key dimension). In float64, the judged problem's
    precision: in the inputs' dtype the sum would round.
    """
    B, T, H, V = gv.shape
    gv = gv.double()
    if g is None:
        return gv.reshape(B, T, H * V)
    if g.ndim == 3:
        return (g.double()[..., None] + gv).reshape(B, T, H * V)
    K = g.shape[-1]
    return (g.double()[..., None, :] + gv[..., None]).reshape(B, T, H * V, K)


def folded_state(S0: torch.Tensor | None, V: int) -> torch.Tensor | None:
    """An initial state ``[N, H, K, V]`` as the folded problem's ``[N, H*V, K, 1]``."""
    if S0 is None:
        return None
    N, H, K, _ = S0.shape
    return S0.permute(0, 1, 3, 2).reshape(N, H * V, K, 1)


def folded_fields(problem: Any) -> dict[str, Any]:
    """The fields every family's fold changes, for ``dataclasses.replace`` of a problem with gv.

    q and k repeated per value column, v one column per head, the gate g + gv (`folded_gate`),
    the initial state's columns as heads (`folded_state`), no gv, and ``gate_factors``: 2 where
    the kernel decays by exp(g) and exp(gv) apart, 1 where gv is the only gate.
    """
    B, T, H, _, V = problem.shape
    return {
        "q": per_column(problem.q, V),
        "k": per_column(problem.k, V),
        "v": problem.v.reshape(B, T, H * V, 1),
        "g": folded_gate(problem.g, problem.gv),
        "gv": None,
        "initial_state": folded_state(problem.initial_state, V),
        "gate_factors": 1 + (problem.g is not None),
    }


def unfold_tensor(x: torch.Tensor, name: str, H: int, V: int) -> torch.Tensor:
    """A folded problem's ``o`` or ``final_state``, back in the unfolded problem's order.

    ``o`` ``[B, T, H*V, 1]`` -> ``[B, T, H, V]``; ``final_state`` ``[N, H*V, K, 1]`` ->
    ``[N, H, K, V]``.
    """
    if name == "o":
        return x.reshape(*x.shape[:2], H, V)
    N, _, K, _ = x.shape
    return x.reshape(N, H, V, K).permute(0, 1, 3, 2)


def unfold_bound(bound: TensorBound, H: int, V: int) -> TensorBound:
    """A folded problem's `TensorBound` of ``o`` or ``final_state``, back in order.

    Every per-element tensor it holds is unfolded (`unfold_tensor`); a value-gated problem is
    unnormalized, so it has no residual and no per-row eps influence.
    """

    def back(x: torch.Tensor) -> torch.Tensor:
        return unfold_tensor(x, bound.name, H, V).contiguous()

    return replace(
        bound,
        reference=back(bound.reference),
        bound=back(bound.bound),
        magnitude=back(bound.magnitude),
        count=back(bound.count),
        verifiable=back(bound.verifiable),
        undefined=None if bound.undefined is None else back(bound.undefined),
    )


Evaluation = TypeVar("Evaluation", bound=Callable[..., tuple[torch.Tensor, Any]])


def judged_folded(fold: Callable[[Any], Any]) -> Callable[[Evaluation], Evaluation]:
    """Make an oracle ``(problem, ...) -> (o, S_T)`` take value-gated problems, by ``fold``.

    A problem with a value gate (``gv`` not `None`) is folded and the results put back
    (`unfold_tensor`); any other goes straight through.
    """

    def wrap(evaluate: Evaluation) -> Evaluation:
        @functools.wraps(evaluate)
        def evaluated(problem: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
            if getattr(problem, "gv", None) is None:
                return evaluate(problem, *args, **kwargs)
            _, _, H, _, V = problem.shape
            o, S = evaluate(fold(problem), *args, **kwargs)
            S = None if S is None else unfold_tensor(S, "final_state", H, V)
            return unfold_tensor(o, "o", H, V), S

        return evaluated  # type: ignore[return-value]

    return wrap


__all__ = [
    "folded_fields",
    "folded_gate",
    "folded_state",
    "judged_folded",
    "per_column",
    "unfold_bound",
    "unfold_tensor",
]
