# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract of a delta-rule kernel: the linear family's, through the same judge.

`contract_holds` and `backward_takes_any_cotangent` mean here what they mean for linear
attention (`linattn_properties.contract`): the same memory layouts, the same expanded inputs and
cotangents, the same NaN-poisoned allocations, judged by the same `RunJudge` against the same
error bounds (the delta rule's).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from linattn_properties._judge import RunJudge, judge_cotangent_layouts, judge_input_layouts
from linattn_properties._support import KernelFailure, property_function, within_rounding
from linattn_properties.delta._support import (
    DeltaRun,
    against_oracle,
    bounds_of,
    prepare,
    run,
    verdict,
)
from linattn_verify.core.bound import TensorBound
from linattn_verify.core.memory import Layout, expand_dim, nan_poisoned_allocations
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.strategies import random_delta_cotangents
from linattn_verify.results import PropertyResult

HEAD_DIMS = {"q": 2, "k": 2, "v": 2, "beta": 2, "g": 2, "initial_state": 1}
"""Where each input of a delta problem has its head dim."""


def relayout(problem: DeltaProblem, how: Layout) -> DeltaProblem:
    """``problem`` with every input passed through ``how`` (same values)."""
    return replace(problem, **{n: how(x) for n, x in problem.inputs().items()})  # type: ignore[arg-type]


def _heads_expanded(problem: DeltaProblem) -> DeltaProblem | None:
    """``problem`` with head 0's inputs expanded over every head, or `None` with one head."""
    if problem.shape[2] < 2:
        return None
    return replace(problem, **expand_dim(problem.inputs(), HEAD_DIMS))


def _judge(
    kernel: DeltaKernel,
    problem: DeltaProblem,
    reference: DeltaRun,
    cotangents: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> RunJudge:
    def bounds() -> dict[str, TensorBound]:
        named = bounds_of(kernel, problem)
        if cotangents is not None:
            do, dS = cotangents
            recipe = kernel.precision_recipe(problem.q.dtype)
            grads = backward_bounds(
                problem, recipe, do=do, d_final_state=dS,
                causal_exact=kernel.capabilities.causal_exact,
            )  # fmt: skip
            named.update(grads)
        return named

    return RunJudge(
        kernel.name,
        kernel.capabilities,
        reference.everything(),
        run=lambda p, **options: run(kernel, p, **options).everything(),
        bounds=bounds,
    )


@property_function
def contract_holds(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check the calling convention under NaN-poisoned allocations, reruns and memory layouts.

    The kernel runs with `torch.empty` returning NaN-filled memory (a read of uninitialised
    memory shows as NaN where the oracle is finite), and its inputs must come back unchanged
    (`run` checks); o and S_T must be within the oracle's bound. Then, against that run: a
    rerun, inputs transposed, sliced from larger NaN-filled tensors and with their last dim
    strided, and one head's inputs expanded (stride 0) over every head (against the dense run of
    those values, forward only), and the gradients under NaN-poisoned allocations against a
    clean backward: ≡ where the kernel promises determinism (and layout-exactness, for
    layouts), else within B + B.
    """
    prop = "contract_holds"
    case_ = prepare(prop, case, kernel, in_contract=True)
    if isinstance(case_, PropertyResult):
        return case_
    problem = relayout(case_.problem, lambda x: x.contiguous())
    with nan_poisoned_allocations():
        first = run(kernel, problem)
    bounds = bounds_of(kernel, problem)
    comparisons = against_oracle(first, bounds, kernel.name)
    judge = _judge(kernel, problem, first)
    judge.run(problem, "on a rerun with NaN-filled allocations", during=nan_poisoned_allocations)
    judge_input_layouts(
        judge,
        problem,
        relayout=relayout,
        expand_heads=_heads_expanded,
        dense=lambda p: run(kernel, p),
        judge_of=lambda p, reference: _judge(kernel, p, reference),
    )
    if kernel.capabilities.backward:
        cotangents = random_delta_cotangents(problem, case.seed + 1)
        try:
            clean = run(kernel, problem, cotangents=cotangents)
        except KernelFailure as exc:
            judge.findings.append(f"backward: {exc}")
        else:
            poisoned = _judge(kernel, problem, clean, cotangents)
            poisoned.run(
                problem,
                "with torch.empty/empty_like returning NaN-filled memory",
                during=nan_poisoned_allocations,
                cotangents=cotangents,
            )
            judge.absorb(poisoned)
    result = verdict(
        prop,
        kernel,
        case,
        comparisons + judge.comparisons,
        findings=judge.findings,
        bounds=list(bounds.values()),
    )
    if not judge.loose:
        return result
    return within_rounding(result, "reruns and layouts agree", " ".join(judge.loose))


@property_function
def backward_takes_any_cotangent(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that the backward reads its cotangents through their strides.

    As for linear attention (`linattn_properties.contract.backward_takes_any_cotangent`): the
    cotangent ``o.sum()`` gives (ones, every stride 0), a transposed one and a zero one (the
    final state's alike), each against the same values handed over dense and contiguous.
    """
    prop = "backward_takes_any_cotangent"
    case_ = prepare(prop, case, kernel, backward=True, in_contract=True)
    if isinstance(case_, PropertyResult):
        return case_
    problem = relayout(case_.problem, lambda x: x.contiguous())
    drawn = random_delta_cotangents(problem, case.seed + 2)
    judge = judge_cotangent_layouts(
        problem,
        drawn,
        # A backward that fails on a dense cotangent fails the property as it is.
        dense=lambda cotangents: run(kernel, problem, cotangents=cotangents),
        judge=lambda dense, cotangents: _judge(kernel, problem, dense, cotangents),
    )
    result = verdict(prop, kernel, case, judge.comparisons, findings=judge.findings)
    if not judge.loose:
        return result
    return within_rounding(
        result, "gradients agree across cotangent layouts", " ".join(judge.loose)
    )


__all__ = ["backward_takes_any_cotangent", "contract_holds"]
