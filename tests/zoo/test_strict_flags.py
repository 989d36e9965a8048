# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Each strict flag still catches what its bitwise property caught before exactness was declared.

Bit-for-bit identities are promises a kernel declares (docs/design.md §8.12); undeclared, they
are judged within the error bound, and a sub-bound break is ``within_rounding``, not a failure.
For each promise a broken kernel here breaks it by less than rounding: declared (the ``check``
flag), the property fails; undeclared, it comes out ``within_rounding``; and the correct twin
holds with the promise declared.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
import torch
from linattn_properties._testing import example_spec
from linattn_properties.causality import causal_outputs_exact
from linattn_properties.contract import contract_holds

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import RECIPES, convention_kernel, evaluate_form
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.registry import FULL

F32 = torch.float32
REFERENCE = convention_kernel(lambda p: _rounded(p, *evaluate_form("chunk", p.to(F32))))


def _rounded(p: Problem, o: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    return o.to(p.q.dtype), state


def _next_token_leaks(p: Problem) -> tuple[torch.Tensor, Any]:
    """Causality: o_t reads the next token's value with a weight of 2^-22, within rounding."""
    o, state = evaluate_form("chunk", p.to(F32))
    leak = torch.zeros_like(o)
    leak[:, :-1] = p.v[:, 1:].to(F32) * 2.0**-22
    return (o + leak).to(p.q.dtype), state


_CALLS = itertools.count()


def _alternating_ulp(p: Problem) -> tuple[torch.Tensor, Any]:
    """Determinism: every other call moves o by one float32 ulp (a split-K atomic's order)."""
    o, state = evaluate_form("chunk", p.to(F32))
    if next(_CALLS) % 2:
        o = torch.nextafter(o, torch.full_like(o, torch.inf))
    return o.to(p.q.dtype), state


def _state_summed_over_strides(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    """Layouts: a correct kernel whose S_T = Σ_t k_t v_t^T is one torch reduction over T, whose
    order (and so whose bits) follows the strides of its inputs."""
    o, state = REFERENCE(q, k, v, g, **kw)
    if kw.get("output_final_state") and g is None and kw.get("initial_state") is None:
        state = (k.to(F32)[..., :, None] * v.to(F32)[..., None, :]).sum(1)
    return o, state


def _kernel(name: str, fn: Any, **promises: bool) -> Kernel:
    undeclared = {"deterministic": False, "causal_exact": False, "layout_exact": False}
    capabilities = replace(FULL, **{**undeclared, **promises})
    return Kernel(name=name, fn=fn, capabilities=capabilities, recipe=RECIPES["chunk"])


CAUSAL_CASE = example_spec(T=21, decay="none", initial_state=False, seed=5)
LAYOUT_CASE = example_spec(B=2, T=13, K=5, V=7, decay="none", initial_state=False, seed=3)


@pytest.mark.parametrize(
    ("promises", "status"),
    [({"causal_exact": True}, "failed"), ({}, "within_rounding")],
    ids=["--causal-exact", "undeclared"],
)
def test_causal_exact_catches_a_sub_rounding_leak(promises: dict[str, bool], status: str) -> None:
    broken = _kernel("strict/next_token_leaks", convention_kernel(_next_token_leaks), **promises)
    result = causal_outputs_exact(CAUSAL_CASE, broken)
    assert result.status == status, result.report()
    if status == "within_rounding":
        assert "--causal-exact" in (result.reason or "")


def test_the_causal_twin_holds_bit_for_bit() -> None:
    twin = _kernel("strict/twin", REFERENCE, causal_exact=True)
    assert causal_outputs_exact(CAUSAL_CASE, twin).status == "held"


@pytest.mark.parametrize(
    ("promises", "status"),
    [({"deterministic": True}, "failed"), ({}, "within_rounding")],
    ids=["--deterministic", "undeclared"],
)
def test_deterministic_catches_a_one_ulp_rerun(promises: dict[str, bool], status: str) -> None:
    broken = _kernel("strict/alternating_ulp", convention_kernel(_alternating_ulp), **promises)
    result = contract_holds(LAYOUT_CASE, broken, backward=False)
    assert result.status == status, result.report()


@pytest.mark.parametrize(
    ("promises", "status"),
    [({"deterministic": True, "layout_exact": True}, "failed"), ({}, "within_rounding")],
    ids=["--layout-exact", "undeclared"],
)
def test_layout_exact_catches_stride_dependent_rounding(
    promises: dict[str, bool], status: str
) -> None:
    strided = _kernel("strict/strided", _state_summed_over_strides, **promises)
    result = contract_holds(LAYOUT_CASE, strided, backward=False)
    assert result.status == status, result.report()
    if status == "within_rounding":
        assert "--layout-exact" in (result.reason or "")


def test_the_layout_twin_holds_every_promise() -> None:
    twin = _kernel("strict/twin", REFERENCE, deterministic=True, layout_exact=True)
    assert contract_holds(LAYOUT_CASE, twin).status == "held"
