# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exactness properties of the delta rule: causality, reruns, and beta = 0 (bit equality).

Each is an identity of the arithmetic, not only of the mathematics: a correct kernel computes
the same bits whatever the later tokens hold (masked terms are exact zeros), on every rerun
(when it declares determinism), and, where beta = 0 and no decay applies, writes nothing (the
correction β e is an exact 0, so S + k 0^T is S).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from linattn_properties._support import (
    past_side,
    property_function,
    within_rounding,
)
from linattn_properties.causality import CAUSAL, _cut, future_mask
from linattn_properties.delta._support import against_oracle, bounds_of, prepare, run, verdict
from linattn_verify.compare import Side, compare_bitwise, compare_pair
from linattn_verify.delta.kernel import UNIT_KEY_SLACK, DeltaKernel
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.results import PropertyResult


def _fresh_future(problem: DeltaProblem, mask: torch.Tensor, seed: int) -> DeltaProblem:
    """Replace q, k, v, beta, g and gv at the masked tokens by fresh valid values."""
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)

    def where(x: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        m = mask.reshape(*mask.shape, *([1] * (x.ndim - 2))).to(x.device)
        return torch.where(m, new.to(x.device, x.dtype), x)

    k_new = torch.randn(problem.k.shape, generator=gen, dtype=torch.float64)
    if not problem.l2norm_qk:
        # Unit keys, shrunk a little so that rounding keeps them inside a unit-key contract.
        k_new = k_new / k_new.norm(dim=-1, keepdim=True) * (1 - UNIT_KEY_SLACK / 2)
    top = 1.0 if float(problem.beta.max()) <= 1 else 1.99
    g, gv = problem.g, problem.gv
    if g is not None:
        g = where(g, -10.0 * torch.rand(g.shape, generator=gen, dtype=torch.float64))
    if gv is not None:
        gv = where(gv, -10.0 * torch.rand(gv.shape, generator=gen, dtype=torch.float64))
    return replace(
        problem,
        q=where(problem.q, 3 * torch.randn(problem.q.shape, generator=gen, dtype=torch.float64)),
        k=where(problem.k, k_new),
        v=where(problem.v, 5 * torch.randn(problem.v.shape, generator=gen, dtype=torch.float64)),
        beta=where(problem.beta, top * torch.rand(problem.beta.shape, generator=gen)),
        g=g,
        gv=gv,
    )


@property_function
def causal_outputs_exact(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that o at positions <= t does not depend on inputs after t.

    For a cut t (drawn from the case's seed) and inputs x' equal to x at every sequence-local
    position <= t (q, k, v, beta, g replaced by fresh valid values after it, keys unit-norm),
    for every s <= t:

        causal_exact:  o(x')_s ≡ o(x)_s                          (≡: bit-identical, NaN = NaN)
        otherwise:     |o(x')_s - o(x)_s| <= B_s(x') + B_s(x), both finite or neither

    A kernel that does not promise bit-exact causality (a general solver for the chunk's
    triangular system, a gate reference point at the chunk's end: FLA's KDA) may round its past
    outputs differently when the chunk's later tokens change; its chunk bound charges each output
    the whole chunk (docs/error-model.md §8.10). Differing bits within the bound make the result
    ``within_rounding``. A steep fresh gate after the cut catches exp of an unmasked gate
    difference (inf · 0 = NaN in the past rows).
    """
    prop = "causal_outputs_exact"
    case_ = prepare(prop, case, kernel)
    if isinstance(case_, PropertyResult):
        return case_
    problem = case_.problem
    t = _cut(problem, case.seed)  # type: ignore[arg-type]
    if t is None:
        return case_.not_applicable("no sequence has a position after the cut (T <= 1)")
    mask = future_mask(problem, t)  # type: ignore[arg-type]
    changed = _fresh_future(problem, mask, case.seed)
    base = run(kernel, problem)
    other = run(kernel, changed)
    past = (~mask)[..., None, None].to(base.o.device)
    o2 = torch.where(past, other.o, base.o)
    condition = f"after changing the inputs at positions > t={t}"
    comparison = compare_bitwise(f"o[t<={t}]", o2, base.o, subject=kernel.name, condition=condition)
    if kernel.capabilities.causal_exact or comparison.ok:
        return case_.judged([comparison])
    before, after = bounds_of(kernel, problem)["o"], bounds_of(kernel, changed)["o"]
    pair = compare_pair(
        f"o[t<={t}]",
        past_side(f"{kernel.name} {condition}", past, other.o, base.o, after, before),
        Side.of("the run before the change", base.o, before),
        before.reference,
    )
    return within_rounding(case_.judged([pair]), *CAUSAL)


@property_function
def zero_beta_keeps_state(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that beta = 0 writes nothing: S_T ≡ S_0 bit for bit where nothing decays.

    With every beta_t = 0 and no decay (g absent, or g = 0 for a kernel that needs a gate, and a
    value gate gv = 0),
    S_t = S_{t-1} + k_t (0 · e_t)^T = S_{t-1} exactly in any arithmetic, so the final state of
    every sequence is its initial state (0 without one) bit for bit (rounded once to the input
    dtype for a kernel that returns its state so), and o_t = s S_0^T q_t within the oracle's
    bound. It assumes only that a product with an exact zero is zero and adding zero changes
    nothing: true of any arithmetic, any solver (L = I exactly), any order.
    """
    prop = "zero_beta_keeps_state"
    built = case.build()
    g = None if built.g is None else torch.zeros_like(built.g)
    gv = None if built.gv is None else torch.zeros_like(built.gv)
    problem = replace(built, beta=torch.zeros_like(built.beta), g=g, gv=gv, output_final_state=True)
    reason = kernel.supports(problem)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    result = run(kernel, problem)
    assert result.final_state is not None
    H, K, V = problem.shape[2], problem.shape[3], problem.shape[4]
    initial = (
        torch.zeros(problem.num_sequences, H, K, V)
        if problem.initial_state is None
        else problem.initial_state
    )
    if kernel.capabilities.final_state_dtype == "input":
        # A state returned in the input dtype is S_0 rounded to it once.
        initial = initial.to(problem.q.dtype)
    bounds = bounds_of(kernel, problem)
    comparisons = [
        *against_oracle(replace(result, final_state=None), bounds, kernel.name),
        compare_bitwise(
            "final_state",
            result.final_state.to(torch.float64),
            initial.to(torch.float64),
            subject=kernel.name,
            condition="beta = 0 (S_T must be S_0)",
        ),
    ]
    return verdict(prop, kernel, case, comparisons, bounds=[bounds["o"]])


__all__ = ["causal_outputs_exact", "zero_beta_keeps_state"]
