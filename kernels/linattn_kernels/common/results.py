# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What every form's launchers return, and how its autograd Function keeps them (torch only).

All three forms follow one convention: ``<form>_fwd(x: Inputs, *, options) -> Forward`` and
``<form>_bwd(x, fwd, do, dht, dzt) -> Gradients``; the ``torch.autograd.Function`` between them
only sequences the two and keeps `Forward` with `save_for_backward` / `saved_for_backward`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import torch

from linattn_kernels.common.args import Inputs
from linattn_kernels.common.tables import ChunkTable

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""An initial or final state: S ``[N, H, K, V]``, or ``(S, z)`` with z ``[N, H, K]``."""


class Forward(NamedTuple):
    """What a form's forward launcher returns: the outputs and what its backward reads.

    Attributes:
        o: Output ``[B, T, H, V]`` in the input dtype (`None` once rebuilt for the backward).
        ht: Final state S_T ``[N, H, K, V]`` fp32, or `None` unless asked for.
        zt: Final key sum z_T ``[N, H, K]`` fp32 (normalized only), or `None`.
        o_acc: The fp32 output ``[B, T, H, V]`` the backward takes δ_t = do_t·o_t from, so the
            output's own rounding does not enter dA (normalized only), or `None`.
        den: Denominators Z incl. eps ``[B, T, H]`` fp32 (normalized only), or `None`.
        G: Whole-sequence cumulative decay ``[B, T, H]`` (``[B, T, H, K]`` for a vector gate)
            fp32 (parallel form), or `None`.
        table: The token-block table (parallel and chunk forms), or `None`.
    """

    o: torch.Tensor | None
    ht: torch.Tensor | None
    zt: torch.Tensor | None
    o_acc: torch.Tensor | None = None
    den: torch.Tensor | None = None
    G: torch.Tensor | None = None
    table: ChunkTable | None = None


class Gradients(NamedTuple):
    """What a form's backward launcher returns, each `None` where there is no such input.

    Attributes:
        dq: ``[B, T, H, K]`` in the input dtype.
        dk: ``[B, T, H, K]`` in the input dtype.
        dv: ``[B, T, H, V]`` in the input dtype.
        dg: ``[B, T, H]`` fp32, or ``[B, T, H, K]`` for a vector gate.
        dh0: ``[N, H, K, V]`` fp32.
        dz0: ``[N, H, K]`` fp32.
    """

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    dg: torch.Tensor | None
    dh0: torch.Tensor | None
    dz0: torch.Tensor | None


def save_for_backward(ctx: Any, x: Inputs, fwd: Forward) -> None:
    """Keep the inputs and ``fwd`` (less the output o) on ``ctx`` for `saved_for_backward`.

    Tensors go through ``ctx.save_for_backward``, not ctx attributes: that checks they were not
    modified in place, and holding the outputs S_T, z_T (and o_acc, which is o itself for fp32
    inputs) as attributes would make reference cycles.
    """
    ctx.x = x
    ctx.table = fwd.table
    ctx.save_for_backward(x.q, x.k, x.v, x.g, x.h0, x.z0, fwd.ht, fwd.zt, fwd.o_acc, fwd.den, fwd.G)
    # Unused outputs reach backward as None, so absent cotangents cost no kernel work.
    ctx.set_materialize_grads(False)


def saved_for_backward(ctx: Any) -> tuple[Inputs, Forward]:
    """Return the ``(x, fwd)`` that `save_for_backward` kept."""
    q, k, v, g, h0, z0, ht, zt, o_acc, den, G = ctx.saved_tensors
    x = replace(ctx.x, q=q, k=k, v=v, g=g, h0=h0, z0=z0)
    return x, Forward(o=None, ht=ht, zt=zt, o_acc=o_acc, den=den, G=G, table=ctx.table)


def final_state_decay_grad(
    dht: torch.Tensor,
    ht: torch.Tensor,
    dzt: torch.Tensor | None,
    zt: torch.Tensor | None,
    *,
    per_row: bool,
) -> torch.Tensor:
    """The final state's share of dL/dG_T: <dS_T, S_T> (+ <dz_T, z_T> when both are given).

    S_T (and z_T) carry exp(G_T), so a cotangent of the final state reaches the last token's
    cumulative decay. Per sequence and head ``[N, H]``; ``per_row`` (a vector gate, where row m
    carries exp(G_T,m)) keeps the rows apart: ``[N, H, K]``.
    """
    if per_row:
        term = (dht * ht).sum(dim=-1)
        return term if dzt is None or zt is None else term + dzt * zt
    term = (dht * ht).sum(dim=(-2, -1))
    return term if dzt is None or zt is None else term + (dzt * zt).sum(dim=-1)


def final_state(x: Inputs, ht: torch.Tensor | None, zt: torch.Tensor | None) -> State | None:
    """What a public function returns as its final state: `None`, S_T, or ``(S_T, z_T)``."""
    if not x.output_final_state:
        return None
    if x.normalize:
        assert ht is not None
        assert zt is not None
        return ht, zt
    return ht
