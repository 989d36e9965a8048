# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Size reach: the boundary sizes where size bugs live, checked as far as the kernel's speed allows.

The Hypothesis search draws small cases (T <= 32, K, V <= 16 by default) because most bugs show
there and small cases shrink to readable counterexamples. Size bugs do not: a kernel that tiles K
in blocks of 64, takes a separate path past T = 512, or splits the sequence across programs is
right below those sizes and wrong above them. `reach_plan` lists the sizes around such
boundaries, cheapest first:

* T around the kernel's chunk sizes (C, C + 1, 2C + 1: the work split across chunks) and around
  the powers of two from 256 to 65,536 (n and n + 1), at a realistic head dim;
* K and V around 16, 32, 64, 128, 256 and the declared maximum (d, d + 1 on either side), at
  T = C + 1;
* long sequences with large heads (T = 1024, 4096 and 16,384 at K = V = 128);
* many heads (H = 16 at T = C + 1, 4096 and 65,536): grids and offsets that span heads, which
  the other sizes' H = 2 exercise only once.

`ReachRun` walks the plan's (size, property) items in order and runs an item only when its cost,
predicted from the last measured item of the same property, fits in what is left of the reach's
time, so a fast kernel gets long sequences and large heads and an interpreted one what fits. A
property whose bounds certified no tensor at some size (``ill_conditioned`` on every one) is not
run at larger ones, where its bounds are blunter still: its time goes to the others (the delta
family's chunk gradients of a kernel not declaring ``--causal-exact`` are charged a pivoting
solver and decide nothing past T = 64 at realistic sizes; the forward pass then goes on). One
that certified some of its tensors goes on (the delta chunk recipe's dg bound is blunt from
T = 32 at K = 64, while dq, dk, dv and dβ are certified to the largest sizes). At
sizes where the work is split (T > C) the forward pass is rerun `RERUNS` more times against the
oracle: a kernel that is wrong only now and then (a race that loses a chunk's state on one call in
four) is caught there, whether or not it promises bit-identical reruns.

