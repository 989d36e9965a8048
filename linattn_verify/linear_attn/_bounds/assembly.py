# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What `linattn_verify.linear_attn.tolerance` assembles the gradient bounds from.

The cotangents' layout and loss, the per-sequence gradient terms of a head group
(`backward_pieces`), the packed global scan's charge, and the charge of a state returned in the
input dtype; each runs over what it is given, with no state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn._bounds.forward import ForwardPieces
from linattn_verify.linear_attn._bounds.gradients import Cotangents, Put, backward_sequence
from linattn_verify.linear_attn._bounds.heads import Rows, States
from linattn_verify.linear_attn._bounds.vector_gradients import vector_backward_sequence
from linattn_verify.linear_attn.recipe import dtype_name
from linattn_verify.linear_attn.semantics import Problem


def charge_packed_scan(
    p: Problem, M_g: torch.Tensor, B_g: torch.Tensor, h0: int, h1: int, u_acc: float
) -> None:
    """Dg of a kernel whose global scan may run over the whole packed row (in place).

    Its cumulative sums of a sequence start from the earlier sequences' total, so each later
    sequence's dG terms cancel through the earlier sequences' gates in rounding only: dg of a
    token also holds the rounding of every later sequence's dG (docs/error-model.md §4.1).
    ``M_g``, ``B_g`` are the whole problem's ``[B, T, H, 1 or K]``, heads h0..h1 of ``p``'s
    sequences written already.
    """
    if p.g is None or p.cu_seqlens is None:
        return
    row_length = p.q.shape[1]
    later = torch.zeros_like(M_g[0, 0, h0:h1])  # [H_g, 1 or K]
    for _, b, start, end in reversed(list(p.sequences())):
        if end > start:
            first = M_g[b, start, h0:h1].clone()
            M_g[b, start:end, h0:h1] += later
            B_g[b, start:end, h0:h1] += u_acc * row_length * later
            later = later + first


def charge_returned_state(
    bounds: Mapping[str, TensorBound], final_state_dtype: str, dtype: torch.dtype
) -> dict[str, TensorBound]:
    """``bounds`` with the rounding of a state returned in the input dtype charged.

    A kernel that returns its state in the input dtype (``final_state_dtype="input"``: FLA's
    normalized ``linear_attn`` returns z_T so) rounds each element once more: u_in (|S| + B)
    plus half the format's smallest subnormal (docs/error-model.md §2.2). Every tensor but the
    returned states (``final_state``, ``final_key_sum``) is returned as it is.
    """
    charged = dict(bounds)
    name = dtype_name(dtype)
    if final_state_dtype != "input" or name in ("float32", "float64"):
        return charged
    info = torch.finfo(dtype)
    unit, tiny = UNIT_ROUNDOFF[name], info.smallest_normal * info.eps / 2
    for key in ("final_state", "final_key_sum"):
        tb = charged.get(key)
        if tb is not None:
            charged[key] = replace(
                tb, bound=tb.bound + unit * (tb.reference.abs() + tb.bound) + tiny
            )
    return charged


GRADIENT_NAMES = ("q", "k", "v", "g", "initial_state", "initial_key_sum")
"""Keys of the gradient dictionaries: d/dq, d/dk, d/dv, d/dg, d/dS_0, d/dz_0."""


def split_final_cotangent(
    d_final_state: object, p: Problem
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if d_final_state is None:
        return None, None
    N, H, K, V = p.num_sequences, p.q.shape[2], p.feature_dim, p.v.shape[-1]
    if p.normalize:
        if not (isinstance(d_final_state, tuple | list) and len(d_final_state) == 2):
            raise InvalidArgument(
                "Expected d_final_state to be a pair (dS_T [N, H, K, V], dz_T [N, H, K]) for a "
                f"normalized problem but got {type(d_final_state).__name__}."
            )
        dS, dz = d_final_state
    else:
        dS, dz = d_final_state, None
    for name, t, shape in (("d_final_state", dS, (N, H, K, V)), ("d_final_key_sum", dz, (N, H, K))):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != shape):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise InvalidArgument(f"Expected {name} of shape {shape} but got {got}.")
    return (
        None if dS is None else dS.to(torch.float64),
        None if dz is None else dz.to(torch.float64),
    )


