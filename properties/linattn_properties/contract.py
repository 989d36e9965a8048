# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract of a kernel (DESIGN.md §4, §8.9), and the helpers every property uses.

`contract_holds` checks what a correct *function* cannot tell apart from a correct *kernel*:
shapes and dtypes, inputs left alone, layout independence, determinism, and no reads of
uninitialised memory. The helpers it uses (`run_kernel`, `bitwise_message`, `compare_within`,
...) live in `linattn_properties._support`, shared by every property.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from linattn_properties._support import (
    KernelRun,
    attempt,
    bitwise_message,
    compare_within,
    finish,
    nan_poisoned_allocations,
    relayout,
    run_bounds,
    skipped,
)
from linattn_verify.kernel import Kernel
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec, random_cotangents
from linattn_verify.tolerance import TensorBound
from linattn_verify.verdict import PropertyResult


def _transposed(x: torch.Tensor) -> torch.Tensor:
    """Same values, strides of a tensor stored with dims 1 and 2 swapped."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _sliced(x: torch.Tensor) -> torch.Tensor:
    """Same values, a view into a larger NaN-filled tensor (offset 1 in every dim)."""
    big = torch.full([s + 2 for s in x.shape], math.nan, dtype=x.dtype, device=x.device)
    view = big[tuple(slice(1, 1 + s) for s in x.shape)]
    view.copy_(x)
    return view


def _snapshot(problem: Problem) -> dict[str, torch.Tensor]:
    named = dict(problem.inputs())
    if problem.cu_seqlens is not None:
        named["cu_seqlens"] = problem.cu_seqlens
    return {n: t.detach().clone() for n, t in named.items()}


def _inputs_unmodified(problem: Problem, before: Mapping[str, torch.Tensor]) -> list[str]:
    after = _snapshot(problem)
    failures = []
    for name, old in before.items():
        message, _, _ = bitwise_message(f"input {name}", after[name], old, "after the call")
        if message is not None:
            failures.append(message.replace("is not bit-identical", "was modified in place"))
    return failures


class _Judge:
    """Compares a run with the reference run: bitwise, or within 2B for nondeterministic kernels."""

    def __init__(
        self, kernel: Kernel, problem: Problem, reference: KernelRun, seed: int | None = None
    ) -> None:
        self.kernel, self.problem, self.reference, self.seed = kernel, problem, reference, seed
        self.exact = kernel.capabilities.deterministic
        self._bounds: dict[str, TensorBound] | None = None
        self.bit_identical = True
        self.max_r = 0.0

    def __call__(self, run: KernelRun | str, condition: str) -> list[str]:
        if isinstance(run, str):
            return [f"run {condition}: {run}"]
        failures = []
        for name, expected in self.reference.everything().items():
            actual = run.everything().get(name)
            if actual is None:
                failures.append(f"{name} missing from the run {condition}")
                continue
            message, _, _ = bitwise_message(name, actual, expected, condition)
            self.bit_identical &= message is None
            if message is None or self.exact:
                failures += [] if message is None else [message]
                continue
            bound = self._bound(name)
            if bound is None:
                failures.append(message + " (no error bound for this tensor)")
                continue
            c = compare_within(
                name,
                actual,
                expected.double(),
                2 * bound.bound,
                magnitude=bound.magnitude,
                unit=bound.unit,
            )
            self.max_r = max(self.max_r, c.max_r)
            if not c.ok:
                failures.append(f"{c.message(self.kernel.name)} ({condition}, sum of 2 bounds)")
        return failures

    def _bound(self, name: str) -> TensorBound | None:
        if self._bounds is None:
            cotangents = None
            if self.seed is not None:
                cotangents = random_cotangents(self.problem, self.seed)
            self._bounds = run_bounds(self.kernel, self.problem, cotangents)
        return self._bounds.get(name)


def contract_holds(spec: ProblemSpec, kernel: Kernel, *, backward: bool = True) -> PropertyResult:
    """Check the calling contract of a kernel on one case.

    With o, S_T = f(q, k, v, g, S_0) the kernel's outputs on the case:

    * o has shape ``[B, T, H, V]`` and the input dtype; S_T (z_T) has shape ``[N, H, K, V]``
      (``[N, H, K]``) and dtype float32; nothing is NaN;
    * every input (and ``cu_seqlens``) is bitwise unchanged by the call (and the backward);
    * f(x) ≡ f(x) (bit-identical rerun) when the kernel claims determinism, else
      |f(x) - f(x)| <= 2B with B the error model's bound;
    * f(transposed-stride x) ≡ f(x) and f(x as a slice of a larger NaN-filled tensor) ≡ f(x);
    * with `torch.empty`/`torch.empty_like` returning NaN-filled tensors, outputs (and
      gradients, when backward is supported) are unchanged: ≡ (or within 2B).

    Args:
        spec: The case.
        kernel: The kernel under test.
        backward: Include the gradients in the NaN-poisoning check. Default: `True`.

    Returns:
        The `PropertyResult`; scores ``bit_identical`` (1.0 if every rerun was bit-identical)
        and ``max_r`` (nondeterministic kernels).
    """
    prop = "contract_holds"
    built = spec.build()
    reason = kernel.supports(built)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    # The reference run takes contiguous inputs; the case's own layout is one of the variants.
    problem = relayout(built, lambda x: x.contiguous())
    before = _snapshot(problem)
    first = attempt(kernel, problem)
    if isinstance(first, str):
        return finish(prop, kernel, spec, [first], {})
    failures = _inputs_unmodified(problem, before)
    judge = _Judge(kernel, problem, first)
    failures += judge(attempt(kernel, problem), "on a rerun")
    failures += judge(
        attempt(kernel, relayout(problem, _transposed)), "with transposed-stride inputs"
    )
    failures += judge(
        attempt(kernel, relayout(problem, _sliced)), "with inputs sliced from larger tensors"
    )
    seed = spec.seed + 1 if backward and kernel.capabilities.backward else None
    clean = attempt(kernel, problem, cotangent_seed=seed) if seed is not None else first
    if isinstance(clean, str):
        return finish(prop, kernel, spec, [*failures, f"backward: {clean}"], {})
    failures += _inputs_unmodified(problem, before)
    with nan_poisoned_allocations():
        poisoned = attempt(kernel, problem, cotangent_seed=seed)
    poisoned_judge = _Judge(kernel, problem, clean, seed)
    failures += poisoned_judge(poisoned, "with torch.empty/empty_like returning NaN-filled memory")
    bit = judge.bit_identical and poisoned_judge.bit_identical
    scores = {"bit_identical": float(bit), "max_r": max(judge.max_r, poisoned_judge.max_r)}
    return finish(prop, kernel, spec, failures, scores, summary=f"bit_identical={bit}")


__all__ = ["contract_holds"]
