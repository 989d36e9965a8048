# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear-attention family's cases at the size reach's sizes (`linattn_verify.reach`)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from linattn_verify.core.sizes import fixed_scales
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import DTYPES, ProblemSpec
from linattn_verify.linear_attn.strategies._lifted import largest_key_dim
from linattn_verify.reach import REACH_HEADS, Size
from linattn_verify.typing import LIFTED_MAPS

REACH_MAX_FEATURES = 64
"""Largest feature dimension F of a lifted map's reach cases (its state is F x V)."""


def vector_gated(kernel: Kernel) -> bool:
    """Whether ``kernel``'s decay is a vector gate only (its reach cases then have one)."""
    cap = kernel.capabilities
    return cap.decay and kernel.implied_decay is None and "scalar" not in cap.gates


def reach_spec(kernel: Kernel, size: Size, seed: int) -> ProblemSpec:
    """A realistic case of ``size`` that ``kernel`` supports; the rest drawn from ``seed``.

    Normal values (positive q, k for a normalized kernel without a feature map of its own, so
    its denominators do not cancel), decays that keep the state alive across the whole sequence
    (mild or zero), the initial and final state where the kernel takes them; B = 1 and H = 2 (16
    at the many-heads sizes), so that a head stride is exercised without doubling the cost of
    long sequences. For a varlen
    kernel, half the cases pack the sequence of length T behind two short ones.
    """
    cap = kernel.capabilities
    rng = random.Random(
        seed * 1_000_003 + size.T * 4099 + size.K * 257 + size.V + (size.H - REACH_HEADS) * 7919
    )
    dtypes = [d for d in cap.dtypes if d in DTYPES]
    odd = size.K % 2 or size.V % 2
    dtype = rng.choice([d for d in dtypes if not (odd and d in cap.even_head_dims)] or dtypes)
    even = dtype in cap.even_head_dims
    normalize = rng.choice(cap.normalize)
    decays = [d for d in ("mild", "zero") if cap.decay]
    vector = bool(decays) and vector_gated(kernel) and cap.query_feature_map not in LIFTED_MAPS
    # A vector gate does not combine with a lifted map (semantics): draw an elementwise one.
    maps = [m for m in cap.feature_maps if not (vector and m in LIFTED_MAPS)]
    feature_map = rng.choice(maps or cap.feature_maps)
    eps = rng.choice((1e-6, 1e-2) if cap.configurable else (cap.eps,)) if normalize else 0.0
    varlen = cap.varlen and rng.random() < 0.5
    K = size.K
    lifted: dict[str, Any] = {}
    if feature_map in LIFTED_MAPS and feature_map != "softmax":
        # A lifted map's state has F rows: its reach is in F (capped), not in K (softmax keeps K).
        limit = min(REACH_MAX_FEATURES, cap.max_feature_dim or REACH_MAX_FEATURES)
        K = min(K, largest_key_dim(feature_map, limit))
        if even and K % 2:
            # Down to an even K, so F stays within the limit (K = 1 has no even K below).
            K = K - 1 if K > 1 else 2
        if feature_map == "favor+":
            lifted = {"projection": "orthogonal", "features": min(size.K, limit)}
    segments: tuple[int, ...] | None = None
    if varlen:
        # The size's sequence last, behind two short ones, so it starts at an unaligned offset.
        segments = (max(1, size.T // 16), 1, size.T)
    multiple = cap.seq_len_multiple  # 1 for a varlen kernel
    spec = ProblemSpec(
        B=1,
        T=multiple * -(-size.T // multiple) if segments is None else sum(segments),
        H=size.H,
        K=K,
        V=size.V,
        dtype=dtype,
        feature_map=feature_map,
        normalize=normalize,
        eps=eps,
        # A kernel limited to some scales (or applying its own) gets one of those.
        scale=rng.choice(fixed_scales(cap.scales, K) if cap.scales else (None, K**-0.5)),
        values="positive" if normalize and feature_map == "identity" else "normal",
        decay=rng.choice(decays) if decays else "none",
        initial_state=cap.initial_state and rng.random() < 0.5,
        output_final_state=cap.final_state,
        segments=segments,
        seed=rng.randrange(2**31),
        gate="vector" if vector else "scalar",
        query_feature_map=None if cap.query_feature_map == feature_map else cap.query_feature_map,
        # A value gate at every size (long memory: the columns' decays stay in range).
        value_gate="mild" if cap.value_gate else "none",
        **lifted,
    )
    if even and (spec.K % 2 or spec.V % 2):
        # Every dtype the kernel takes wants even dims: step up to the next even size.
        spec = replace(spec, K=spec.K + spec.K % 2, V=size.V + size.V % 2)
    return spec


__all__ = [
    "REACH_MAX_FEATURES",
    "reach_spec",
    "vector_gated",
]
