# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Oracle agreement for the delta rule: outputs and gradients within the recipe's bound."""

from __future__ import annotations

from typing import Any

import torch

from linattn_properties._support import property_function
from linattn_properties.delta._support import (
    against_oracle,
    bounds_of,
    prepare,
    run,
    verdict,
)
from linattn_verify.compare import compare
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import delta_recurrent
from linattn_verify.delta.strategies import random_delta_cotangents
from linattn_verify.results import PropertyResult


@property_function
def outputs_match_oracle(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check o (and S_T when asked for) against the float64 oracle.

    For every element, with x̂ the kernel's value, x the oracle's and B the bound of the kernel's
    recipe (docs/error-model.md §8): r = |x̂ - x| / B <= 2, and x̂ finite wherever x is. Held
    cases whose bound spans the tensor's whole scale are ``ill_conditioned``. A case outside the
    kernel's contract (`DeltaKernel.contract`) is ``out_of_contract``: it must not crash and
    must be finite where the exact result is, nothing more.
    """
    prop = "outputs_match_oracle"
    case_ = prepare(prop, case, kernel)
    if isinstance(case_, PropertyResult):
        return case_
    outside = kernel.contract(case_.problem)
    if outside is not None:
        return _out_of_contract(prop, case_.problem, kernel, case, outside)
    result = run(kernel, case_.problem)
    bounds = bounds_of(kernel, case_.problem)
    comparisons = against_oracle(result, bounds, kernel.name)
    return verdict(prop, kernel, case, comparisons, bounds=list(bounds.values()))


def _out_of_contract(
    prop: str, problem: DeltaProblem, kernel: DeltaKernel, case: Any, why: str
) -> PropertyResult:
    """Judge an out-of-contract case for not crashing and finiteness only."""
    result = run(kernel, problem)  # a kernel that raises here fails (KernelFailure)
    exact_o, exact_S = delta_recurrent(problem)
    exact = {"o": exact_o} if exact_S is None else {"o": exact_o, "final_state": exact_S}
    broken = [
        name
        for name, x in result.outputs().items()
        if bool((torch.isfinite(exact[name]) & ~torch.isfinite(x.double())).any())
    ]
    if broken:
        finding = (
            f"{kernel.name}: non-finite {', '.join(broken)} where the exact result is finite "
            f"(a case outside its contract: {why})"
        )
        return verdict(prop, kernel, case, [], findings=[finding])
    return PropertyResult(prop, kernel.name, case.describe(), "out_of_contract", reason=why)


@property_function
def gradients_match_oracle(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check dq, dk, dv, dbeta, dg and dS_0 against float64 autograd of the oracle.

    The cotangents are drawn from the case's seed (`random_delta_cotangents`); the rule is the
    forward one, with the gradient bounds of docs/error-model.md §8.4 (the recurrent recipe's
    adjoint recurrence, or the chunk recipe's backward through the triangular inverse). o and
    S_T of the same run are judged as in `outputs_match_oracle`.
    """
    prop = "gradients_match_oracle"
    case_ = prepare(prop, case, kernel, backward=True, in_contract=True)
    if isinstance(case_, PropertyResult):
        return case_
    do, dS = random_delta_cotangents(case_.problem, case.seed)
    result = run(kernel, case_.problem, cotangents=(do, dS))
    assert result.grads is not None
    bounds = backward_bounds(
        case_.problem,
        case_.recipe,
        do=do,
        d_final_state=dS,
        causal_exact=kernel.capabilities.causal_exact,
    )
    forward = bounds_of(kernel, case_.problem)
    # The forward tensors of the same run too, as for linear attention: the report's verdict
    # map then has o and the final state beside the gradients.
    comparisons = against_oracle(result, forward, kernel.name) + [
        compare(result.grads[name[1:]], tb, subject=kernel.name) for name, tb in bounds.items()
    ]
    # Ill-conditioned is the gradients' to say: a blunt forward bound leaves them judged.
    return verdict(prop, kernel, case, comparisons, bounds=list(bounds.values()))


__all__ = ["gradients_match_oracle", "outputs_match_oracle"]
