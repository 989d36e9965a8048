# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule family's cases at the size reach's sizes (`linattn_verify.reach`).

What models run at long T: unit keys (or raw keys the kernel normalises), sigmoid write
strengths, and a mild gate (a gated kernel), so the state carries information across every
chunk boundary instead of being forgotten within a few tokens; B = 1 and H = 2 (16 at the
many-heads sizes).
"""

from __future__ import annotations

import random

from linattn_verify.core.sizes import fixed_scales
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.strategies import DeltaCase
from linattn_verify.reach import REACH_HEADS, Size
from linattn_verify.typing import DTYPE_NAMES


def delta_reach_case(kernel: DeltaKernel, size: Size, seed: int) -> DeltaCase:
    """A realistic case of ``size`` that ``kernel`` supports; the rest drawn from ``seed``.

    The gate is the first the kernel takes of scalar, vector, none (a Gated DeltaNet or KDA
    kernel is reached with its gate); the initial state is given half the time; a varlen kernel
    gets the sequence of length T packed behind two short ones half the time (an unaligned
    start).
    """
    cap = kernel.capabilities
    rng = random.Random(
        seed * 1_000_003 + size.T * 4099 + size.K * 257 + size.V + (size.H - REACH_HEADS) * 7919
    )
    dtype = rng.choice([d for d in cap.dtypes if d in DTYPE_NAMES])
    gate = next(g for g in ("scalar", "vector", "none") if g in cap.gates)
    l2norm = rng.choice(cap.l2norm_qk)
    seq_lens: tuple[int, ...] | None = None
    if cap.varlen and rng.random() < 0.5:
        seq_lens = (max(1, size.T // 16), 1, size.T)
    return DeltaCase(
        B=1,
        T=size.T if seq_lens is None else sum(seq_lens),
        H=size.H,
        K=size.K,
        V=size.V,
        dtype=dtype,
        gate=gate,
        gate_family="none" if gate == "none" else "mild",
        beta_family="sigmoid",
        key_family=rng.choice(("unit", "raw")) if l2norm else "unit",
        value_family="unit",
        l2norm_qk=l2norm,
        negative_eigenvalues=False,
        initial_state=cap.initial_state and rng.random() < 0.5,
        output_final_state=cap.final_state,
        seq_lens=seq_lens,
        # A kernel limited to some scales (or applying its own) gets one of those.
        scale=rng.choice(fixed_scales(cap.scales, size.K) if cap.scales else (None,)),
        seed=rng.randrange(2**31),
        value_gate="mild" if cap.value_gate else "none",
    )


__all__ = ["delta_reach_case"]
