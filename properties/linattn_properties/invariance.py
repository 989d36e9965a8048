# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Batch and head independence and permutation equivariance (docs/design.md §8.7).

Batch rows (or packed sequences) and heads are independent problems. Reordering them, or running
one of them alone, changes the grid a kernel launches and so may legitimately change the
rounding; the comparison is therefore within the sum of the two runs' error bounds, and whether
the runs were bit-identical is noted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import torch

from linattn_properties._support import prepare_case, property_function, run_bounds, run_kernel
from linattn_verify.compare import Side, bitwise_mismatch, compare_pair
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import PropertyResult

_ROWS = ("o", "q", "k", "v", "g", "gv", "dq", "dk", "dv", "dg")
"""Tensor names laid out ``[B, T, H, ...]``; the others are states ``[N, H, ...]``."""


@dataclass(frozen=True)
class Reindex:
    """A selection of batch rows, tokens, heads and state rows (a permutation or a subset).

    ``rows(x)[i, j, h] = x[batch[i], tokens[j], heads[h]]`` and
    ``states(x)[n, h] = x[state_rows[n], heads[h]]``.
    """

    batch: torch.Tensor
    tokens: torch.Tensor
    heads: torch.Tensor
    state_rows: torch.Tensor
    cu_seqlens: torch.Tensor | None

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """Select from a ``[B, T, H, ...]`` tensor."""
        d = x.device
        return x[self.batch.to(d)][:, self.tokens.to(d)][:, :, self.heads.to(d)]

    def states(self, x: torch.Tensor) -> torch.Tensor:
        """Select from an ``[N, H, ...]`` tensor."""
        return x[self.state_rows.to(x.device)][:, self.heads.to(x.device)]

    def apply(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Select from the tensor called ``name`` (an output, input or gradient)."""
        return self.rows(x) if name in _ROWS else self.states(x)

    def problem(self, p: Problem) -> Problem:
        """Return the reindexed problem."""

        def st(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else self.states(x)

        return p.with_tensors(
            q=self.rows(p.q),
            k=self.rows(p.k),
            v=self.rows(p.v),
            g=None if p.g is None else self.rows(p.g),
            gv=None if p.gv is None else self.rows(p.gv),
            initial_state=st(p.initial_state),
            initial_key_sum=st(p.initial_key_sum),
            cu_seqlens=self.cu_seqlens,
        )


def reindex(problem: Problem, sequences: list[int], heads: list[int]) -> Reindex:
    """Return the `Reindex` taking the listed sequences (in order) and heads (in order)."""
    T = problem.q.shape[1]
    spans = {n: (b, start, end) for n, b, start, end in problem.sequences()}
    long = torch.long
    if problem.cu_seqlens is None:
        return Reindex(
            batch=torch.tensor(sequences, dtype=long),
            tokens=torch.arange(T),
            heads=torch.tensor(heads, dtype=long),
            state_rows=torch.tensor(sequences, dtype=long),
            cu_seqlens=None,
        )
    tokens = [i for n in sequences for i in range(spans[n][1], spans[n][2])]
    lengths = [spans[n][2] - spans[n][1] for n in sequences]
    cu = torch.tensor([0, *torch.tensor(lengths, dtype=long).cumsum(0).tolist()], dtype=long)
    return Reindex(
        batch=torch.zeros(1, dtype=long),
        tokens=torch.tensor(tokens, dtype=long),
        heads=torch.tensor(heads, dtype=long),
        state_rows=torch.tensor(sequences, dtype=long),
        cu_seqlens=cu,
    )


def _permutation(n: int, rng: random.Random) -> list[int]:
    """A random permutation of range(n), never the identity when n > 1."""
    order = list(range(n))
    rng.shuffle(order)
    if n > 1 and order == sorted(order):
        order = order[1:] + order[:1]
    return order


def _reindex_state(index: Reindex, d_final: object) -> object:
    if d_final is None:
        return None
    if isinstance(d_final, tuple):
        return tuple(index.states(x) for x in d_final)
    assert isinstance(d_final, torch.Tensor)
    return index.states(d_final)


@property_function
def batch_and_head_equivariant(
    spec: ProblemSpec, kernel: Kernel, *, backward: bool = True
) -> PropertyResult:
    """Check that batch rows and heads are independent and permute with their inputs.

    For a permutation π of the sequences (batch rows, or packed sequences with their
    ``cu_seqlens``) and σ of the heads, and for one sequence n alone and one head h alone,
    with f the kernel and B the error model's bound of each run:

        |f(x[π, :, σ]) - f(x)[π, :, σ]| <= B(x[π, :, σ]) + B(x)[π, :, σ]
        |f(x[n]) - f(x)[n]| <= B(x[n]) + B(x)[n]         |f(x[:, :, h]) - f(x)[:, :, h]| <= ...

    for o and the final state and, when backward is supported, for the gradients of the
    permuted run (with the permuted cotangents). The comparison rule is the pairwise one of
    `linattn_verify.compare` (ratio <= 2); unverifiable elements are not judged, nor are
    undefined ones (an exactly zero exact denominator).

    Args:
        spec: The case (permutations and the chosen n, h come from ``spec.seed``).
        kernel: The kernel under test.
        backward: Compare gradients of the permuted run too. Default: `True`.

    Returns:
        The `PropertyResult`: a pairwise comparison per tensor of each reindexed run (subject
        ``"<kernel> with <variant>"``) against the original run, reindexed; whether every run
        matched it bitwise is in its notes.
    """
    case = prepare_case("batch_and_head_equivariant", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    N, H = problem.num_sequences, problem.q.shape[2]
    # A kernel with an implied decay derives each head's decay from its index and H (FLA's
    # retention): moving a head changes its function, so only sequences are moved.
    heads_fixed = kernel.implied_decay is not None
    if N == 1 and (H == 1 or heads_fixed):
        return case.not_applicable(
            "one sequence and one head: nothing to permute"
            if H == 1
            else "one sequence, and the kernel's implied decay ties each head to its index"
        )
    rng = random.Random(spec.seed)
    seed = spec.seed + 1 if backward and kernel.capabilities.backward else None
    nonempty = [n for n, _, start, end in problem.sequences() if end > start]
    heads = list(range(H)) if heads_fixed else _permutation(H, rng)
    variants: list[tuple[str, Reindex, bool]] = [
        (
            "permuted sequences" + ("" if heads_fixed else " and heads"),
            reindex(problem, _permutation(N, rng), heads),
            True,
        )
    ]
    if N > 1:
        n = rng.choice(nonempty)
        variants.append((f"sequence {n} alone", reindex(problem, [n], list(range(H))), False))
    if H > 1 and not heads_fixed:
        h = rng.randrange(H)
        variants.append((f"head {h} alone", reindex(problem, list(range(N)), [h]), False))
    problem = replace(problem, output_final_state=kernel.capabilities.final_state)
    cotangents = None
    if seed is not None:
        do, d_final = random_cotangents(problem, seed)
        cotangents = (do, d_final if problem.output_final_state else None)
    base = run_kernel(kernel, problem, cotangents=cotangents)
    base_bounds = run_bounds(kernel, problem, cotangents)
    comparisons = []
    findings: list[str] = []
    bit_identical = True
    for label, index, with_grads in variants:
        sub = index.problem(problem)
        sub_cotangents = None
        if with_grads and cotangents is not None:
            sub_cotangents = (index.rows(cotangents[0]), _reindex_state(index, cotangents[1]))
        run = run_kernel(kernel, sub, cotangents=sub_cotangents)
        sub_bounds = run_bounds(kernel, sub, sub_cotangents)
        for name, actual in run.everything().items():
            expected = index.apply(name, base.everything()[name])
            bit_identical &= not bool(bitwise_mismatch(actual, expected).any())
            mine, theirs = sub_bounds.get(name), base_bounds.get(name)
            if mine is None or theirs is None:
                findings.append(f"{label}: no error bound for {name}")
                continue
            comparisons.append(
                compare_pair(
                    name,
                    Side.of(f"{kernel.name} with {label}", actual, mine),
                    Side(
                        "the original run, reindexed",
                        expected,
                        index.apply(name, theirs.bound),
                        index.apply(name, theirs.verifiable),
                        None if theirs.undefined is None else index.apply(name, theirs.undefined),
                    ),
                    mine.reference,
                )
            )
    notes = [f"every run bit-identical to the original, reindexed: {bit_identical}"]
    return case.judged(comparisons, findings=findings, notes=notes)


__all__ = ["Reindex", "batch_and_head_equivariant", "reindex"]