The plan is family-free; each family builds its cases at the plan's sizes
(`linattn_verify.core.Family.reach_case`). Every family judges every size in O(T) time and memory
(the linear family's bounds by a block scan beyond `DENSE_TOKENS` tokens), so only time limits
the reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from linattn_verify.typing import torch_dtype

SEQ_LEN_MARKS = tuple(2**n for n in range(8, 17))  # 256 ... 65,536
"""Sequence lengths where kernels switch paths or overflow offsets; n and n + 1 are checked."""

HEAD_DIM_MARKS = (16, 32, 64, 128, 256)
"""Head dims where kernels switch block sizes; d and d + 1 (in K and in V) are checked."""

MAX_SEQ_LEN = 65536
"""The longest T reached when ``check --max-seq-len`` does not cap it lower."""

SEQ_HEAD_DIM = 64
"""K = V of the sequence-length items: a realistic head, capped by the kernel's maximum."""

LONG_HEAD_DIM = 128
"""K = V of the long-sequence, large-head items."""

LONG_SEQ_LENS = (1024, 4096, 16384)
"""T of the long-sequence, large-head items."""

DENSE_COST_TOKENS = 512
"""Up to this T a case's bounds cost ~T² (dense pair matrices), beyond it ~T (a block scan):
the linear family's `DENSE_TOKENS`."""

DEFAULT_CHUNK = 64
"""The chunk boundary checked for a kernel that declares no chunk size."""

REACH_HEADS = 2
"""H of the reach's cases: a head stride is exercised without doubling the cost of long ones."""

MANY_HEADS = 16
"""H of the many-heads items (production models run 16 to 64)."""

MANY_HEADS_SEQ_LENS = (4096, 65536)
"""T of the many-heads items besides one past the smallest chunk (K = V = `SEQ_HEAD_DIM`)."""

RERUNS = 3
"""Extra forward runs at each size where the work is split (T > C): four calls in all."""

PROPERTIES = ("outputs_match_oracle", "gradients_match_oracle")
"""The properties run at each reach size: the forward pass and the backward pass."""


@dataclass(frozen=True)
class Size:
    """A (T, K, V, H) of the reach, why it is there, and whether to rerun the forward pass there.

    ``rerun`` marks the sequence-length sizes past the smallest chunk (the work is split across
    chunks or programs), where `reach_plan` repeats the forward pass `RERUNS` times.
    """

    T: int
    K: int
    V: int
    why: str
    rerun: bool = False
    H: int = REACH_HEADS

    @property
    def work(self) -> float:
        """Cost model per head: bounds ~T² up to `DENSE_COST_TOKENS`, ~T beyond; kernel ~T·K·V."""
        per_head = self.T * min(self.T, DENSE_COST_TOKENS) + self.T * self.K * self.V / 32
        return float(per_head * self.H / REACH_HEADS)


@dataclass(frozen=True)
class Item:
    """One run of the reach: a property on the case of a size (``rerun`` > 0: a repeat call)."""

    size: Size
    property: str
    rerun: int = 0


def chunk_sizes(kernel: Any) -> tuple[int, ...]:
    """The chunk boundaries of ``kernel`` (any family): declared, its recipe's, or 64."""
    if kernel.capabilities.chunk_sizes:
        return tuple(sorted(set(kernel.capabilities.chunk_sizes)))
    if kernel.form == "chunk":
        dtype = torch_dtype(kernel.capabilities.dtypes[0])
        return (kernel.precision_recipe(dtype).chunk_size,)
    return (DEFAULT_CHUNK,)


def boundary_sizes(kernel: Any, *, max_seq_len: int | None = None) -> tuple[Size, ...]:
    """The sizes of the reach for ``kernel``, cheapest first, within its head-dim limits.

    Args:
        kernel: The kernel under test, of any family (its chunk sizes and head-dim limits).
        max_seq_len: The longest T (`MAX_SEQ_LEN` when `None`).
    """
    cap = kernel.capabilities
    top_T = MAX_SEQ_LEN if max_seq_len is None else min(max_seq_len, MAX_SEQ_LEN)
    lo, hi = cap.min_head_dim, cap.max_head_dim
    chunks = chunk_sizes(kernel)
    split_T = min(chunks) + 1
    head = max(lo, min(SEQ_HEAD_DIM, hi))
    sizes: dict[tuple[int, int, int, int], Size] = {}

    def add(T: int, K: int, V: int, why: str, rerun: bool = False, H: int = REACH_HEADS) -> None:
        if 1 <= T <= top_T and lo <= min(K, V) and max(K, V) <= hi:
            sizes.setdefault((T, K, V, H), Size(T, K, V, why, rerun, H))

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
    for T in LONG_SEQ_LENS:
        big = max(lo, min(LONG_HEAD_DIM, hi))
        add(T, big, big, "a long sequence with large heads")
    for T in (split_T, *MANY_HEADS_SEQ_LENS):
        add(T, head, head, f"{MANY_HEADS} heads", H=MANY_HEADS)
    return tuple(sorted(sizes.values(), key=lambda s: (s.work, s.T, s.K, s.V, s.H)))


def reach_plan(
    kernel: Any, properties: tuple[str, ...], *, max_seq_len: int | None = None
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


@dataclass
class ReachRun:
    """Walks a reach plan within a time allowance, predicting each item's cost before running it.

    The properties share the time: each item must fit both what is left of the whole reach and
    its property's share, an equal part of what the properties still running have left. A
    property stops at its first item that does not fit (its later items cost more) or that its
    bound cannot decide (`blunt`); what it did not spend goes to the others. So the gradients'
    slower items cannot starve the forward pass's longer sequences, nor the reverse.

    Attributes:
        items: The plan (`reach_plan`).
        seconds: The time allowed for the whole reach.
        measured: Per property, the work and seconds of its last item that ran.
        used: Per property, the seconds of all its items that ran.
        skipped: Items not run because their predicted cost did not fit, or because their
            property's bound already certified nothing at a smaller size (`blunt`).
        blunt: Per property, the smallest work at which its result certified no tensor: every
            bound spanned its tensor's whole scale. Bounds only grow with the size, so its items
            of that work or more would decide nothing either; their time goes to the others.
    """

    items: tuple[Item, ...]
    seconds: float
    measured: dict[str, tuple[float, float]] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    skipped: list[Item] = field(default_factory=list)
    blunt: dict[str, float] = field(default_factory=dict)

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

    def share(self, prop: str, stopped: set[str]) -> float:
        """What ``prop`` may still spend: its part of the time the running properties have."""
        running = {item.property for item in self.items} - stopped
        free = self.seconds - sum(self.used.get(p, 0.0) for p in stopped)
        return free / max(1, len(running | {prop})) - self.used.get(prop, 0.0)

    def walk(self, spent: Callable[[], float]) -> Iterator[Item]:
        """Yield the items that fit; ``spent()`` is the reach's elapsed seconds so far."""
        last = {item.property: i for i, item in enumerate(self.items)}
        stopped: set[str] = set()
        for i, item in enumerate(self.items):
            name = item.property
            left = self.seconds - spent()
            blunt = item.size.work >= self.blunt.get(name, math.inf)
            predicted = self.predicted(item)
            late = predicted > min(left, self.share(name, stopped)) or (
                left <= 0 and name in self.measured
            )
            if name in stopped or blunt or late:
                self.skipped.append(item)
                stopped.add(name)
                continue
            yield item
            if i == last[name]:
                stopped.add(name)

    def record(self, item: Item, seconds: float, *, decided: bool = True) -> None:
        """Remember what ``item`` took, to predict the next items of its property.

        ``decided=False``: its result certified no tensor (the property is `blunt` from this
        size on).
        """
        self.measured[item.property] = (item.size.work, max(seconds, 1e-3))
        self.used[item.property] = self.used.get(item.property, 0.0) + seconds
        if not decided:
            work = min(item.size.work, self.blunt.get(item.property, math.inf))
            self.blunt[item.property] = work


__all__ = [
    "HEAD_DIM_MARKS",
    "MANY_HEADS",
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
]
