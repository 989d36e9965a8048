# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One case per family, gate and recipe for timing the float64 oracles and error bounds.

H = 2, K = V = 64, fp32 inputs, identity features (linear) or in-kernel L2 norm (delta), a mild
gate; ``run()`` computes the forward bounds then the gradient bounds (each with its oracle),
the work of judging one case. Used by `test_bound_cost.py` (pytest-benchmark, against T) and
by `gpu/bound_cost.py` (the lease's probe, per device).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def linear_case(T: int, gate: str, device: str, form: str = "chunk") -> Callable[[], object]:
    from linattn_verify.linear_attn.recipe import PrecisionRecipe
    from linattn_verify.linear_attn.semantics import validate_problem
    from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    g_shape = (1, T, 2) if gate == "scalar" else (1, T, 2, 64)
    g = -torch.rand(*g_shape, generator=gen) * 0.05
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, g, do = (x.to(device) for x in (q, k, v, g, do))
    problem = validate_problem(q, k, v, g, feature_map="identity")
    recipe = PrecisionRecipe(form=form)

    def run() -> object:
        forward = forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, forward=forward)

    return run


def delta_case(T: int, gate: str, device: str, form: str = "chunk") -> Callable[[], object]:
    from linattn_verify.delta.bounds import forward_bounds
    from linattn_verify.delta.gradient_bounds import backward_bounds
    from linattn_verify.delta.kernel import DeltaRecipe
    from linattn_verify.delta.problem import validate_delta

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    beta = torch.rand(1, T, 2, generator=gen)
    g = -torch.rand(1, T, 2, generator=gen) * 0.05 if gate == "scalar" else None
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, beta, do = (x.to(device) for x in (q, k, v, beta, do))
    g = None if g is None else g.to(device)
    problem = validate_delta(q, k, v, beta, g, l2norm_qk=True)
    recipe = DeltaRecipe(form=form)

    def run() -> object:
        forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, d_final_state=None)

    return run


CASES: dict[str, tuple[Callable[..., Callable[[], object]], tuple[str, ...]]] = {
    "linear_attn": (linear_case, ("scalar", "vector")),
    "delta": (delta_case, ("none", "scalar")),
}
