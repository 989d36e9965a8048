# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract of a kernel (docs/design.md §4, §8.9).

`contract_holds` checks what a correct *function* cannot tell apart from a correct *kernel*:
shapes and dtypes, inputs left alone, layout independence, determinism, and no reads of
uninitialised memory. It runs the kernel several times and reports every broken item, so it
alone among the properties catches `KernelFailure` itself (one finding per failed run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from linattn_properties._judge import (
    RunJudge,
    judge_cotangent_layouts,
    judge_input_layouts,
)
from linattn_properties._nonfinite import undefined_elements
from linattn_properties._support import (
    KernelFailure,
    KernelRun,
    prepare_case,
    property_function,
    relayout,
    run_bounds,
    run_kernel,
    within_rounding,
)
from linattn_verify.compare import Comparison, compare_bitwise
from linattn_verify.core.memory import (
    expand_dim,
    nan_poisoned_allocations,
)
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import PropertyResult

HEAD_DIMS = {"q": 2, "k": 2, "v": 2, "g": 2, "gv": 2, "initial_state": 1, "initial_key_sum": 1}
"""Where each input of a problem has its head dim."""


def _heads_expanded(problem: Problem) -> Problem | None:
    """``problem`` with head 0's inputs expanded over every head, or `None` with one head."""
    if problem.shape[2] < 2:
        return None
    return problem.with_tensors(**expand_dim(problem.inputs(), HEAD_DIMS))


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


def _judge(
    kernel: Kernel,
    problem: Problem,
    reference: KernelRun,
    cotangents: tuple[torch.Tensor, Any] | None = None,
) -> RunJudge:
    """A `RunJudge` of ``kernel``'s runs against ``reference``, a run of ``problem``."""
    return RunJudge(
        kernel.name,
        kernel.capabilities,
        reference.everything(),
        run=lambda p, **options: run_kernel(kernel, p, **options).everything(),
        bounds=lambda: run_bounds(kernel, problem, cotangents),
        undefined=lambda: undefined_elements(kernel, problem),
    )


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
    * f(x) is the same for x transposed-stride, x a slice of a larger NaN-filled tensor (a
      storage offset) and x with its last dim strided (NaN between its elements): ≡ when it
      promises determinism and layout-exactness (plain PyTorch reductions follow the strides,
      so their bits do), else within B + B;
    * with one head's inputs expanded (stride 0) over every head, o and the final state are those
      of the same values laid out contiguously (≡ or within B + B; forward only: autograd sums
      an expanded input's gradient over the heads, a rounding no kernel owns);
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
    judge = _judge(kernel, problem, first)
    judge.run(problem, "on a rerun")
    judge_input_layouts(
        judge,
        problem,
        relayout=relayout,
        expand_heads=_heads_expanded,
        dense=lambda p: run_kernel(kernel, p),
        judge_of=lambda p, reference: _judge(kernel, p, reference),
    )
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
    poisoned = _judge(
        kernel, problem, clean, None if seed is None else random_cotangents(problem, seed)
    )
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


@property_function
def backward_takes_any_cotangent(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that the backward reads its cotangents through their strides.

    The commonest loss, ``o.sum()``, hands the backward ``ones.expand(o.shape)`` (every stride
    0); a loss on a permuted output hands it a non-contiguous one; an output the loss ignores,
    zeros. For each of those (the final state's cotangent alike), the gradients must be those of
    the same values handed over dense and contiguous: ≡ when the kernel promises determinism and
    layout-exactness, else within B + B (B: the gradient bound for that cotangent).
    """
    case = prepare_case("backward_takes_any_cotangent", spec, kernel, backward=True)
    if isinstance(case, PropertyResult):
        return case
    problem = relayout(case.problem, lambda x: x.contiguous())
    drawn = random_cotangents(problem, spec.seed + 2)
    judge = judge_cotangent_layouts(
        problem,
        drawn,
        # A backward that fails on a dense cotangent fails the property as it is.
        dense=lambda cotangents: run_kernel(kernel, problem, cotangents=cotangents),
        judge=lambda dense, cotangents: _judge(kernel, problem, dense, cotangents),
    )
    result = case.judged(judge.comparisons, findings=judge.findings, notes=judge.notes)
    if not judge.loose:
        return result
    return within_rounding(
        result, "gradients agree across cotangent layouts", " ".join(judge.loose)
    )


__all__ = ["backward_takes_any_cotangent", "contract_holds"]