def cotangent_loss(
    o: torch.Tensor, final_state: object, do: torch.Tensor, d_final_state: object = None
) -> torch.Tensor:
    """Return <o, do> + <S_T, dS_T> + <z_T, dz_T> in float32 or better (missing parts are 0).

    Its gradient is the vector-Jacobian product the backward bounds describe. ``final_state`` and
    ``d_final_state`` are `None`, S_T / dS_T, or the pairs (S_T, z_T) / (dS_T, dz_T).
    """
    dtype = torch.promote_types(o.dtype, torch.float32)
    loss = (o.to(dtype) * do.to(dtype)).sum()
    finals = final_state if isinstance(final_state, tuple | list) else (final_state,)
    cotangents = d_final_state if isinstance(d_final_state, tuple | list) else (d_final_state,)
    for x, d in zip(finals, cotangents, strict=False):
        if isinstance(x, torch.Tensor) and isinstance(d, torch.Tensor):
            loss = loss + (x.to(dtype) * d.to(device=x.device, dtype=dtype)).sum()
    return loss


def backward_pieces(
    p: Problem,
    pieces: list[ForwardPieces],
    do: torch.Tensor,
    d_final_state: object,
    sinks: list[Put] | None = None,
) -> list[dict[str, torch.Tensor]]:
    """The gradient terms of each sequence (`backward_sequence`), from its forward pieces.

    Each sequence's terms go to its ``sinks`` entry as they are formed (nothing is returned
    for it), or with `None` are collected and returned, one dictionary per sequence.
    """
    dS, dz = split_final_cotangent(d_final_state, p)
    # |do| in float64, a copy (never the caller's tensor written in place): all the bounds read.
    do_abs = do.to(torch.float64, copy=True).abs_()
    H, F, V = p.q.shape[2], p.feature_dim, p.v.shape[-1]
    backward = vector_backward_sequence if p.vector_gate else backward_sequence
    collected: list[dict[str, torch.Tensor]] = []
    for i, (piece, (n, b, start, end)) in enumerate(zip(pieces, p.sequences(), strict=True)):
        ct = Cotangents(
            do_abs=do_abs[b, start:end].transpose(0, 1),
            dS=dS[n] if dS is not None else do_abs.new_zeros(H, F, V),
            dz=dz[n] if dz is not None else do_abs.new_zeros(H, F),
        )
        if sinks is not None:
            backward(piece, ct, p.normalize, sinks[i])
        else:
            values: dict[str, torch.Tensor] = {}
            backward(piece, ct, p.normalize, values.__setitem__)
            collected.append(values)
    return collected


def undefined_like(mask: torch.Tensor | None, ref: torch.Tensor) -> torch.Tensor | None:
    """``mask`` broadcast to ``ref``'s shape: a vector gate's dg_j is undefined in every dim."""
    if mask is None or mask.shape == ref.shape:
        return mask
    return mask[..., None].expand_as(ref)


SEQUENCE_KEYS = frozenset({"M_S0", "B_S0", "M_z0", "B_z0", "bad_S0"})
"""Keys of `backward_sequence`'s values that are per sequence ``[H, ...]``, not per token."""


def sink(
    rows: Rows,
    states: States,
    counts: list[torch.Tensor],
    n: int,
    b: int,
    start: int,
    end: int,
    h0: int,
    h1: int,
) -> Put:
    """Where one sequence's gradient pieces go: written into the whole problem's tensors."""

    def put(key: str, x: torch.Tensor) -> None:
        if key == "count":
            counts.append(x)
        elif key in SEQUENCE_KEYS:
            states.put(key, x, n, h0, h1)
        elif key != "overflow_heads":
            rows.put(key, x, b, start, end, h0, h1)

    return put


__all__ = [
    "GRADIENT_NAMES",
    "backward_pieces",
    "charge_packed_scan",
    "charge_returned_state",
    "cotangent_loss",
    "sink",
    "split_final_cotangent",
    "undefined_like",
]
