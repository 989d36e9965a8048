# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Which gradient elements depend on a set of output rows (docs/error-model.md §3, §3.1).

The masks follow from the function's structure alone (causality within a sequence and head),
not from any magnitude: an undefined or unverifiable row makes every element that depends on it
undefined or unverifiable too.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn.semantics import Problem


def depends_on_rows(
    problem: Problem, rows: torch.Tensor, *, whole_sequence: bool = False
) -> dict[str, torch.Tensor]:
    """Return, per gradient, the elements that depend on ``rows``.

    Keyed as `linattn_verify.linear_attn.tolerance.GRADIENT_NAMES`.

    ``rows`` ``[B, T, H]`` marks output rows o_t (of one head). With j and t positions of one
    sequence, o_t depends on q_t, on k_j, v_j, g_j for every j <= t (the weight of key j in row t
    is exp(G_t - G_j) > 0, and a kernel's rounded weight multiplies whatever row t contributes),
    and on S_0, z_0 of its sequence, all of the same head; so the elements returned are dq_t;
    dk_j, dv_j, dg_j for j <= t; dS_0 and dz_0 of the sequence (docs/error-model.md §3).

    With ``whole_sequence``, every gradient element of a (sequence, head) holding such a row:
    an IEEE backward divides by the zero denominator (do/Z = inf), and a correct kernel that
    masks its scores by multiplication turns the masked 0 · inf into NaN for every key of the
    chunk and, through the state's adjoint, of every earlier chunk (docs/error-model.md §3.1).

    Returns:
        Boolean masks for ``q``, ``k``, ``v`` (``[B, T, H, K|V]``), ``g`` (g's shape),
        ``initial_state`` (``[N, H, K, V]``) and ``initial_key_sum`` (``[N, H, K]``).
    """
    B, T, H, K, V = problem.shape
    rows = rows.to(torch.bool).clone()
    later = torch.zeros_like(rows)
    sequence = torch.zeros(problem.num_sequences, H, dtype=torch.bool, device=rows.device)
    for n, b, start, end in problem.sequences():
        if end > start:
            r = rows[b, start:end].to(torch.int8)  # [L, H]
            # Some row at or after position j: a reverse running maximum.
            later[b, start:end] = torch.flip(torch.cummax(torch.flip(r, [0]), 0).values, [0]) > 0
            sequence[n] = r.bool().any(0)
            if whole_sequence:
                rows[b, start:end] = later[b, start:end] = sequence[n]
    N = problem.num_sequences
    return {
        "q": rows[..., None].expand(B, T, H, K),
        "k": later[..., None].expand(B, T, H, K),
        "v": later[..., None].expand(B, T, H, V),
        "g": later[..., None].expand(B, T, H, K) if problem.vector_gate else later,
        "initial_state": sequence[..., None, None].expand(N, H, problem.feature_dim, V),
        "initial_key_sum": sequence[..., None].expand(N, H, problem.feature_dim),
    }


__all__ = ["depends_on_rows"]
