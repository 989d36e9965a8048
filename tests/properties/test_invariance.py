# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Batch and head independence and equivariance over every registered kernel, and meta tests."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import assert_holds, bug_kernel, example_spec
from linattn_properties.invariance import batch_and_head_equivariant, reindex

from linattn_verify.errors import PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.strategies import ProblemSpec, kernel_specs

SMALL = {"max_seq_len": 8, "max_head_dim": 3}


base = partial(
    example_spec,
    B=2,
    T=11,
    H=3,
    K=3,
    V=2,
    feature_map="elu1",
    normalize=True,
    eps=1e-06,
    decay="steep",
    seed=21,
)


NASTY = {
    "varlen-with-empty-segment": base(B=1, T=12, segments=(5, 0, 7), normalize=False, eps=0.0),
    "bf16-identity": base(dtype="bfloat16", feature_map="identity", normalize=False, eps=0.0),
}


@given(data=st.data())
def test_batch_and_head_equivariant(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    result = batch_and_head_equivariant(spec, kernel)
    note(result.report())
    target(float(result.scores.get("max_r", 0.0)), label="max_r")
    result.raise_for_failure()


@pytest.mark.cases(NASTY)
def test_batch_and_head_equivariant_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    result = batch_and_head_equivariant(spec, kernel)
    assert_holds(result)


def test_reindex_packs_the_chosen_sequences_in_order() -> None:
    problem = base(B=1, T=12, segments=(5, 0, 7)).build()
    index = reindex(problem, [2, 0], [1])
    assert index.cu_seqlens is not None
    assert index.cu_seqlens.tolist() == [0, 7, 12]
    sub = index.problem(problem)
    assert torch.equal(sub.q[0, :7, 0], problem.q[0, 5:12, 1])
    assert torch.equal(sub.q[0, 7:, 0], problem.q[0, :5, 1])
    assert sub.initial_state is not None
    assert problem.initial_state is not None
    assert torch.equal(sub.initial_state[0, 0], problem.initial_state[2, 1])


# Meta test: a kernel that leaks information between heads must fail.

REFERENCE = float32_reference("recurrent")


def mixes_heads(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # Every head sees a little of the mean value over heads (a wrong head stride, in effect).
    return REFERENCE(q, k, v + 0.01 * v.mean(dim=2, keepdim=True), g, **kw)


def mixes_batch(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    return o + 0.01 * o[:1], final


@pytest.mark.parametrize(
    ("fn", "expected"), [(mixes_heads, "head"), (mixes_batch, "sequence")], ids=["heads", "batch"]
)
def test_batch_and_head_equivariant_fails_for_mixing_kernels(fn: Any, expected: str) -> None:
    result = batch_and_head_equivariant(base(), bug_kernel(fn))
    assert not result.ok
    assert f"with {expected}" in result.message, result.message
    assert "differs from the reordered original run beyond the sum of both runs' bounds" in (
        result.message
    )
    assert result.scores["bit_identical"] == 0.0
    with pytest.raises(PropertyViolation, match="batch_and_head_equivariant FAILED"):
        result.raise_for_failure()


def test_batch_and_head_equivariant_passes_the_correct_twin() -> None:
    result = batch_and_head_equivariant(base(), replace(bug_kernel(REFERENCE), name="twin"))
    assert result.ok, result.report()
    assert result.skipped is None
