# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exact causality of outputs and gradients over every registered kernel, and meta tests."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.causality import causal_gradients_exact, causal_outputs_exact

from linattn_verify.errors import PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.registry import registered_kernels
from linattn_verify.strategies import ProblemSpec, kernel_specs
from linattn_verify.verdict import PropertyResult

KERNELS = list(registered_kernels().values())

# The Triton interpreter costs ~0.05-0.3 s a call at these sizes.
SMALL = {"max_seq_len": 20, "max_head_dim": 5}


base = partial(
    example_spec, B=2, T=19, K=3, V=4, feature_map="elu1", normalize=True, eps=1e-06, seed=11
)


NASTY = {
    # A chunk boundary right after the cut and an empty segment.
    "varlen-empty": base(B=1, T=20, segments=(0, 17, 0, 3), seed=5, normalize=False, eps=0.0),
    "steep-decay-bf16": base(dtype="bfloat16", decay="overflowing", T=18),
    "T=2": base(T=2, seed=1),
}


def check(result: PropertyResult) -> None:
    note(result.report())
    target(float(result.scores.get("max_abs_diff", result.scores.get("max_abs_future_grad", 0))))
    result.raise_for_failure()


@given(data=st.data())
def test_causal_outputs_exact(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check(causal_outputs_exact(spec, kernel))


@given(data=st.data())
def test_causal_gradients_exact(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, max_seq_len=14, max_head_dim=4), label="spec")
    check(causal_gradients_exact(spec, kernel))


@pytest.mark.cases(NASTY)
def test_causality_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    for prop in (causal_outputs_exact, causal_gradients_exact):
        result = prop(spec, kernel)
        assert result.skipped is None, result.report()
        result.raise_for_failure()


def test_t1_is_skipped_not_passed() -> None:
    result = causal_outputs_exact(base(T=1), KERNELS[0])
    assert result.ok
    assert result.skipped is not None


# Meta tests: a kernel that peeks at the next token must fail, with where and by how much.

REFERENCE = float32_reference("recurrent")


def reads_one_ahead(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # Blends the next token's value in: o_t then depends on v_{t+1}.
    ahead = torch.cat([v[:, 1:], v[:, -1:]], dim=1)
    return REFERENCE(q, k, v + 1e-3 * ahead, g, **kw)


def test_causal_outputs_exact_fails_for_a_kernel_reading_ahead() -> None:
    result = causal_outputs_exact(base(), bug_kernel(reads_one_ahead, varlen=False))
    assert not result.ok
    assert "o at positions <= " in result.message
    assert "is not bit-identical after changing the inputs at positions >" in result.message
    assert result.worst_index is not None
    # The first wrong row is the cut itself: it reads the first perturbed token.
    assert result.worst_index[1] <= result.scores["t"]
    with pytest.raises(PropertyViolation, match="causal_outputs_exact FAILED"):
        result.raise_for_failure()


def test_causal_gradients_exact_fails_for_a_kernel_reading_ahead() -> None:
    result = causal_gradients_exact(base(), bug_kernel(reads_one_ahead, varlen=False))
    assert not result.ok
    assert "dv at positions > t=" in result.message
    assert result.scores["max_abs_future_grad"] > 0


def test_causal_properties_pass_the_correct_twin() -> None:
    twin = replace(
        bug_kernel(reads_one_ahead, varlen=False), name="torch/recurrent-twin", fn=REFERENCE
    )
    for prop in (causal_outputs_exact, causal_gradients_exact):
        result = prop(base(), twin)
        assert result.ok, result.report()
        assert result.skipped is None
