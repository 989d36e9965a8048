# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Size reach: the boundary sizes where size bugs live, checked as far as the kernel's speed allows.

The Hypothesis search draws small cases (T <= 32, K, V <= 16 by default) because most bugs show
there and small cases shrink to readable counterexamples. Size bugs do not: a kernel that tiles K
in blocks of 64, takes a separate path past T = 512, or splits the sequence across programs is
right below those sizes and wrong above them. `reach_plan` lists the sizes around such
boundaries, cheapest first:

* T around the kernel's chunk sizes (C, C + 1, 2C + 1: the work split across chunks) and around
  256, 512, 1024, 2048, 4096 (n and n + 1), at a realistic head dim;
* K and V around 16, 32, 64, 128, 256 and the declared maximum (d, d + 1 on either side), at
  T = C + 1;
* long sequences with large heads (T = 1024 and 4096 at K = V = 128).

`ReachRun` walks the plan's (size, property) items in order and runs an item only when its cost,
predicted from the last measured item of the same property, fits in what is left of the reach's
time, so a fast kernel gets long sequences and large heads and an interpreted one what fits. At
sizes where the work is split (T > C) the forward pass is rerun `RERUNS` more times against the
oracle: a kernel that is wrong only now and then (a race that loses a chunk's state on one call in
four) is caught there, whether or not it promises bit-identical reruns.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from linattn_verify.kernel import Kernel, fixed_scales
from linattn_verify.strategies import DTYPES, ProblemSpec
from linattn_verify.strategies._lifted import largest_key_dim
from linattn_verify.typing import LIFTED_MAPS

SEQ_LEN_MARKS = (256, 512, 1024, 2048, 4096)
"""Sequence lengths where kernels switch paths or overflow offsets; n and n + 1 are checked."""

HEAD_DIM_MARKS = (16, 32, 64, 128, 256)
"""Head dims where kernels switch block sizes; d and d + 1 (in K and in V) are checked."""

MAX_SEQ_LEN = 4096
"""The longest T reached when ``check --max-seq-len`` does not cap it lower."""

SEQ_HEAD_DIM = 64
"""K = V of the sequence-length items: a realistic head, capped by the kernel's maximum."""

LONG_HEAD_DIM = 128
"""K = V of the long-sequence, large-head items."""

DEFAULT_CHUNK = 64
"""The chunk boundary checked for a kernel that declares no chunk size."""

REACH_HEADS = 2

REACH_MAX_FEATURES = 64
"""Largest feature dimension F of a lifted map's reach cases (its state is F x V)."""
"""H of every reach case: a head stride is exercised without doubling the cost of long ones."""

RERUNS = 3
"""Extra forward runs at each size where the work is split (T > C): four calls in all."""

VECTOR_BOUND_ELEMENTS = 2 * 64 * 512**2
"""The largest H·K·T² of a reach case with a vector gate (H = 2, K = 64, T = 512). The vector-gate
bounds hold [H, K, T, T] float64 weights (docs/error-model.md §2.7): measured on the 2-core CPU,
T = 512 at K = 64 takes 14 s and 2.1 GB for the gradient bound, T = 1024 would take four times
that. Kernels that take scalar gates reach every size with them; those that take only vector
gates (FLA's GLA) stop here."""

PROPERTIES = ("outputs_match_oracle", "gradients_match_oracle")
"""The properties run at each reach size: the forward pass and the backward pass."""


@dataclass(frozen=True)
class Size:
    """A (T, K, V) of the reach, why it is there, and whether to rerun the forward pass there.

    ``rerun`` marks the sequence-length sizes past the smallest chunk (the work is split across
    chunks or programs), where `reach_plan` repeats the forward pass `RERUNS` times.
    """

    T: int
    K: int
    V: int
    why: str
    rerun: bool = False

    @property
    def work(self) -> float:
        """The cost model: the oracle's bounds are quadratic in T, the kernel ~ T·K·V."""
        return float(self.T * self.T + self.T * self.K * self.V / 32)


