# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The reference forms run in float32 by torch, as kernels in the calling convention.

They are correct kernels the harness must accept (beside our Triton kernels), with exactly known
precision recipes: global fp32 cumsum for the parallel form, chunk-local cumsums for the chunked
form, per-step exp(g) for the recurrent form, no tl.dot operand rounding, correctly rounded
division. Inputs in fp16/bf16 are upcast exactly; the output is rounded back to the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from linattn_verify.oracles.chunk import chunk_reference
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.oracles.recurrent import recurrent_reference
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import Problem, validate_problem
from linattn_verify.typing import Form

REFERENCE_CHUNK_SIZE = 8

RECIPES: dict[str, PrecisionRecipe] = {
    "parallel": PrecisionRecipe(
        form="parallel", dots_on_path=0, decay_scan="global", division="rn"
    ),
    "chunk": PrecisionRecipe(
        form="chunk",
        chunk_size=REFERENCE_CHUNK_SIZE,
        dots_on_path=0,
        decay_scan="chunk_local",
        division="rn",
    ),
    "recurrent": PrecisionRecipe(
        form="recurrent", dots_on_path=0, decay_scan="per_step", division="rn"
    ),
}
"""The precision recipe of each float32 reference form."""


def evaluate_form(form: Form, problem: Problem) -> tuple[torch.Tensor, Any]:
    """Evaluate ``problem`` in ``form`` by the reference code, in the problem's dtype."""
    if form == "parallel":
        return parallel_reference(problem)
    if form == "chunk":
        return chunk_reference(problem, chunk_size=REFERENCE_CHUNK_SIZE)
    return recurrent_reference(problem)


def convention_kernel(
    impl: Callable[[Problem], tuple[torch.Tensor, Any]], *, contiguous: bool = True
) -> Callable[..., tuple[torch.Tensor, Any]]:
    """Wrap ``impl(problem)`` in the calling convention, with the configurable keywords.

    With ``contiguous`` the inputs are made contiguous first, as most kernels do (FLA's
    ``input_guard``): torch's reductions would otherwise follow the input strides and round
    differently per layout, and the contract asks for bit-identical results whatever the strides.
    """

    def kernel(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        normalize: bool = False,
        eps: float = 0.0,
        feature_map: str = "identity",
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        if contiguous:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            g = None if g is None else g.contiguous()
        problem = validate_problem(
            q,
            k,
            v,
            g,
            scale=scale,
            normalize=normalize,
            eps=eps,
            feature_map=feature_map,
            initial_state=initial_state,
            output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
        )
        return impl(problem)

    kernel.__name__ = getattr(impl, "__name__", "kernel")
    kernel.__qualname__ = kernel.__name__
    return kernel


def float32_reference(form: Form) -> Callable[..., tuple[torch.Tensor, Any]]:
    """Return the float32 torch kernel of ``form`` in the calling convention (configurable)."""

    def impl(problem: Problem) -> tuple[torch.Tensor, Any]:
        o, state = evaluate_form(form, problem.to(torch.float32))
        return o.to(problem.q.dtype), state

    impl.__name__ = f"float32_{form}_reference"
    return convention_kernel(impl)


__all__ = [
    "RECIPES",
    "REFERENCE_CHUNK_SIZE",
    "convention_kernel",
    "evaluate_form",
    "float32_reference",
]
