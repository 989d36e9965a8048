# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract of a kernel (docs/design.md §4, §8.9).

`contract_holds` checks what a correct *function* cannot tell apart from a correct *kernel*:
shapes and dtypes, inputs left alone, layout independence, determinism, and no reads of
uninitialised memory. It runs the kernel several times and reports every broken item, so it
alone among the properties catches `KernelFailure` itself (one finding per failed run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from linattn_properties._nonfinite import undefined_elements
from linattn_properties._support import (
    KernelFailure,
    KernelRun,
    nan_poisoned_allocations,
    prepare_case,
    property_function,
    relayout,
    run_bounds,
    run_kernel,
    within_rounding,
)
from linattn_verify.compare import Comparison, Side, compare_bitwise, compare_pair
from linattn_verify.kernel import Kernel
from linattn_verify.results import PropertyResult
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec, random_cotangents
from linattn_verify.tolerance import TensorBound


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


def _inputs_unmodified(
    kernel: Kernel, problem: Problem, before: Mapping[str, torch.Tensor], when: str
) -> list[Comparison]:
    after = _snapshot(problem)
    condition = f"{when} (modified in place)"
    return [
        compare_bitwise(f"input {name}", after[name], old, subject=kernel.name, condition=condition)
        for name, old in before.items()
    ]


class _Judge:
    """Compares runs with a reference run: bit for bit where promised, else within B + B.

    Collects the comparisons, the findings (a failed run, a missing tensor), whether every run
    was bit-identical to the reference, and the flags of the promises that would have been
    broken by runs whose bits differed within the bound (``loose``).
    """

    def __init__(
        self, kernel: Kernel, problem: Problem, reference: KernelRun, seed: int | None = None
    ) -> None:
        self.kernel, self.problem, self.reference, self.seed = kernel, problem, reference, seed
        self._bounds: dict[str, TensorBound] | None = None
        self._undefined: dict[str, torch.Tensor] | None = None
        self.bit_identical = True
        self.comparisons: list[Comparison] = []
        self.findings: list[str] = []
        self.notes: list[str] = []
        self.loose: list[str] = []

    def run(
        self,
        problem: Problem,
        condition: str,
        *,
        promised: tuple[str, ...] = ("deterministic",),
        during: Callable[[], AbstractContextManager[Any]] = nullcontext,
        **options: Any,
    ) -> None:
        """Run the kernel on ``problem`` (inside ``during()``) and judge the run.

        ``condition`` says what changed, for the messages; ``promised`` names the capabilities
        under which this run must be bit-identical to the reference (all of them declared:
        bitwise; else within B + B); ``options`` go to `run_kernel`.
        """
        cap = self.kernel.capabilities
        exact = all(getattr(cap, name) for name in promised)
        try:
            with during():
                run = run_kernel(self.kernel, problem, **options)
        except KernelFailure as exc:
            self.findings.append(f"run {condition}: {exc}")
            return
        for name, expected in self.reference.everything().items():
            actual = run.everything().get(name)
            if actual is None:
                self.findings.append(f"{name} missing from the run {condition}")
                continue
            bitwise = compare_bitwise(
                name,
                actual,
                expected,
                subject=self.kernel.name,
                condition=condition,
                undefined=self.undefined().get(name),
            )
            self.bit_identical &= bitwise.ok
            bound = None if bitwise.ok or exact else self._bound(name)
            if bound is None:
                if not (bitwise.ok or exact):
                    self.notes.append(f"{name}: no error bound, judged bit for bit")
                self.comparisons.append(bitwise)
                continue
            for promise in promised:
                flag = f"--{promise.replace('_', '-')}"
                if not getattr(cap, promise) and flag not in self.loose:
                    self.loose.append(flag)
            # Two runs of one problem, each within its bound B of the exact value.
            self.comparisons.append(
                compare_pair(
                    name,
                    Side.of(f"{self.kernel.name} {condition}", actual, bound),
                    Side.of("the reference run", expected, bound),
                    bound.reference,
                )
            )

    def undefined(self) -> dict[str, torch.Tensor]:
        """The elements an ``any`` kernel may return as it likes (`undefined_elements`)."""
        if self._undefined is None:
            self._undefined = undefined_elements(self.kernel, self.problem)
        return self._undefined

    def _bound(self, name: str) -> TensorBound | None:
        if self._bounds is None:
            cotangents = None
            if self.seed is not None:
                cotangents = random_cotangents(self.problem, self.seed)
            self._bounds = run_bounds(self.kernel, self.problem, cotangents)
        return self._bounds.get(name)


@property_function
def contract_holds(spec: ProblemSpec, kernel: Kernel, *, backward: bool = True) -> PropertyResult:
    """Check the calling contract of a kernel on one case.

    With o, S_T = f(q, k, v, g, S_0) the kernel's outputs on the case:

    * o has shape ``[B, T, H, V]`` and the input dtype; S_T (z_T) has shape ``[N, H, K, V]``
      (``[N, H, K]``) and the declared dtype (float32, or the input dtype); nothing is NaN,
      except where the kernel's declared zero-denominator convention (``ieee``, ``any``) allows
      it (`nonfinite_allowed`);
    * every input (and ``cu_seqlens``) is bitwise unchanged by the call (and the backward);
    * f(x) ≡ f(x) (bit-identical rerun) when the kernel promises determinism, else
      |f(x) - f(x)| <= B + B with B the error model's bound (an ``any`` kernel's values where the
      exact denominator is 0 are not compared);
    * f(transposed-stride x) ≡ f(x) and f(x as a slice of a larger NaN-filled tensor) ≡ f(x)
      when it promises determinism and layout-exactness (plain PyTorch reductions follow the
      strides, so their bits do), else within B + B;
    * with `torch.empty`/`torch.empty_like` returning NaN-filled tensors, outputs (and
      gradients, when backward is supported) are unchanged: ≡ (or within B + B).

    Held with some bits different within the bounds, the result is ``within_rounding``, naming
    the flags that would make it strict.

    Args:
        spec: The case.
        kernel: The kernel under test.
        backward: Include the gradients in the NaN-poisoning check. Default: `True`.

    Returns:
        The `PropertyResult`: bitwise comparisons of every input with its value before the
        calls (``"input <name>"``) and of every tensor of every rerun with the reference run
        (pairwise within B + B where bit-identity is not promised and the bits differ); a failed
        run is a finding; whether every rerun was bit-identical is in its notes.
    """
    case = prepare_case("contract_holds", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    # The reference run takes contiguous inputs; the case's own layout is one of the variants.
    problem = relayout(case.problem, lambda x: x.contiguous())
    before = _snapshot(problem)
    first = run_kernel(kernel, problem)
    comparisons = _inputs_unmodified(kernel, problem, before, "after the first call")
    judge = _Judge(kernel, problem, first)
    judge.run(problem, "on a rerun")
    layout = ("deterministic", "layout_exact")
    judge.run(relayout(problem, _transposed), "with transposed-stride inputs", promised=layout)
    judge.run(relayout(problem, _sliced), "with inputs sliced from larger tensors", promised=layout)
    seed = spec.seed + 1 if backward and kernel.capabilities.backward else None
    comparisons += judge.comparisons
    findings, notes = judge.findings, judge.notes
    clean = first
    if seed is not None:
        try:
            clean = run_kernel(kernel, problem, cotangent_seed=seed)
        except KernelFailure as exc:
            return case.judged(comparisons, findings=[*findings, f"backward: {exc}"], notes=notes)
    comparisons += _inputs_unmodified(kernel, problem, before, "after the reruns")
    poisoned = _Judge(kernel, problem, clean, seed)
    poisoned.run(
        problem,
        "with torch.empty/empty_like returning NaN-filled memory",
        during=nan_poisoned_allocations,
        cotangent_seed=seed,
    )
    comparisons += poisoned.comparisons
    findings += poisoned.findings
    notes += poisoned.notes
    bit = judge.bit_identical and poisoned.bit_identical
    notes.append(f"every rerun bit-identical: {bit}")
    result = case.judged(comparisons, findings=findings, notes=notes)
    loose = [*judge.loose, *(f for f in poisoned.loose if f not in judge.loose)]
    if not loose:
        return result
    return within_rounding(result, "reruns and layouts agree", " ".join(loose))


__all__ = ["contract_holds"]