@dataclass(frozen=True)
class Item:
    """One run of the reach: a property on the case of a size (``rerun`` > 0: a repeat call)."""

    size: Size
    property: str
    rerun: int = 0


def chunk_sizes(kernel: Kernel) -> tuple[int, ...]:
    """The chunk boundaries of ``kernel``: its declared chunk sizes, its recipe's, or 64."""
    if kernel.capabilities.chunk_sizes:
        return tuple(sorted(set(kernel.capabilities.chunk_sizes)))
    if kernel.form == "chunk":
        dtype = DTYPES[kernel.capabilities.dtypes[0]]
        return (kernel.precision_recipe(dtype).chunk_size,)
    return (DEFAULT_CHUNK,)


def vector_gated(kernel: Kernel) -> bool:
    """Whether ``kernel``'s decay is a vector gate only (its reach cases then have one)."""
    cap = kernel.capabilities
    return cap.decay and kernel.implied_decay is None and "scalar" not in cap.gates


def boundary_sizes(kernel: Kernel, *, max_seq_len: int | None = None) -> tuple[Size, ...]:
    """The sizes of the reach for ``kernel``, cheapest first, within its head-dim limits.

    For a kernel that takes only vector gates, sizes past `VECTOR_BOUND_ELEMENTS` are left out.

    Args:
        kernel: The kernel under test (its chunk sizes and head-dim limits).
        max_seq_len: The longest T (`MAX_SEQ_LEN` when `None`).
    """
    cap = kernel.capabilities
    top_T = MAX_SEQ_LEN if max_seq_len is None else min(max_seq_len, MAX_SEQ_LEN)
    lo, hi = cap.min_head_dim, cap.max_head_dim
    chunks = chunk_sizes(kernel)
    split_T = min(chunks) + 1
    head = max(lo, min(SEQ_HEAD_DIM, hi))
    sizes: dict[tuple[int, int, int], Size] = {}

    vector = vector_gated(kernel)

    def add(T: int, K: int, V: int, why: str, rerun: bool = False) -> None:
        if vector and REACH_HEADS * K * T * T > VECTOR_BOUND_ELEMENTS:
            return
        if 1 <= T <= top_T and lo <= min(K, V) and max(K, V) <= hi:
            sizes.setdefault((T, K, V), Size(T, K, V, why, rerun))

    for C in chunks:
        for seq_len in (C, C + 1, 2 * C + 1):
            split = seq_len > split_T - 1
            add(seq_len, head, head, f"T around the chunk size {C}", rerun=split)
    for n in SEQ_LEN_MARKS:
        for seq_len in (n, n + 1):
            add(seq_len, head, head, f"T around {n}", rerun=seq_len > split_T - 1)
    for d in sorted({*HEAD_DIM_MARKS, hi}):
        for K, V in ((d, d), (d + 1, d), (d, d + 1)):
            add(min(split_T, top_T), K, V, f"head dims around {d}")
    for T in (1024, MAX_SEQ_LEN):
        big = max(lo, min(LONG_HEAD_DIM, hi))
        add(T, big, big, "a long sequence with large heads")
    return tuple(sorted(sizes.values(), key=lambda s: (s.work, s.T, s.K, s.V)))


def reach_plan(
    kernel: Kernel, properties: tuple[str, ...], *, max_seq_len: int | None = None
) -> tuple[Item, ...]:
    """The reach's items for ``kernel``: each size with each of ``properties`` it has, in order.

    Only `PROPERTIES` are run at reach sizes; at the sequence-length sizes with T above the
    smallest chunk size (``Size.rerun``) the forward property is repeated `RERUNS` times.
    """
    items: list[Item] = []
    for size in boundary_sizes(kernel, max_seq_len=max_seq_len):
        for name in PROPERTIES:
            if name in properties:
                items.append(Item(size, name))
        if size.rerun and "outputs_match_oracle" in properties:
            items += [Item(size, "outputs_match_oracle", n) for n in range(1, RERUNS + 1)]
    return tuple(items)


