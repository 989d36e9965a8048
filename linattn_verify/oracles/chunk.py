# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunked form of the reference, in the precision of its inputs.

The algorithm a chunked kernel runs, written with torch so that float64 inputs make it an
oracle (ERROR_MODEL.md §6.4) and float32 inputs make it a faithful fp32 chunked computation. It
is differentiable in q, k, v, g and the initial state and runs wherever torch does.
"""

from __future__ import annotations

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.feature_maps import apply_feature_map, vanishes
from linattn_verify.oracles.parallel import State
from linattn_verify.semantics import Problem


def chunk_reference(problem: Problem, chunk_size: int = 64) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the chunked form, in the dtype of ``problem.q``.

    Per sequence, split into chunks of C tokens (the last one may be shorter), with Gl the
    chunk-local cumulative sum of g and S, z the state entering the chunk:

        intra:  P_ij = s (φ(q_i)·φ(k_j)) exp(Gl_i - Gl_j), masked to j <= i *before* the exp
        N_i = Σ_j P_ij v_j + s exp(Gl_i) φ(q_i)^T S
        Z_i = Σ_j P_ij + s exp(Gl_i) φ(q_i)^T z + eps
        S <- exp(Gl_end) S + Σ_j exp(Gl_end - Gl_j) φ(k_j) v_j^T   (z likewise with φ(k_j))

    A normalized row whose Z is exactly zero returns 0 (`linattn_verify.semantics`).

    Args:
        problem: A validated problem (see `linattn_verify.semantics.validate_problem`).
        chunk_size: Tokens per chunk, C >= 1. Default: `64`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` with z_T ``[N, H, K]`` for normalized problems.

    Raises:
        InvalidArgument: if ``problem`` is not a `Problem` or ``chunk_size`` is not an int >= 1.
    """
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.semantics.Problem but got "
            f"{type(problem).__name__}; build one with validate_problem(...)."
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise InvalidArgument(
            f"Expected chunk_size to be an int but got chunk_size={chunk_size!r} "
            f"(type={type(chunk_size).__name__})."
        )
    if chunk_size < 1:
        raise InvalidArgument(f"Got chunk_size={chunk_size}, but chunk_size must be >= 1.")
    outputs, states, key_sums = [], [], []
    for n, b, start, end in problem.sequences():
        o, S, z = _sequence(problem, chunk_size, n, b, start, end)
        outputs.append(o)
        states.append(S)
        key_sums.append(z)
    # Sequences tile the (B, T) axes in order, so concatenating their rows restores [B, T, H, V].
    o = torch.cat(outputs, dim=0).reshape(*problem.q.shape[:3], problem.v.shape[-1])
    if not problem.output_final_state:
        return o, None
    S_T = torch.stack(states, dim=0)
    if problem.normalize:
        return o, (S_T, torch.stack(key_sums, dim=0))
    return o, S_T


def _sequence(
    problem: Problem, C: int, n: int, b: int, start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.scale
    q = apply_feature_map(problem.q[b, start:end], problem.feature_map).transpose(0, 1)  # [H, L, K]
    k = apply_feature_map(problem.k[b, start:end], problem.feature_map).transpose(0, 1)  # [H, L, K]
    v = problem.v[b, start:end].transpose(0, 1)  # [H, L, V]
    H, L, K = q.shape
    V = v.shape[-1]
    g = None if problem.g is None else problem.g[b, start:end].to(q.dtype).transpose(0, 1)
    S = _initial(problem.initial_state, n, (H, K, V), q)
    z = _initial(problem.initial_key_sum, n, (H, K), q)
    outputs = []
    for c0 in range(0, L, C):
        c1 = min(c0 + C, L)
        qc, kc, vc = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1]
        A = s * (qc @ kc.transpose(-1, -2))  # [H, n, n]
        mask = torch.ones(c1 - c0, c1 - c0, dtype=torch.bool, device=q.device).tril()
        if g is None:
            P = A.masked_fill(~mask, 0)
            N = P @ vc + s * (qc @ S)
            Zc = P.sum(-1) + s * (qc @ z[..., None])[..., 0]
            S = S + kc.transpose(-1, -2) @ vc
            z = z + kc.sum(dim=1)
        else:
            Gl = torch.cumsum(g[:, c0:c1], dim=-1)  # [H, n]
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
        if problem.normalize:
            Zc = Zc + problem.eps
            zero = vanishes(Zc)
            # Rows whose denominator is exactly zero return 0 (semantics.py); the safe divisor
            # keeps autograd free of 0/0 on the discarded branch.
            oc = torch.where(
                zero[..., None], torch.zeros_like(N), N / torch.where(zero, 1, Zc)[..., None]
            )
        else:
            oc = N
        outputs.append(oc)
    o = torch.cat(outputs, dim=1) if outputs else q.new_zeros(H, 0, V)
    return o.transpose(0, 1), S, z


def _initial(
    state: torch.Tensor | None, n: int, shape: tuple[int, ...], like: torch.Tensor
) -> torch.Tensor:
    if state is None:
        return like.new_zeros(shape)
    return state[n].to(like.dtype)


__all__ = ["chunk_reference"]
