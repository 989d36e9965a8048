# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The problem as a kernel sees it: its recipe's eps and normalizer form applied.

Every oracle and bound judges this problem, so the eps dtype (``eps_dtype``) and where eps goes
(``normalizer``) are decided in one place (`as_kernel_sees`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem


def as_kernel_sees(problem: Problem, recipe: PrecisionRecipe) -> Problem:
    """Return ``problem`` with eps as the kernel adds it: rounded to the recipe's ``eps_dtype``.

    The one place eps is rounded: the bounds (and so every comparison) judge this problem.

    eps inside the dot (``recipe.normalizer == "in-dot"``: s φ(q)·(z_t + eps)) is, without decay,
    exactly the offset form with eps = 0 and the initial key sum z_0 + eps (z_t + eps =
    (z_0 + eps) + Σ φ(k)), so every oracle and bound judges that problem unchanged; its final
    key sum is z_T + eps (`Problem.key_sum_offset` records the eps, which `forward_bounds` takes
    back off the reference; judging a judged problem again adds nothing). A decayed key sum
    would decay that eps too, so the form is refused with decay. The shifted z_0 is float64
    (the judged problem is float64 throughout), exact for z_0 = 0. A clamped denominator,
    max(s φ(q)·z, eps), is the problem's own ``clamp``, which every oracle and bound reads.
    """
    eps = recipe.effective_eps(problem.eps, problem.q.dtype)
    if recipe.normalizer == "offset" or not problem.normalize:
        return replace(problem, eps=eps)
    if recipe.normalizer == "clamp":
        return replace(problem, eps=eps, clamp=True)
    if problem.g is not None:
        raise InvalidArgument(
            "eps inside the dot (normalizer='in-dot') is judged without decay only: a decayed "
            "key sum would decay its eps too; got a problem with g."
        )
    N, H, F, V = problem.num_sequences, problem.q.shape[2], problem.feature_dim, problem.v.shape[-1]
    f64, device = torch.float64, problem.q.device
    S0 = problem.initial_state
    z0 = problem.initial_key_sum
    return replace(
        problem,
        eps=0.0,
        initial_state=torch.zeros(N, H, F, V, dtype=f64, device=device) if S0 is None else S0,
        initial_key_sum=(torch.zeros(N, H, F, dtype=f64, device=device) if z0 is None else z0)
        .to(f64)
        .add(eps),
        key_sum_offset=problem.key_sum_offset + eps,
    )


__all__ = ["as_kernel_sees"]
