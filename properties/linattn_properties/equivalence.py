# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Equivalences: kernels (or one kernel at two chunk sizes) compute the same function.

Two runs a and b of the same exact function are each within their own bound of it, so a correct
pair satisfies |a - b| <= B_a + B_b for every element judged by both
(`linattn_verify.compare.compare_pair`). Runs that split the work differently (a state carried
across a split, packed varlen sequences) are in `linattn_properties.splitting`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from linattn_properties._support import (
    KernelRun,
    failed,
    judged,
    not_applicable,
    property_function,
    run_bounds,
    run_kernel,
)
from linattn_verify.compare import Side, compare_pair
from linattn_verify.core.bound import TensorBound
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import Comparison, PropertyResult


@dataclass(frozen=True)
class _Outcome:
    """A kernel run with the bounds of its recipe, tensors keyed like `KernelRun.tensors`."""

    label: str
    run: KernelRun
    bounds: dict[str, TensorBound]

    def tensors(self, problem: Problem) -> dict[str, torch.Tensor]:
        """The run's tensors, a gradient autograd left undefined (`None`) counted as zeros.

        `None` means the kernel's function does not depend on that input, so its derivative is
        0; comparing the zeros tells how wrong that is.
        """
        named = self.run.tensors()
        for key, grad in (self.run.grads or {}).items():
            if grad is None and "d" + key in self.bounds:
                ref = self.bounds["d" + key].reference
                named["d" + key] = torch.zeros_like(ref, dtype=problem.q.dtype)
        return named


def _agreement(
    prop: str, label: str, spec: ProblemSpec, problem: Problem, kernels: Sequence[Kernel]
) -> PropertyResult:
    """Run every kernel (forward, and backward when all can) and compare them pairwise."""
    caps = [k.capabilities for k in kernels]
    if all(c.final_state for c in caps):
        problem = replace(problem, output_final_state=True)
    cotangents = None
    if all(c.backward for c in caps):
        do, d_final = random_cotangents(problem, spec.seed + 1)
        cotangents = (do, d_final if problem.output_final_state else None)
    outcomes = [
        _Outcome(
            k.name,
            run_kernel(k, problem, cotangents=cotangents, caller_judges=True),
            run_bounds(k, problem, cotangents),
        )
        for k in kernels
    ]
    comparisons: list[Comparison] = []
    for a, b in itertools.combinations(outcomes, 2):
        xs, ys = a.tensors(problem), b.tensors(problem)
        for name, tb in a.bounds.items():
            if name in xs and name in ys:
                comparisons.append(
                    compare_pair(
                        name,
                        Side.of(a.label, xs[name], tb),
                        Side.of(b.label, ys[name], b.bounds[name]),
                        tb.reference,
                    )
                )
            elif (name in xs) != (name in ys):
                missing = b.label if name in xs else a.label
                return failed(prop, label, spec, f"{missing} returned no {name}")
    return judged(prop, label, spec, comparisons)


@property_function
def forms_agree(spec: ProblemSpec, kernels: Sequence[Kernel]) -> PropertyResult:
    """Check that several kernels (e.g. the three forms) compute the same function.

    For every pair (a, b) of the kernels that support the case, and every element of o, S_T,
    z_T (requested whenever every kernel can return them) and, when every kernel has a backward,
    the gradients of <o, do> + <S_T, dS_T> + <z_T, dz_T> (cotangents from ``spec.seed + 1``):

        |a - b| / (B_a + B_b) <= 2,   B from each kernel's own recipe.

    Args:
        spec: The case.
        kernels: Two or more kernels.

    Returns:
        The `PropertyResult` (kernel: the names joined by ``+``; not applicable when fewer than
        two kernels support the case).

    Raises:
        InvalidArgument: fewer than two kernels were given.
    """
    name = "forms_agree"
    if len(kernels) < 2:
        raise InvalidArgument(f"Expected at least two kernels but got {len(kernels)}.")
    label = "+".join(k.name for k in kernels)
    problem = kernels[0].prepare(spec.build())
    reasons = [r for r in (k.supports(problem) for k in kernels) if r is not None]
    chosen = [k for k in kernels if k.supports(problem) is None]
    if len(chosen) < 2:
        return not_applicable(name, label, spec, "; ".join(reasons))
    return _agreement(name, label, spec, problem, chosen)


@property_function
def chunk_size_invariant(
    spec: ProblemSpec, kernel: Kernel, *, chunk_sizes: tuple[int, int] | None = None
) -> PropertyResult:
    """Check that a chunked kernel's result does not depend on its chunk size beyond rounding.

    With the kernel run at chunk sizes C1 != C2 (``chunk_size=`` option; each run's bound uses
    its own C), for o, S_T, z_T and the gradients, as in `forms_agree`:

        |x(C1) - x(C2)| / (B(C1) + B(C2)) <= 2.

    Args:
        spec: The case.
        kernel: The kernel under test; it must declare ``capabilities.chunk_sizes``.
        chunk_sizes: The two sizes. Default: `None`: the smallest declared size (the most
            chunks, hence the most chunk boundaries in a short case) and another declared size
            chosen by ``spec.seed``.

    Returns:
        The `PropertyResult` (not applicable when the kernel declares fewer than two chunk
        sizes or does not support the case).
    """
    name = "chunk_size_invariant"
    declared = sorted(kernel.capabilities.chunk_sizes)
    if len(declared) < 2:
        return not_applicable(
            name, kernel, spec, f"{kernel.name}: fewer than two chunk sizes declared"
        )
    if chunk_sizes is None:
        chunk_sizes = (declared[0], random.Random(spec.seed).choice(declared[1:]))
    bad = [c for c in chunk_sizes if c not in declared]
    if bad or chunk_sizes[0] == chunk_sizes[1]:
        raise InvalidArgument(
            f"Got chunk_sizes={chunk_sizes}, but they must be two different sizes among "
            f"{tuple(declared)}."
        )
    problem = kernel.prepare(spec.build())
    reason = kernel.supports(problem)
    if reason is not None:
        return not_applicable(name, kernel, spec, reason)
    variants = [kernel.with_options(f"{kernel.name}[C={c}]", chunk_size=c) for c in chunk_sizes]
    return _agreement(name, kernel.name, spec, problem, variants)


__all__ = ["chunk_size_invariant", "forms_agree"]
