# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunked form of the reference, in the precision of its inputs.

The algorithm a chunked kernel runs, written with torch so that float64 inputs make it an
oracle (docs/error-model.md §6.4) and float32 inputs make it a faithful fp32 chunked computation. It
is differentiable in q, k, v, g and the initial state and runs wherever torch does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.oracles._sequence import (
    SequenceResult,
    State,
    assemble,
    divide_rows,
    require_problem,
    sequence_inputs,
)
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged

Normalizer = Callable[[torch.Tensor], torch.Tensor]
"""The denominator from Z (`Problem.denominator`): Z + eps, or max(Z, eps)."""


@judged
def chunk_reference(problem: Problem, chunk_size: int = 64) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the chunked form, in the dtype of ``problem.q``.

    Per sequence, split into chunks of C tokens (the last one may be shorter), with Gl the
    chunk-local cumulative sum of g and S, z the state entering the chunk:

        intra:  P_ij = s (φ(q_i)·φ(k_j)) exp(Gl_i - Gl_j), masked to j <= i *before* the exp
        N_i = Σ_j P_ij v_j + s exp(Gl_i) φ(q_i)^T S
        Z_i = Σ_j P_ij + s exp(Gl_i) φ(q_i)^T z, then + eps (or max(Z_i, eps): ``clamp``)
        S <- exp(Gl_end) S + Σ_j exp(Gl_end - Gl_j) φ(k_j) v_j^T   (z likewise with φ(k_j))

    With a vector gate (g ``[B, T, H, K]``) the same per key dimension m, Gl the chunk-local
    cumulative sum per dimension:

        intra:  P_ij = s Σ_m φ(q_i)_m φ(k_j)_m exp(Gl_im - Gl_jm), masked to j <= i before the exp
        N_i = Σ_j P_ij v_j + s (exp(Gl_i) ⊙ φ(q_i))^T S     (Z_i likewise with z)
        S <- diag(exp(Gl_end)) S + Σ_j (exp(Gl_end - Gl_j) ⊙ φ(k_j)) v_j^T

    Every decay factor is an exp of a difference <= 0, never exp(G_i) / exp(G_j), so nothing
    overflows however steep the gate (intra-chunk memory is O(H C² K)).

    A normalized row whose Z is exactly zero returns 0 (`linattn_verify.linear_attn.semantics`).

    Args:
        problem: A validated problem (see `linattn_verify.linear_attn.semantics.validate_problem`).
        chunk_size: Tokens per chunk, C >= 1. Default: `64`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` with z_T ``[N, H, K]`` for normalized problems.

    Raises:
        InvalidArgument: if ``problem`` is not a `Problem` or ``chunk_size`` is not an int >= 1.
    """
    require_problem(problem)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise InvalidArgument(
            f"Expected chunk_size to be an int but got chunk_size={chunk_size!r} "
            f"(type={type(chunk_size).__name__})."
        )
    if chunk_size < 1:
        raise InvalidArgument(f"Got chunk_size={chunk_size}, but chunk_size must be >= 1.")
    return assemble(problem, functools.partial(_sequence, problem, chunk_size))


def _sequence(problem: Problem, C: int, n: int, b: int, start: int, end: int) -> SequenceResult:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.outer_scale
    seq = sequence_inputs(problem, n, b, start, end, heads_first=True)
    # q, k [H, L, K], v [H, L, V], g [H, L] (or [H, L, K], a vector gate)
    q, k, v, g = seq.q, seq.k, seq.v, seq.g
    H, L, V = seq.H, seq.L, seq.V
    S, z = seq.S0, seq.z0
    normalizer = problem.denominator if problem.normalize else None
    if not L:  # no chunk for an empty sequence
        return q.new_zeros(H, 0, V).transpose(0, 1), S, z
    # Under autograd (the gradient oracle) each chunk is recomputed in the backward rather than
    # saved: a vector gate's [H, C, C, K] weights per chunk would be O(T·C·K) memory.
    if torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, g, S, z)
    ):
        o, S, z = _Recomputed.apply(s, normalizer, C, q, k, v, g, S, z)  # type: ignore[no-untyped-call]
    else:
        o, S, z = _run_chunks(s, normalizer, C, (q, k, v, g), S, z)
    return o.transpose(0, 1), S, z


def _chunks(x: torch.Tensor | None, C: int, L: int) -> tuple[torch.Tensor | None, ...]:
    """``x`` ``[H, L, ...]`` split into chunks of C tokens (views), or `None` per chunk."""
    return (None,) * -(-L // C) if x is None else torch.split(x, C, dim=1)


def _run_chunks(
    s: float,
    normalizer: Normalizer | None,
    C: int,
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
    S: torch.Tensor,
    z: torch.Tensor,
    states: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every chunk of one sequence in order: o ``[H, L, V]`` and the final S, z.

    With ``states`` (``[chunks, H, K, V]``, ``[chunks, H, K]``) the state entering each chunk
    is written there, for the backward (`_Recomputed`). The output and those states go into
    tensors allocated once: per-chunk tensors that outlive their chunk would be scattered
    between its short-lived [H, C, C, K] temporaries and keep the freed heap resident.
    """
    q = inputs[0]
    H, L, V = q.shape[0], q.shape[1], inputs[2].shape[-1]
    o: torch.Tensor | None = None
    parts = zip(*(_chunks(x, C, L) for x in inputs), strict=True)
    for i, (qc, kc, vc, gc) in enumerate(parts):
        if states is not None:
            states[0][i].copy_(S)
            states[1][i].copy_(z)
        out, S, z = _chunk(s, normalizer, qc, kc, vc, gc, S, z)
        if o is None:
            o = out.new_empty(H, L, V)
        o[:, i * C : i * C + out.shape[1]] = out
        del out
    assert o is not None
    return o, S, z


def _chunk(
    s: float,
    normalizer: Normalizer | None,
    qc: torch.Tensor,
    kc: torch.Tensor,
    vc: torch.Tensor,
    gc: torch.Tensor | None,
    S: torch.Tensor,
    z: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk: its output (divided by ``normalizer(Z)`` unless it is `None`), next S, z."""
    n = qc.shape[1]
    A = s * (qc @ kc.transpose(-1, -2))  # [H, n, n]
    mask = torch.ones(n, n, dtype=torch.bool, device=qc.device).tril()
    if gc is not None and gc.ndim == 3:
        N, Zc, S, z = _vector_chunk(s, qc, kc, vc, gc, mask, S, z)
    elif gc is None:
        P = A.masked_fill(~mask, 0)
        N = P @ vc + s * (qc @ S)
        Zc = P.sum(-1) + s * (qc @ z[..., None])[..., 0]
        S = S + kc.transpose(-1, -2) @ vc
        z = z + kc.sum(dim=1)
    else:
        Gl = torch.cumsum(gc, dim=-1)  # [H, n]
        # Masking before the exp keeps exp(Gl_i - Gl_j) for j > i (which can overflow once
        # |Gl| > 709) out of the computation, so no inf * 0 reaches values or gradients.
        diff = (Gl[:, :, None] - Gl[:, None, :]).masked_fill(~mask, float("-inf"))
        P = A * torch.exp(diff)
        w_in = torch.exp(Gl)  # [H, n]: decay from the chunk start to token i
        N = P @ vc + s * w_in[..., None] * (qc @ S)
        Zc = P.sum(-1) + s * w_in * (qc @ z[..., None])[..., 0]
        Gl_end = Gl[:, -1:]
        # exp(Gl_end - Gl_j) is the decay from token j to the chunk end, evaluated directly
        # rather than as exp(Gl_end) / exp(Gl_j), which under- or overflows for steep g.
        kw = kc * torch.exp(Gl_end - Gl)[..., None]  # [H, n, K]
        total = torch.exp(Gl_end)  # [H, 1]
        S = total[..., None] * S + kw.transpose(-1, -2) @ vc
        z = total * z + kw.sum(dim=1)
    return (N if normalizer is None else divide_rows(N, normalizer(Zc))), S, z


class _Recomputed(torch.autograd.Function):
    """Every chunk of one sequence, each recomputed in the backward instead of saved.

    What ``torch.utils.checkpoint`` per chunk does, without its first call's import of torch's
    compiler stack (seconds): the forward runs the chunks without a graph, keeping only the
    state entering each; the backward goes through the chunks last to first, runs `_chunk`
    again under autograd on the chunk's inputs and that state, and differentiates it with the
    output's and the next state's cotangents: per chunk the same graph and the same
    ``autograd.grad`` as one node per chunk would take. One node for the whole sequence lets
    the saved states and the gradients live in tensors allocated once (`_run_chunks`):
    O(T) memory, nothing per chunk left behind on the heap.
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        s: float,
        normalizer: Normalizer | None,
        C: int,
        *inputs: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v, g, S, z = inputs
        assert q is not None
        assert k is not None
        assert v is not None
        assert S is not None
        assert z is not None
        n = -(-q.shape[1] // C)
        states = (S.new_empty(n, *S.shape), z.new_empty(n, *z.shape))
        o, S_T, z_T = _run_chunks(s, normalizer, C, (q, k, v, g), S, z, states)
        ctx.s, ctx.normalizer, ctx.C, ctx.states = s, normalizer, C, states  # type: ignore[attr-defined]
        ctx.save_for_backward(q, k, v, g, inputs[4], inputs[5])  # type: ignore[arg-type]
        return o, S_T, z_T

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx,
        d_o: torch.Tensor,
        dS: torch.Tensor,
        dz: torch.Tensor,
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, S0, z0 = ctx.saved_tensors  # type: ignore[attr-defined]
        states, C = ctx.states, ctx.C  # type: ignore[attr-defined]
        L = q.shape[1]
        need = ctx.needs_input_grad[3:]  # type: ignore[attr-defined]
        tokens = (q, k, v, g)
        grads = [
            x.new_zeros(x.shape) if x is not None and w else None
            for x, w in zip(tokens, need[:4], strict=True)
        ]
        for i in reversed(range(len(states[0]))):
            a, b = i * C, min(i * C + C, L)
            first = i == 0
            # The state entering chunk i: the inputs' own for the first chunk; any other was
            # an output of the chunk before it, as differentiable as that chunk's inputs.
            state_in = (S0, z0) if first else (states[0][i], states[1][i])
            state_need = need[4:] if first else (True, True)
            parts = [
                None if x is None else x[:, a:b].detach().requires_grad_(w)
                for x, w in zip(tokens, need[:4], strict=True)
            ] + [x.detach().requires_grad_(w) for x, w in zip(state_in, state_need, strict=True)]
            wanted = [x for x in parts if x is not None and x.requires_grad]
            with torch.enable_grad():
                outputs = _chunk(ctx.s, ctx.normalizer, *parts)  # type: ignore[attr-defined, arg-type]
            # An output that no input of this chunk reaches has no graph to differentiate.
            pairs = [
                (y, dy)
                for y, dy in zip(outputs, (d_o[:, a:b], dS, dz), strict=True)
                if y.requires_grad
            ]
            found = iter(
                torch.autograd.grad(
                    [y for y, _ in pairs], wanted, [dy for _, dy in pairs], allow_unused=True
                )
                if wanted and pairs
                else [None] * len(wanted)
            )
            per_part = [next(found) if x is not None and x.requires_grad else None for x in parts]
            del outputs, pairs, found
            for buffer, grad in zip(grads, per_part[:4], strict=True):
                if buffer is not None and grad is not None:
                    buffer[:, a:b] = grad
            # A state's unused cotangent is zeros, as autograd hands an unused output's on.
            dS, dz = (
                torch.zeros_like(x) if d is None else d
                for x, d in zip(state_in, per_part[4:], strict=True)
            )
        return (None, None, None, *grads, dS if need[4] else None, dz if need[5] else None)


def _vector_chunk(
    s: float,
    qc: torch.Tensor,
    kc: torch.Tensor,
    vc: torch.Tensor,
    gc: torch.Tensor,
    mask: torch.Tensor,
    S: torch.Tensor,
    z: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return N, Z (without eps) and the outgoing S, z of one chunk under a vector gate.

    Args:
        s: The scale.
        qc: φ(q) of the chunk ``[H, n, K]``.
        kc: φ(k) of the chunk ``[H, n, K]``.
        vc: Values of the chunk ``[H, n, V]``.
        gc: Log decay of the chunk ``[H, n, K]``.
        mask: The causal mask ``[n, n]``.
        S: State entering the chunk ``[H, K, V]``.
        z: Key sum entering the chunk ``[H, K]``.
    """
    Gl = torch.cumsum(gc, dim=1)  # [H, n, K], chunk-local per key dimension
    # Masked before the exp, as in the scalar case: Gl_im - Gl_jm > 0 for j > i may overflow.
    diff = (Gl[:, :, None, :] - Gl[:, None, :, :]).masked_fill(~mask[..., None], float("-inf"))
    P = s * (qc[:, :, None, :] * kc[:, None, :, :] * torch.exp(diff)).sum(-1)  # [H, n, n]
    # exp(Gl_i) <= 1: the decay from the chunk start to token i, per dimension, on φ(q_i).
    q_in = qc * torch.exp(Gl)
    N = P @ vc + s * (q_in @ S)
    Zc = P.sum(-1) + s * (q_in @ z[..., None])[..., 0]
    Gl_end = Gl[:, -1:]  # [H, 1, K]
    # exp(Gl_end - Gl_j) <= 1 directly, never exp(Gl_end) / exp(Gl_j).
    kw = kc * torch.exp(Gl_end - Gl)  # [H, n, K]
    total = torch.exp(Gl_end[:, 0])  # [H, K]
    S = total[..., None] * S + kw.transpose(-1, -2) @ vc
    z = total * z + kw.sum(dim=1)
    return N, Zc, S, z


__all__ = ["chunk_reference"]
