# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One case per family, gate and recipe for timing the float64 oracles and error bounds.

H = 2, K = V = 64, fp32 inputs, identity features (linear) or in-kernel L2 norm (delta), a mild
gate; ``run()`` computes the forward bounds then the gradient bounds (each with its oracle),
the work of judging one case. Used by `test_bound_cost.py` (pytest-benchmark, against T) and
by `gpu/bound_cost.py` (the lease's probe, per device). `REFERENCES` gives, for the same case,
one float64 reference forward alone (the unit judging's cost is measured in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _linear_problem(T: int, gate: str, device: str) -> tuple[Any, torch.Tensor]:
    """The linear family's case: (problem, do)."""
    from linattn_verify.linear_attn.semantics import validate_problem

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    g_shape = (1, T, 2) if gate == "scalar" else (1, T, 2, 64)
    g = -torch.rand(*g_shape, generator=gen) * 0.05
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, g, do = (x.to(device) for x in (q, k, v, g, do))
    return validate_problem(q, k, v, g, feature_map="identity"), do


def _delta_problem(T: int, gate: str, device: str) -> tuple[Any, torch.Tensor]:
    """The delta rule's case: (problem, do)."""
    from linattn_verify.delta.problem import validate_delta

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    beta = torch.rand(1, T, 2, generator=gen)
    g = -torch.rand(1, T, 2, generator=gen) * 0.05 if gate == "scalar" else None
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, beta, do = (x.to(device) for x in (q, k, v, beta, do))
    g = None if g is None else g.to(device)
    return validate_delta(q, k, v, beta, g, l2norm_qk=True), do


def linear_case(T: int, gate: str, device: str, form: str = "chunk") -> Callable[[], object]:
    from linattn_verify.linear_attn.recipe import PrecisionRecipe
    from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds

    problem, do = _linear_problem(T, gate, device)
    recipe = PrecisionRecipe(form=form)

    def run() -> object:
        forward = forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, forward=forward)

    return run


def delta_case(T: int, gate: str, device: str, form: str = "chunk") -> Callable[[], object]:
    from linattn_verify.delta.bounds import forward_bounds
    from linattn_verify.delta.gradient_bounds import backward_bounds
    from linattn_verify.delta.kernel import DeltaRecipe

    problem, do = _delta_problem(T, gate, device)
    recipe = DeltaRecipe(form=form)

    def run() -> object:
        forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, d_final_state=None)

    return run


def linear_reference(T: int, gate: str, device: str) -> Callable[[], object]:
    """One float64 forward of `linear_case`'s problem by the chunked oracle (O(T·C))."""
    from linattn_verify.linear_attn.oracles.chunk import chunk_reference

    problem = _linear_problem(T, gate, device)[0].to(torch.float64)
    return lambda: chunk_reference(problem)


def delta_reference(T: int, gate: str, device: str) -> Callable[[], object]:
    """One float64 forward of `delta_case`'s problem by the recurrent oracle."""
    from linattn_verify.delta.reference import delta_recurrent

    problem = _delta_problem(T, gate, device)[0].to(torch.float64)
    return lambda: delta_recurrent(problem)


REFERENCES: dict[str, Callable[[int, str, str], Callable[[], object]]] = {
    "linear_attn": linear_reference,
    "delta": delta_reference,
}

CASES: dict[str, tuple[Callable[..., Callable[[], object]], tuple[str, ...]]] = {
    "linear_attn": (linear_case, ("scalar", "vector")),
    "delta": (delta_case, ("none", "scalar")),
}
