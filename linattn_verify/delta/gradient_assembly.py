# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What both recipes' gradient bounds share: the reference gradients and their assembly.

`linattn_verify.delta.gradient_bounds` (recurrent) and `linattn_verify.delta.chunk_gradient_bounds`
(chunk, WY) each bound one sequence's gradients; `assemble_gradient_bounds` runs that over every
sequence and turns the pieces into one `TensorBound` per gradient. The reference gradients are
float64 autograd through the recurrent oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.delta.bounds import SMALLEST_SUBNORMAL, Units
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import Span, delta_recurrent, per_sequence, sequence_groups
from linattn_verify.typing import dtype_name

GRADIENTS = ("q", "k", "v", "beta", "g", "initial_state")
"""The differentiable inputs of the family, in the order of `DeltaProblem.inputs`."""


def reference_gradients(
    problem: DeltaProblem, do: torch.Tensor, d_final_state: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """Exact (float64 autograd) gradients of <o, do> + <S_T, dS_T>, by input name."""
    p = problem.to(torch.float64)
    leaves = {n: x.detach().clone().requires_grad_(True) for n, x in p.inputs().items()}
    p = replace(p, **leaves)  # type: ignore[arg-type]
    with torch.enable_grad():
        o, S_T = delta_recurrent(p)
        loss = (o * do.to(torch.float64)).sum()
        if S_T is not None and d_final_state is not None:
            loss = loss + (S_T * d_final_state.to(torch.float64)).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        n: torch.zeros_like(x) if gr is None else gr
        for (n, x), gr in zip(leaves.items(), grads, strict=True)
    }


def l2norm_chain(
    raw: torch.Tensor,
    unit: torch.Tensor,
    bound: torch.Tensor,
    magnitude: torch.Tensor,
    units: Units,
    eps_k: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Carry a gradient bound through x̂ = x / sqrt(Σx² + eps): |J| B + (γ + 2ε) |J| M."""
    r = torch.sqrt(raw.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)  # [H, 1]

    def J_abs(x: torch.Tensor) -> torch.Tensor:
        return (x + unit.abs() * (unit.abs() * x).sum(-1, keepdim=True)) / r

    chained_mag = J_abs(magnitude)
    return J_abs(bound) + (units.gamma(raw.shape[-1] + 6) + 2 * eps_k) * chained_mag, chained_mag


SequenceGradients = Callable[..., dict[str, tuple[torch.Tensor, torch.Tensor]]]
"""One sequence's gradient bounds and magnitudes by input name, heads first, from ``(seq, raw q,
raw k, do, dS_T)`` (float64, heads first)."""


def assemble_gradient_bounds(
    problem: DeltaProblem,
    units: Units,
    do: torch.Tensor,
    d_final_state: torch.Tensor | None,
    one_sequence: SequenceGradients,
    *,
    count: float,
    gate_sum: float,
    most: int | None = None,
) -> dict[str, TensorBound]:
    """Run ``one_sequence`` on every sequence and assemble the `TensorBound` of each gradient.

    The reference is float64 autograd of the oracle; each bound gets the rounding of the
    gradient to its input's dtype (u |ref| and half the smallest subnormal); a scalar gate's
    dg is the sum over K of the per-dimension pieces, charged ``gate_sum`` of its magnitude.
    Sequences of one length run together, ``most`` at a time (`sequence_groups`).
    """
    _, _, H, K, V = problem.shape
    p = problem.to(torch.float64)
    do64 = do.to(torch.float64)
    exact = reference_gradients(problem, do, d_final_state)

    def heads_first(x: torch.Tensor, spans: list[Span]) -> torch.Tensor:
        """The spans' rows of ``x`` ``[B, T, H, ...]``, stacked as `sequence_groups` stacks."""
        return torch.cat([x[b, start:end].transpose(0, 1) for _, b, start, end in spans])

    def final_cotangent(n: int) -> torch.Tensor:
        if d_final_state is None or not problem.output_final_state:
            return torch.zeros(H, K, V, dtype=torch.float64, device=p.q.device)
        return d_final_state[n].to(torch.float64)

    Parts = dict[str, tuple[torch.Tensor, torch.Tensor]]

    def split(parts: Parts, count: int) -> list[Parts]:
        pairs = {
            name: list(zip(torch.split(b, H), torch.split(m, H), strict=True))
            for name, (b, m) in parts.items()
        }
        return [{name: pair[i] for name, pair in pairs.items()} for i in range(count)]

    groups = []
    with torch.no_grad():
        for spans, seq in sequence_groups(p, most=most):
            dS = torch.cat([final_cotangent(span[0]) for span in spans])
            parts = one_sequence(
                seq, heads_first(p.q, spans), heads_first(p.k, spans), heads_first(do64, spans), dS
            )
            groups.append((spans, parts))
    pieces: dict[str, list[torch.Tensor]] = {}
    mags: dict[str, list[torch.Tensor]] = {}
    for parts in per_sequence(groups, split):
        for name, (bound, mag) in parts.items():
            pieces.setdefault(name, []).append(bound)
            mags.setdefault(name, []).append(mag)
    named: dict[str, TensorBound] = {}
    for name, reference in exact.items():
        if name == "initial_state":
            bound = torch.stack(pieces[name])
            magnitude = torch.stack(mags[name])
        else:
            bound = _tokens(pieces.get(name, []), reference)
            magnitude = _tokens(mags.get(name, []), reference)
            if name == "g" and not problem.vector_gate:
                bound, magnitude = bound.sum(-1), magnitude.sum(-1)
                bound = bound + gate_sum * magnitude
        # The gradient is returned in its input's dtype: one more rounding.
        dtype = dtype_name(problem.inputs()[name].dtype)
        stored = max(UNIT_ROUNDOFF.get(dtype, units.u), units.u)
        bound = bound.reshape(reference.shape) + stored * reference.abs()
        bound = bound + SMALLEST_SUBNORMAL.get(dtype, 0.0) / 2
        named["d" + name] = TensorBound(
            name="d" + name,
            reference=reference,
            bound=bound,
            magnitude=magnitude.reshape(reference.shape),
            count=torch.full_like(reference, float(count)),
            unit=units.acc,
            # An infinite (or NaN) bound certifies nothing: γ_n, n u >= 1 (`core.rounding.gamma`).
            verifiable=torch.isfinite(bound),
        )
    return named


def _tokens(parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Sequence pieces ``[H, L, ...]`` back to the token layout ``[B, T, H, ...]`` of ``like``."""
    if not parts:
        return torch.zeros_like(like)
    flat = torch.cat([x.transpose(0, 1) for x in parts], 0)  # [ΣL, H, ...]
    tail = flat.shape[2:]
    B, T, H = like.shape[:3]
    return flat.reshape(B, T, H, *tail) if tail else flat.reshape(B, T, H)


__all__ = [
    "GRADIENTS",
    "SequenceGradients",
    "assemble_gradient_bounds",
    "l2norm_chain",
    "reference_gradients",
]
