# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel (masked quadratic) form of the reference, in the precision of its inputs.

Fed float64 tensors it is the tier-0 oracle of ERROR_MODEL.md §6.4; it is differentiable in q,
k, v, g and the initial state, and runs wherever torch does (CPU or CUDA).
"""

from __future__ import annotations

import torch

from linattn_verify.feature_maps import apply_feature_map, vanishes
from linattn_verify.semantics import Problem

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None


def parallel_reference(problem: Problem) -> tuple[torch.Tensor, State]:
    """Evaluate the problem in the parallel form, in the dtype of ``problem.q``.

    Per sequence: P = s (φ(Q)φ(K)^T ⊙ W), W_tj = exp(G_t - G_j) masked to j <= t *before* the exp,
    N = P V + s exp(G_t) φ(q_t)^T S_0, Z = Σ_j P_tj + s exp(G_t) φ(q_t)^T z_0 + eps.

    Args:
        problem: A validated problem (see `linattn_verify.semantics`).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]``; final_state `None`, S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` for normalized problems.
    """
    outputs, states, key_sums = [], [], []
    for n, b, start, end in problem.sequences():
        o, S, z = _sequence(problem, n, b, start, end)
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
    problem: Problem, n: int, b: int, start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return o ``[L, H, V]``, S_T ``[H, K, V]`` and z_T ``[H, K]`` for one sequence."""
    s = problem.scale
    q = apply_feature_map(problem.q[b, start:end], problem.feature_map).transpose(0, 1)  # [H, L, K]
    k = apply_feature_map(problem.k[b, start:end], problem.feature_map).transpose(0, 1)  # [H, L, K]
    v = problem.v[b, start:end].transpose(0, 1)  # [H, L, V]
    H, L, K = q.shape
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    if problem.g is None:
        W = mask.to(q.dtype).expand(H, L, L)
        w_from_start = torch.ones(H, L, dtype=q.dtype, device=q.device)
        w_to_end = torch.ones(H, L, dtype=q.dtype, device=q.device)
    else:
        G = torch.cumsum(problem.g[b, start:end].to(q.dtype).transpose(0, 1), dim=-1)  # [H, L]
        diff = (G[:, :, None] - G[:, None, :]).masked_fill(~mask, float("-inf"))
        W = torch.exp(diff)
        w_from_start = torch.exp(G)
        G_end = G[:, -1:] if L else G.new_zeros(H, 1)
        w_to_end = torch.exp(G_end - G)
    P = s * (q @ k.transpose(-1, -2)) * W  # [H, L, L]
    N = P @ v
    S0 = _initial(problem.initial_state, n, (H, K, v.shape[-1]), q)
    z0 = _initial(problem.initial_key_sum, n, (H, K), q)
    N = N + s * w_from_start[..., None] * (q @ S0)
    total_decay = w_from_start[:, -1] if L else torch.ones(H, dtype=q.dtype, device=q.device)
    S_T = (k * w_to_end[..., None]).transpose(-1, -2) @ v + total_decay[:, None, None] * S0
    z_T = (k * w_to_end[..., None]).sum(dim=1) + total_decay[:, None] * z0
    if problem.normalize:
        Z = P.sum(-1) + s * w_from_start * (q @ z0[..., None])[..., 0] + problem.eps
        if problem.eps == 0:
            # N/Z is invariant to scaling a row by a constant; scaling by a power of two near
            # 1/|Z| is exact and keeps autograd's -N/Z^2 from under- or overflowing.
            row_scale = torch.exp2(-torch.floor(torch.log2(Z.detach().abs()))).nan_to_num(
                nan=1.0, posinf=1.0, neginf=1.0
            )
            row_scale = torch.where(torch.isfinite(row_scale) & (row_scale > 0), row_scale, 1.0)
            N, Z = N * row_scale[..., None], Z * row_scale
        zero = vanishes(Z)
        # Rows whose denominator is exactly zero return 0 (semantics.py); the safe divisor keeps
        # autograd free of 0/0 on the discarded branch.
        o = torch.where(
            zero[..., None], torch.zeros_like(N), N / torch.where(zero, 1, Z)[..., None]
        )
    else:
        o = N
    return o.transpose(0, 1), S_T, z_T


def _initial(
    state: torch.Tensor | None, n: int, shape: tuple[int, ...], like: torch.Tensor
) -> torch.Tensor:
    if state is None:
        return like.new_zeros(shape)
    return state[n].to(like.dtype)


__all__ = ["parallel_reference"]
