# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Batch and head independence and equivariance over every registered kernel, and meta tests."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.invariance import batch_and_head_equivariant, reindex

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.running import check_property

SMALL: dict[str, Any] = {"max_seq_len": 8, "max_head_dim": 3}


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
def test_batch_and_head_equivariant(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(batch_and_head_equivariant, spec, linattn_kernel)


@pytest.mark.cases(NASTY)
def test_batch_and_head_equivariant_on_nasty_cases(
    linattn_kernel: Kernel, spec: ProblemSpec
) -> None:
    result = check_property(batch_and_head_equivariant, spec, linattn_kernel)
    assert result.status == "held", result.report()


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
    ("fn", "variant"), [(mixes_heads, "head"), (mixes_batch, "sequence")], ids=["heads", "batch"]
)
def test_batch_and_head_equivariant_fails_for_mixing_kernels(fn: Any, variant: str) -> None:
    kernel = bug_kernel(fn)
    result = batch_and_head_equivariant(base(), kernel)
    assert result.status == "failed"
    assert "every run bit-identical to the original, reindexed: False" in result.notes
    alone = [
        c for c in result.comparisons if c.subject.startswith(f"{kernel.name} with {variant} ")
    ]
    assert alone
    assert all(c.subject.endswith(" alone") for c in alone)
    assert all(c.kind == "pair" and c.other == "the original run, reindexed" for c in alone)
    o = next(c for c in alone if c.tensor == "o")
    assert not o.ok
    assert o.deciding > 2
    assert o.counts.mismatched > 0
    assert f"{o.subject} and the original run, reindexed disagree on o!" in result.message()


def test_batch_and_head_equivariant_passes_the_correct_twin() -> None:
    result = batch_and_head_equivariant(base(), replace(bug_kernel(REFERENCE), name="twin"))
    assert result.status == "held", result.report()
    subjects = {c.subject for c in result.comparisons}
    assert len(subjects) == 3  # permuted, one sequence alone, one head alone
    assert "twin with permuted sequences and heads" in subjects
    # The permuted run compares its gradients too.
    permuted = {c.tensor for c in result.comparisons if c.subject.endswith("and heads")}
    assert {"o", "final_state", "dq", "dk", "dv", "dg", "dinitial_state"} <= permuted
