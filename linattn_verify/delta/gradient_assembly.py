# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What both recipes' gradient bounds share: the reference gradients and their assembly.

`linattn_verify.delta.gradient_bounds` (recurrent) and `linattn_verify.delta.chunk_gradient_bounds`
(chunk, WY) each bound one sequence's gradients; `assemble_gradient_bounds` runs that over every
sequence and turns the pieces into one `TensorBound` per gradient. The reference gradients are
the float64 adjoint recurrence of the oracle (`reference_gradients`), equal to float64 autograd
through `delta_recurrent` to rounding, in O(T) time and memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import (
    DeltaSequence,
    Span,
    group_size,
    per_sequence,
    sequence_groups,
)
from linattn_verify.delta.sweep import (
    AdjointBlock,
    adjoint_products,
    backward_blocks,
    keys_down,
    values_down,
)
from linattn_verify.delta.units import SMALLEST_SUBNORMAL, Units
from linattn_verify.typing import dtype_name

GRADIENTS = ("q", "k", "v", "beta", "g", "initial_state")
"""The differentiable inputs of the family, in the order of `DeltaProblem.inputs`."""


def reference_gradients(
    problem: DeltaProblem, do: torch.Tensor, d_final_state: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """Exact (float64) gradients of <o, do> + <S_T, dS_T>, by input name.

    The adjoint recurrence of `linattn_verify.delta.sweep`, swept in blocks with the states
    re-formed from checkpoints: O(T) time, O(block) memory for the recurrence. The gradients
    equal float64 autograd through `delta_recurrent` to rounding (tests/delta/test_sweep.py).
    """
    p = problem.to(torch.float64)  # no copy of a float64 problem
    do64 = do.to(torch.float64)
    _, _, H, K, V = p.shape
    groups = []
    with torch.no_grad():
        for spans, seq in sequence_groups(p, most=group_size(p, K * V)):
            dS = torch.cat([_final_cotangent(p, d_final_state, span[0]) for span in spans])
            q, k, do_n = (_heads_first(x, spans) for x in (p.q, p.k, do64))
            grads = sequence_gradients(seq, q, k, do_n, dS, p.scale, l2norm_qk=p.l2norm_qk)
            groups.append((spans, grads))
            del seq, q, k, do_n  # not held through the layout: 200 MB at T = 65,536
    per_seq = per_sequence(groups, _split(H))
    del groups
    return _token_layout(p, per_seq)


def _token_layout(
    p: DeltaProblem, per_seq: list[dict[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Each sequence's exact gradients (heads first) as the gradients of ``p``'s inputs.

    Takes the pieces out of ``per_seq`` as it lays them out, so that each is let go as soon
    as its copy exists (at T = 65,536 each is 67 MB).
    """
    out: dict[str, torch.Tensor] = {}
    for name, x in p.inputs().items():
        parts = [one.pop(name) for one in per_seq if name in one]
        if name == "initial_state":
            out[name] = torch.stack(parts)
            continue
        if name == "g" and not p.vector_gate:
            parts = [part.sum(-1) for part in parts]
        out[name] = _tokens(parts, x)
        del parts
    return out


def block_gradients(
    seq: DeltaSequence,
    scale: float,
    do: torch.Tensor,
    blk: AdjointBlock,
    lam_k: torch.Tensor,
    Lam_p: torch.Tensor | None,
    raw: tuple[torch.Tensor, torch.Tensor] | None,
) -> dict[str, torch.Tensor]:
    """The exact gradients of one block's tokens.

    Per token, with Λ_t the adjoint of S_t, e_t = v_t - S'^T_t k_t and u_t = β_t e_t:
    dq̂_t = s S_t do_t, dv_t = β_t Λ_t^T k_t, dβ_t = (Λ_t^T k_t)·e_t,
    dk̂_t = Λ_t u_t - β_t S'_t (Λ_t^T k_t), dg_ti = Σ_j S'_ij Λ'_ij (per key dimension: the
    caller sums a scalar gate's). ``lam_k``: Λ_t^T k_t; ``Lam_p``: Λ'_t (`None` without a gate);
    ``raw``: the raw q and k ``[H, L, K]`` of an in-kernel L2 norm, whose Jacobian
    J = (I - x̂ x̂^T) / r takes dq̂ and dk̂ to them (`None`: no norm).
    """
    span = slice(blk.start, blk.stop)
    k, v, beta = seq.k[:, span], seq.v[:, span], seq.beta[:, span, None]
    e = v - keys_down(blk.Sp, k)
    dq = scale * values_down(blk.S, do[:, span])
    dk = values_down(blk.Lam, beta * e) - beta * values_down(blk.Sp, lam_k)
    if raw is not None:  # the raw inputs may be in the kernel's dtype: converted exactly
        dq = _l2norm_adjoint(raw[0][:, span].to(torch.float64), seq.q[:, span], dq)
        dk = _l2norm_adjoint(raw[1][:, span].to(torch.float64), k, dk)
    grads = {"q": dq, "k": dk, "v": beta * lam_k, "beta": (lam_k * e).sum(-1)}
    if Lam_p is not None:
        grads["g"] = (blk.Sp * Lam_p).sum(-1)
    return grads


def sequence_gradients(
    seq: DeltaSequence,
    raw_q: torch.Tensor,
    raw_k: torch.Tensor,
    do: torch.Tensor,
    dS_T: torch.Tensor,
    scale: float,
    *,
    l2norm_qk: bool,
) -> dict[str, torch.Tensor]:
    """One sequence's exact gradients (heads first): q, k, v, beta, g and initial_state.

    `block_gradients` on every block, written into whole-sequence tensors; dS_0 is the
    adjoint before the first token.
    """
    grads = gradient_rows(seq)
    raw = (raw_q, raw_k) if l2norm_qk else None
    for blk in backward_blocks(seq, scale, do, dS_T):
        lam_k, Lam_p = adjoint_products(seq, blk)
        for name, grad in block_gradients(seq, scale, do, blk, lam_k, Lam_p, raw).items():
            grads[name][:, blk.start : blk.stop] = grad
        dS_T = blk.Lam_before
    grads["initial_state"] = dS_T
    return grads


def gradient_rows(seq: DeltaSequence) -> dict[str, torch.Tensor]:
    """Zeroed whole-sequence tensors for the token gradients of ``seq`` (heads first).

    Blocks write into them: many small long-lived pieces between the blocks' temporaries
    would fragment the allocator's heap (measured: 3.2 GB peak at T = 16,384, 1.0 GB without).
    """
    grads = {"q": torch.zeros_like(seq.q), "k": torch.zeros_like(seq.k)}
    grads["v"] = torch.zeros_like(seq.v)
    grads["beta"] = torch.zeros_like(seq.beta)
    if seq.g is not None:
        grads["g"] = torch.zeros_like(seq.k)
    return grads


def _l2norm_adjoint(raw: torch.Tensor, unit: torch.Tensor, d_unit: torch.Tensor) -> torch.Tensor:
    """The raw input's gradient J dx̂ = (dx̂ - x̂ (x̂·dx̂)) / r, x̂ = x / r, r = sqrt(Σx² + eps)."""
    r = torch.sqrt((raw * raw).sum(-1, keepdim=True) + L2NORM_EPS)
    return (d_unit - unit * (unit * d_unit).sum(-1, keepdim=True)) / r


def _heads_first(x: torch.Tensor, spans: list[Span]) -> torch.Tensor:
    """The spans' rows of ``x`` ``[B, T, H, ...]``, stacked as `sequence_groups` stacks.

    One span's rows are a view (at T = 65,536 a copy of q, k and do is 200 MB).
    """
    rows = [x[b, start:end].transpose(0, 1) for _, b, start, end in spans]
    return rows[0] if len(rows) == 1 else torch.cat(rows)


def _final_cotangent(p: DeltaProblem, d_final_state: torch.Tensor | None, n: int) -> torch.Tensor:
    """dS_T of sequence ``n`` (float64), zeros when the problem returns no final state."""
    _, _, H, K, V = p.shape
    if d_final_state is None or not p.output_final_state:
        return torch.zeros(H, K, V, dtype=torch.float64, device=p.q.device)
    return d_final_state[n].to(torch.float64)


def _split(H: int) -> Callable[[dict[str, Any], int], list[dict[str, Any]]]:
    """`per_sequence`'s split of a group's results by name (each stacked G·H heads first)."""

    def split(parts: dict[str, Any], count: int) -> list[dict[str, Any]]:
        cut = {name: _split_heads(x, H) for name, x in parts.items()}
        return [{name: xs[i] for name, xs in cut.items()} for i in range(count)]

    return split


def _split_heads(x: Any, H: int) -> list[Any]:
    """``x`` cut into sequences of H heads: a tensor, or a (bound, magnitude) pair of them."""
    if isinstance(x, tuple):
        return list(zip(*(torch.split(t, H) for t in x), strict=True))
    return list(torch.split(x, H))


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


SequenceGradients = Callable[..., dict[str, tuple[torch.Tensor, ...]]]
"""One sequence's gradient bounds and magnitudes by input name, heads first, from ``(seq, raw q,
raw k, do, dS_T)`` (float64, heads first): ``(bound, magnitude)``, or ``(bound, magnitude,
exact gradient)`` from a bound that sweeps the exact recurrence anyway (`sequence_gradients`'
values: then `reference_gradients` is not run again)."""


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
    exact: dict[str, torch.Tensor] | None = None,
) -> dict[str, TensorBound]:
    """Run ``one_sequence`` on every sequence and assemble the `TensorBound` of each gradient.

    The reference is ``exact`` (`reference_gradients`, computed by the caller before the
    bounds so that the two passes' working sets do not add up), or, where `None`, the exact
    gradients ``one_sequence`` returns beside its bounds. Each bound gets the rounding of the
    gradient to its input's dtype (u |ref| and half the smallest subnormal); a scalar gate's
    dg is the sum over K of the per-dimension pieces, charged ``gate_sum`` of its magnitude.
    Sequences of one length run together, ``most`` at a time (`sequence_groups`).
    """
    H = problem.shape[2]
    do64 = do.to(torch.float64)
    groups = []
    with torch.no_grad():
        # The float64 problem only builds the sequences. Under an in-kernel L2 norm they hold
        # normalised copies of q and k, and the raw q and k are passed as the kernel received
        # them (each reader converts its slice, exactly): the float64 q and k, 134 MB at
        # T = 65,536 and H = 2, are not held through the bounds.
        for spans, seq in sequence_groups(problem.to(torch.float64), most=most):
            dS = torch.cat([_final_cotangent(problem, d_final_state, span[0]) for span in spans])
            heads_first = [_heads_first(x, spans) for x in (problem.q, problem.k, do64)]
            groups.append((spans, one_sequence(seq, *heads_first, dS)))
            del seq, heads_first  # hundreds of MB at T = 65,536: not held through the assembly
    del do64
    per_seq = per_sequence(groups, _split(H))
    del groups
    pieces, mags = _collect(per_seq, 0), _collect(per_seq, 1)
    # A bound that swept the exact recurrence returns the exact gradients too (a third item).
    if exact is None:
        exact = _token_layout(problem, [{n: x[2] for n, x in one.items()} for one in per_seq])
    # Each gradient's heads-first pieces are let go once laid out (nothing else may hold
    # them): at T = 65,536 they are hundreds of MB.
    del per_seq
    named: dict[str, TensorBound] = {}
    for name, reference in exact.items():
        if name == "initial_state":
            bound = torch.stack(pieces.pop(name))
            magnitude = torch.stack(mags.pop(name))
        else:
            bound = _tokens(pieces.pop(name, []), reference)
            magnitude = _tokens(mags.pop(name, []), reference)
            if name == "g" and not problem.vector_gate:
                bound, magnitude = bound.sum(-1), magnitude.sum(-1)
                bound = bound + gate_sum * magnitude
        # The gradient is returned in its input's dtype: one more rounding.
        dtype = dtype_name(problem.inputs()[name].dtype)
        stored = max(UNIT_ROUNDOFF.get(dtype, units.u), units.u)
        bound = bound.reshape(reference.shape).add_(reference.abs(), alpha=stored)
        bound = bound.add_(SMALLEST_SUBNORMAL.get(dtype, 0.0) / 2)
        named["d" + name] = TensorBound(
            name="d" + name,
            reference=reference,
            bound=bound,
            magnitude=magnitude.reshape(reference.shape),
            count=reference.new_tensor(float(count)).expand_as(reference),
            unit=units.acc,
            # An infinite (or NaN) bound certifies nothing: γ_n, n u >= 1 (`core.rounding.gamma`).
            verifiable=torch.isfinite(bound),
        )
    return named


def _collect(
    per_seq: list[dict[str, tuple[torch.Tensor, ...]]], item: int
) -> dict[str, list[torch.Tensor]]:
    """Item ``item`` of every sequence's result, by name (an empty sequence may have none)."""
    out: dict[str, list[torch.Tensor]] = {}
    for one in per_seq:
        for name, x in one.items():
            out.setdefault(name, []).append(x[item])
    return out


def _tokens(parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Sequence pieces ``[H, L, ...]`` back to the token layout ``[B, T, H, ...]`` of ``like``."""
    if not parts:
        return torch.zeros_like(like, dtype=torch.float64)
    flat = torch.cat([x.transpose(0, 1) for x in parts], 0)  # [ΣL, H, ...]
    tail = flat.shape[2:]
    B, T, H = like.shape[:3]
    return flat.reshape(B, T, H, *tail) if tail else flat.reshape(B, T, H)


__all__ = [
    "GRADIENTS",
    "SequenceGradients",
    "assemble_gradient_bounds",
    "block_gradients",
    "gradient_rows",
    "l2norm_chain",
    "reference_gradients",
    "sequence_gradients",
]
