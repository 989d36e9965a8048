# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Helpers for testing the properties: example cases, steered and deliberately wrong kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import RECIPES
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import FULL
from linattn_verify.typing import Form

EXAMPLE = ProblemSpec(
    B=1,
    T=21,
    H=2,
    K=4,
    V=3,
    dtype="float32",
    feature_map="identity",
    normalize=False,
    eps=0.0,
    scale=None,
    values="normal",
    decay="mild",
    initial_state=True,
    output_final_state=True,
    segments=None,
    seed=7,
)
"""A small dense float32 case; tests derive theirs with `example_spec`."""


def example_spec(**changes: Any) -> ProblemSpec:
    """Return `EXAMPLE` with ``changes`` applied."""
    return replace(EXAMPLE, **changes)


RARE_CASES = {
    # Every step <= -5.6, so |G| > 88 inside any 16-token chunk: exp(G_i)/exp(G_j) overflows.
    "overflowing-decay": example_spec(
        T=37, decay="overflowing", normalize=True, feature_map="elu1"
    ),
    "T=1": example_spec(B=2, T=1, normalize=True, feature_map="elu1", eps=1e-6),
    "varlen-empty-segments": example_spec(T=19, segments=(0, 6, 0, 1, 12), decay="steep"),
    # φ = exp(q) with q ~ -100 underflows in fp32; with eps = 0 the kernel's Z is 0 or
    # subnormal while the exact Z is positive.
    "elu1-underflow-eps0": example_spec(
        T=20, feature_map="elu1", values="underflowing_features", normalize=True, eps=0.0
    ),
    # eps = 0 and large elu1 features: some rows' exact Z is 0, others' a float64 subnormal
    # (2.5e-313), where 1/|Z| = inf times a zero term made gradient bounds NaN (now unverifiable).
    "float64-subnormal-denominator": ProblemSpec(
        B=2,
        T=7,
        H=2,
        K=1,
        V=1,
        dtype="float32",
        feature_map="elu1",
        normalize=True,
        eps=0.0,
        scale=None,
        values="large",
        decay="none",
        initial_state=False,
        output_final_state=False,
        segments=None,
        seed=1073741820,
    ),
}
"""Cases random search reaches rarely (docs/bug-classes.md), by name."""


def narrowed(kernel: Kernel, **capabilities: Any) -> Kernel:
    """The kernel with fewer declared capabilities: only to steer the strategy's draws."""
    return replace(kernel, capabilities=replace(kernel.capabilities, **capabilities))


def bug_kernel(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    form: Form = "recurrent",
    **capabilities: Any,
) -> Kernel:
    """Wrap ``fn`` (default name ``bug/<fn name>``) with `FULL` capabilities as changed."""
    return Kernel(
        name=name or "bug/" + fn.__name__,
        fn=fn,
        capabilities=replace(FULL, **capabilities),
        recipe=RECIPES[form],
        form=form,
    )


__all__ = ["EXAMPLE", "RARE_CASES", "bug_kernel", "example_spec", "narrowed"]
