# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo's vector-gate kernels: bug classes of docs/bug-classes.md with a gate per key dim.

A vector gate (GLA's g ``[B, T, H, K]``) decays each key dimension on its own, which gives the
old bugs new places to live: a weight factored per dimension overflows in some dimensions only,
a normalizer decayed with one dimension's gate is right for a scalar gate and wrong for a vector
one, a gate tensor read with the wrong layout is a silent permutation. Each kernel here is
`vector_parallel_one` (the parallel form with per-dimension weights, evaluated per sequence in
float32) with one bug; the correct twin is the same function without it. The kernels declare
vector gates only (``gates=("vector",)``), so every gated case the search draws is a vector one.

Loaded by path by `bugs.py`'s users (the zoo's ``conftest.py`` and `cli_targets.py`), after
`bugs.py`, whose helpers (`per_sequence`, `_entry`) it reuses.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from linattn_verify.core.loading import import_file
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles._sequence import divide_rows
from linattn_verify.linear_attn.reference_kernels import (
    RECIPES,
    REFERENCE_CHUNK_SIZE,
    convention_kernel,
)
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.registry import FULL

bugs = import_file(Path(__file__).with_name("bugs.py"), "_linattn_zoo_bugs_for_vector")

State = Any
C = REFERENCE_CHUNK_SIZE
# A vector gate takes no lifted feature map (they have no key dimensions to decay).
VECTOR_CAPS = replace(FULL, gates=("vector",), feature_maps=("identity", "elu1", "relu"))
"""What the vector-gate kernels support: everything, with g ``[B, T, H, K]`` only."""


