# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exact causality of outputs and gradients over every registered kernel, and meta tests."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.causality import causal_gradients_exact, causal_outputs_exact

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels
from linattn_verify.results import PropertyResult
from linattn_verify.running import check_property

KERNELS = list(registered_kernels("linear_attn").values())

# The Triton interpreter costs ~0.05-0.3 s a call at these sizes.
SMALL: dict[str, Any] = {"max_seq_len": 20, "max_head_dim": 5}


base = partial(
    example_spec, B=2, T=19, K=3, V=4, feature_map="elu1", normalize=True, eps=1e-06, seed=11
)


NASTY = {
    # A chunk boundary right after the cut and an empty segment.
    "varlen-empty": base(B=1, T=20, segments=(0, 17, 0, 3), seed=5, normalize=False, eps=0.0),
    "steep-decay-bf16": base(dtype="bfloat16", decay="overflowing", T=18),
    "T=2": base(T=2, seed=1),
}


def cut(result: PropertyResult) -> int:
    """The cut t a causality result notes."""
    (t,) = (int(m[1]) for n in result.notes if (m := re.match(r"cut t=(\d+)", n)))
    return t


@given(data=st.data())
def test_causal_outputs_exact(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(causal_outputs_exact, spec, linattn_kernel)


@given(data=st.data())
def test_causal_gradients_exact(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, max_seq_len=14, max_head_dim=4), label="spec")
    check_property(causal_gradients_exact, spec, linattn_kernel)


@pytest.mark.cases(NASTY)
def test_causality_on_nasty_cases(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    for prop in (causal_outputs_exact, causal_gradients_exact):
        result = check_property(prop, spec, linattn_kernel)
        assert result.status == "held", result.report()


def test_t1_is_not_applicable_not_passed() -> None:
    result = causal_outputs_exact(base(T=1), KERNELS[0])
    assert result.status == "not_applicable"
    assert result.reason == "no sequence has a position after the cut (T <= 1)"
    assert result.comparisons == ()


# Meta tests: a kernel that peeks at the next token must fail, with where and by how much.

REFERENCE = float32_reference("recurrent")


def reads_one_ahead(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # Blends the next token's value in: o_t then depends on v_{t+1}.
    ahead = torch.cat([v[:, 1:], v[:, -1:]], dim=1)
    return REFERENCE(q, k, v + 1e-3 * ahead, g, **kw)


def test_causal_outputs_exact_fails_for_a_kernel_reading_ahead() -> None:
    result = causal_outputs_exact(base(), bug_kernel(reads_one_ahead, varlen=False))
    assert result.status == "failed"
    t = cut(result)
    o = result.comparisons[0]
    assert o.tensor == f"o[t<={t}]"
    assert o.kind == "bitwise"
    assert o.other == f"after changing the inputs at positions > t={t}"
    assert not o.ok
    assert o.counts.mismatched > 0
    assert o.worst is not None
    # The first wrong row is the cut itself: it reads the first perturbed token.
    assert o.worst.index[1] <= t
    # Both sequences run past the cut: no final state is expected to stay the same.
    assert [c.tensor for c in result.comparisons] == [f"o[t<={t}]"]
    message = result.message()
    assert (
        f"bug/reads_one_ahead o[t<={t}] is not bit-identical after changing the inputs at "
        f"positions > t={t}!"
    ) in message, message


def test_causal_gradients_exact_fails_for_a_kernel_reading_ahead() -> None:
    result = causal_gradients_exact(base(), bug_kernel(reads_one_ahead, varlen=False))
    assert result.status == "failed"
    t = cut(result)
    by_tensor = {c.tensor: c for c in result.comparisons}
    assert set(by_tensor) == {f"dq[t>{t}]", f"dk[t>{t}]", f"dv[t>{t}]", f"dg[t>{t}]"}
    dv = by_tensor[f"dv[t>{t}]"]
    assert not dv.ok
    assert dv.kind == "bitwise"
    assert dv.deciding > 0
    assert dv.counts.mismatched > 0
    assert dv.worst is not None
    assert dv.worst.expected == 0
    assert dv.worst.index[1] > t
    assert (
        f"dv[t>{t}] is not bit-identical to 0 (the cotangent vanishes at positions > t={t})!"
        in result.message()
    )


def test_causal_properties_pass_the_correct_twin() -> None:
    twin = replace(
        bug_kernel(reads_one_ahead, varlen=False), name="torch/recurrent-twin", fn=REFERENCE
    )
    for prop in (causal_outputs_exact, causal_gradients_exact):
        result = prop(base(), twin)
        assert result.status == "held", result.report()
        assert result.comparisons
        assert all(c.kind == "bitwise" and c.deciding == 0 for c in result.comparisons)