def reach_spec(kernel: Kernel, size: Size, seed: int) -> ProblemSpec:
    """A realistic case of ``size`` that ``kernel`` supports; the rest drawn from ``seed``.

    Normal values (positive q, k for a normalized kernel without a feature map of its own, so
    its denominators do not cancel), decays that keep the state alive across the whole sequence
    (mild or zero), the initial and final state where the kernel takes them; B = 1 and H = 2,
    so that a head stride is exercised without doubling the cost of long sequences. For a varlen
    kernel, half the cases pack the sequence of length T behind two short ones.
    """
    cap = kernel.capabilities
    rng = random.Random(seed * 1_000_003 + size.T * 4099 + size.K * 257 + size.V)
    dtypes = [d for d in cap.dtypes if d in DTYPES]
    odd = size.K % 2 or size.V % 2
    dtype = rng.choice([d for d in dtypes if not (odd and d in cap.even_head_dims)] or dtypes)
    even = dtype in cap.even_head_dims
    normalize = rng.choice(cap.normalize)
    decays = [d for d in ("mild", "zero") if cap.decay]
    vector = bool(decays) and vector_gated(kernel)
    # A vector gate does not combine with a lifted map (semantics): draw an elementwise one.
    maps = [m for m in cap.feature_maps if not (vector and m in LIFTED_MAPS)]
    feature_map = rng.choice(maps or cap.feature_maps)
    eps = rng.choice((1e-6, 1e-2) if cap.configurable else (cap.eps,)) if normalize else 0.0
    varlen = cap.varlen and rng.random() < 0.5
    K = size.K
    lifted: dict[str, Any] = {}
    if feature_map in LIFTED_MAPS:
        # A lifted map's state has F rows: its reach is in F (capped), not in K.
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
    spec = ProblemSpec(
        B=1,
        T=size.T if segments is None else sum(segments),
        H=REACH_HEADS,
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
        **lifted,
    )
    if even and (spec.K % 2 or spec.V % 2):
        # Every dtype the kernel takes wants even dims: step up to the next even size.
        spec = replace(spec, K=spec.K + spec.K % 2, V=size.V + size.V % 2)
    return spec


@dataclass
class ReachRun:
    """Walks a reach plan within a time allowance, predicting each item's cost before running it.

    Attributes:
        items: The plan (`reach_plan`).
        seconds: The time allowed for the whole reach.
        measured: Per property, the work and seconds of its last item that ran.
        skipped: Items not run because their predicted cost did not fit.
    """

    items: tuple[Item, ...]
    seconds: float
    measured: dict[str, tuple[float, float]] = field(default_factory=dict)
    skipped: list[Item] = field(default_factory=list)

    def predicted(self, item: Item) -> float:
        """The predicted seconds of ``item``: its property's last measured rate times its work.

        An item whose property has not run yet is predicted free: the first of each property
        always runs (the plan is cheapest first, so that is its cheapest item).
        """
        last = self.measured.get(item.property)
        if last is None:
            return 0.0
        work, seconds = last
        return seconds * item.size.work / work

    def walk(self, spent: Callable[[], float]) -> Iterator[Item]:
        """Yield the items that fit; ``spent()`` is the reach's elapsed seconds so far."""
        for item in self.items:
            left = self.seconds - spent()
            if self.predicted(item) > left or (left <= 0 and item.property in self.measured):
                self.skipped.append(item)
                continue
            yield item

    def record(self, item: Item, seconds: float) -> None:
        """Remember what ``item`` took, to predict the next items of its property."""
        self.measured[item.property] = (item.size.work, max(seconds, 1e-3))


__all__ = [
    "HEAD_DIM_MARKS",
    "MAX_SEQ_LEN",
    "PROPERTIES",
    "RERUNS",
    "SEQ_LEN_MARKS",
    "Item",
    "ReachRun",
    "Size",
    "boundary_sizes",
    "chunk_sizes",
    "reach_plan",
    "reach_spec",
]