def _masked_weights(G_rows: torch.Tensor, G_cols: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """exp(G_t - G_j) per dimension ``[H, L, L', K]``, the exponent masked to -inf first."""
    diff = G_rows[:, :, None, :] - G_cols[:, None, :, :]
    return torch.exp(torch.where(mask[None, :, :, None], diff, float("-inf")))


def vector_parallel_one(x: Problem, bug: str | None = None) -> tuple[torch.Tensor, State]:
    """The parallel form with a vector gate on one float32 sequence (B = 1), with an optional bug.

    Correct (``bug=None``): A_tj = Σ_m q̃_tm k̃_jm exp(G_tm - G_jm) (j <= t), o_t = s Σ_j A_tj v_j
    + s (q̃_t ⊙ e^{G_t})^T S_0, and the normalizer the same with v -> 1 and S_0 -> z_0. The bugs:

    * ``"factored"``: exp(G_tm) / exp(G_jm) (0/0 once both underflow, in the steep dims only);
    * ``"total_minus_prefix"``: G from the cumsum whose backward forms each dimension's suffix
      sum as total - prefix (`bugs._TotalMinusPrefixCumsum`): dg loses the small suffixes;
    * ``"normalizer_first_gate"``: the normalizer decays every dimension with dimension 0's gate
      (right for a scalar gate, the only kind the kernel was tested with);
    * ``"initial_state_undecayed"``: S_0 and z_0 are read by q̃_t without e^{G_t};
    * ``"tail_gate_dropped"``: the final state of a sequence whose length is not a multiple of
      C takes the tokens of its partial last chunk undecayed (a separate tail path that forgets
      the gate).
    """
    s = x.scale
    q = apply_feature_map(x.q[0], x.feature_map).transpose(0, 1)  # [H, L, K]
    k = apply_feature_map(x.k[0], x.feature_map).transpose(0, 1)  # [H, L, K]
    v = x.v[0].transpose(0, 1)  # [H, L, V]
    H, L, K = q.shape
    g = q.new_zeros(H, L, K) if x.g is None else x.g[0].transpose(0, 1)  # [H, L, K]
    if bug == "total_minus_prefix":
        G = bugs._TotalMinusPrefixCumsum.apply(g.transpose(1, 2)).transpose(1, 2)
    else:
        G = torch.cumsum(g, dim=1)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    if bug == "factored":
        w = torch.exp(G)[:, :, None, :] / torch.exp(G)[:, None, :, :] * causal[None, :, :, None]
    else:
        w = _masked_weights(G, G, causal)
    A = torch.einsum("htm,hjm,htjm->htj", q, k, w)
    q_read = q if bug == "initial_state_undecayed" else q * torch.exp(G)
    N = s * (A @ v)
    if x.initial_state is not None:
        N = N + s * q_read @ x.initial_state[0]
    # The final state: weights exp(G_T - G_j) into it, exp(G_T) on S_0. With the tail bug the
    # state stops decaying at the last chunk boundary b: weights exp(G_{b-1} - G_j) before it,
    # 1 for the tail's own keys.
    tail = L % C if bug == "tail_gate_dropped" else 0
    b = L - tail
    G_end = G[:, b - 1 : b] if b > 0 else q.new_zeros(H, 1, K)
    exponent = G_end - G
    if tail:
        exponent = torch.where(torch.arange(L)[None, :, None] >= b, 0.0, exponent)
    into_state = torch.exp(exponent)  # [H, L, K]
    total = torch.exp(G_end[:, 0])  # [H, K]
    S_T = torch.einsum("hjm,hjv->hmv", k * into_state, v)
    if x.initial_state is not None:
        S_T = S_T + total[..., None] * x.initial_state[0]
    o = N.transpose(0, 1)[None]
    if not x.normalize:
        return o, S_T[None]
    if bug == "normalizer_first_gate":
        G_z = G[..., :1].expand_as(G)
        A_z = torch.einsum("htm,hjm,htjm->htj", q, k, _masked_weights(G_z, G_z, causal))
    else:
        A_z = A
    Z = s * A_z.sum(-1)
    z_T = (k * into_state).sum(1)
    if x.initial_key_sum is not None:
        Z = Z + s * (q_read * x.initial_key_sum[0][:, None, :]).sum(-1)
        z_T = z_T + total * x.initial_key_sum[0]
    o = divide_rows(N.transpose(0, 1)[None], Z.transpose(0, 1)[None] + x.eps)
    return o, (S_T[None], z_T[None])


def _vector_with(bug: str | None, doc: str) -> Any:
    """`vector_parallel_one` with ``bug`` on each sequence, as a kernel named ``vector_<bug>``."""

    def impl(p: Problem) -> tuple[torch.Tensor, State]:
        return bugs.per_sequence(p, functools.partial(vector_parallel_one, bug=bug))

    impl.__name__ = f"vector_{bug or 'parallel'}"
    impl.__doc__ = doc
    return impl


VECTOR_TWIN = Kernel(
    name="zoo-twin/vector-parallel",
    fn=convention_kernel(_vector_with(None, "The correct vector-gate parallel form.")),
    capabilities=VECTOR_CAPS,
    recipe=RECIPES["parallel"],
)

vector_factored = _vector_with("factored", "Per-dimension weights as exp(G_t) / exp(G_j).")
vector_total_minus_prefix = _vector_with(
    "total_minus_prefix", "dg per dimension as total - prefix (fla PR #1095, per dimension)."
)
vector_normalizer_first_gate = _vector_with(
    "normalizer_first_gate", "The normalizer decayed with dimension 0's gate in every dimension."
)
vector_initial_state_undecayed = _vector_with(
    "initial_state_undecayed", "S_0 and z_0 read without the per-dimension decay e^{G_t}."
)
vector_tail_gate_dropped = _vector_with(
    "tail_gate_dropped", "The partial last chunk's tokens enter the final state undecayed."
)


def vector_gate_head_first(p: Problem) -> tuple[torch.Tensor, State]:
    """The gate g ``[B, T, H, K]`` read as if it were head-first ``[B, H, T, K]`` (q, k, v right).

    The layout bug of fla #547 on the one tensor a GLA kernel adds: a permutation of the gates
    when H > 1 and T > 1, invisible with one head.
    """
    if p.g is not None:
        B, T, H, K = p.g.shape
        p = replace(p, g=p.g.contiguous().reshape(B, H, T, K).transpose(1, 2))
    return bugs.per_sequence(p, vector_parallel_one)


VECTOR_ZOO = (
    bugs._entry(vector_factored, VECTOR_TWIN, "gate overflow", "GLA's e^G q, e^-G k factoring"),
    bugs._entry(vector_total_minus_prefix, VECTOR_TWIN, "precision", "fla PR #1095 per dim"),
    bugs._entry(
        vector_normalizer_first_gate, VECTOR_TWIN, "normalization", "a scalar-gate normalizer"
    ),
    bugs._entry(vector_initial_state_undecayed, VECTOR_TWIN, "state", "fla #285 with gk"),
    bugs._entry(
        vector_tail_gate_dropped, VECTOR_TWIN, "tail and length", "fla lightning_attn tail"
    ),
    bugs._entry(vector_gate_head_first, VECTOR_TWIN, "shapes and layout", "fla #547 for g"),
)
"""The vector-gate zoo: six bug classes, one twin."""
