# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The exact (float64) gradients of a linear-attention problem: the gradient bounds' reference.

Autograd through a float64 oracle: the dense parallel form for short sequences, the chunked
form (each chunk recomputed in the backward) for long ones, where the bounds scan too
(`linattn_verify.linear_attn._bounds.terms.DENSE_TOKENS`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from linattn_verify.linear_attn._bounds.assembly import cotangent_loss, split_final_cotangent
from linattn_verify.linear_attn._bounds.terms import DENSE_TOKENS, DENSE_VECTOR_TOKENS
from linattn_verify.linear_attn.semantics import Problem

ORACLE_CHUNK = 32
"""Chunk size of the float64 chunked oracle the gradients use beyond `DENSE_TOKENS` tokens: its
[H, C, C, K] work per chunk is O(T·C·K) in all, the per-chunk Python and autograd overhead
O(T / C). At T = 16,384, H = 2, K = V = 64 the gradients took 1.39 s (scalar gate) and 5.65 s
(vector gate) with C = 64, 1.23 s and 3.04 s with 32, 2.44 s and 3.05 s with 16."""


def reference_gradients(
    problem: Problem, do: torch.Tensor, d_final_state: object = None
) -> dict[str, torch.Tensor]:
    """Return the exact (float64) gradients of <o, do> + <S_T, dS_T> + <z_T, dz_T>.

    Computed by torch autograd through the float64 parallel reference, or for sequences longer
    than `DENSE_TOKENS` (`DENSE_VECTOR_TOKENS` under a vector gate) the chunked one (O(T·C) time,
    O(T) memory: each chunk is recomputed in the backward; docs/error-model.md §6.5).
    Keys are those of `GRADIENT_NAMES` whose input exists (``g`` only with decay,
    ``initial_state`` only when one was given).
    """
    from linattn_verify.linear_attn.oracles.chunk import chunk_reference
    from linattn_verify.linear_attn.oracles.parallel import parallel_reference

    p = problem.to(torch.float64)
    split_final_cotangent(d_final_state, p)  # validates the cotangent's layout
    p = replace(p, output_final_state=True)
    # Fresh autograd leaves sharing the inputs' storage (nothing writes them): the problem is
    # not copied (`Problem.with_grad_leaves` clones, [B, T, H, K] float64 per input).
    leaves = {name: t.detach().requires_grad_(True) for name, t in p.inputs().items()}
    p = p.with_tensors(**leaves)
    longest = max((end - start for _, _, start, end in p.sequences()), default=0)
    with torch.enable_grad():
        if longest <= (DENSE_VECTOR_TOKENS if p.vector_gate else DENSE_TOKENS):
            o, final = parallel_reference(p)
        else:
            o, final = chunk_reference(p, chunk_size=ORACLE_CHUNK)
        loss = cotangent_loss(o, final, do, d_final_state)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        name: (torch.zeros_like(leaf) if grad is None else grad)
        for (name, leaf), grad in zip(leaves.items(), grads, strict=True)
    }


__all__ = ["ORACLE_CHUNK", "reference_gradients"]
