# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract over every registered kernel, and meta tests with contract breakers."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import assert_holds, bug_kernel, example_spec
from linattn_properties.contract import contract_holds, nan_poisoned_allocations

from linattn_verify.errors import PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.strategies import ProblemSpec, kernel_specs

SMALL = {"max_seq_len": 10, "max_head_dim": 4}


base = partial(example_spec, B=2, T=13, K=3, V=5, scale=0.3, seed=3)


NASTY = {
    "normalized-varlen-bf16": base(
        B=1, dtype="bfloat16", normalize=True, eps=1e-2, feature_map="elu1", segments=(4, 0, 9)
    ),
    "T=1-fp16": base(T=1, dtype="float16", decay="none"),
}


@given(data=st.data())
def test_contract_holds(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    result = contract_holds(spec, kernel)
    note(result.report())
    target(1.0 - float(result.scores.get("bit_identical", 1.0)), label="not bit-identical")
    result.raise_for_failure()


@pytest.mark.cases(NASTY)
def test_contract_holds_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    result = contract_holds(spec, kernel)
    assert_holds(result)


def test_nan_poisoning_patches_and_restores_torch_empty() -> None:
    real = torch.empty
    with nan_poisoned_allocations():
        assert torch.isnan(torch.empty(3)).all()
        assert torch.isnan(torch.empty_like(torch.zeros(2, 2))).all()
        # Integer buffers are left alone (garbage indices could crash the interpreter).
        torch.empty(3, dtype=torch.int64)
    assert torch.empty is real


# Meta tests: each contract breaker must fail with a message naming what it broke.

REFERENCE = float32_reference("recurrent")


def modifies_input(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    out = REFERENCE(q, k, v, g, **kw)
    with torch.no_grad():
        v.mul_(2.0)
    return out


def reads_uninitialised(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    # Allocates the output and forgets the last token (the tail-chunk bug).
    out = torch.empty_like(o)
    out[:, :-1] = o[:, :-1]
    return out, final


def ignores_strides(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # Reinterprets the storage as if contiguous: wrong for transposed or sliced inputs.
    def raw(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())

    return REFERENCE(raw(q), raw(k), raw(v), g, **kw)


def changes_dtype(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    return o.to(torch.float16), final


_calls = [0]


def nondeterministic(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    _calls[0] += 1
    o, final = REFERENCE(q, k, v, g, **kw)
    return o + _calls[0] * 1e-3, final


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (modifies_input, "input v was modified in place"),
        (reads_uninitialised, "o holds"),
        (ignores_strides, "with transposed-stride inputs"),
        (changes_dtype, "returned o of dtype torch.float16, expected the input dtype"),
        (nondeterministic, "is not bit-identical on a rerun"),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_contract_holds_fails_for_contract_breakers(fn: Any, expected: str) -> None:
    result = contract_holds(base(), bug_kernel(fn))
    assert not result.ok
    assert expected in result.message, result.message
    with pytest.raises(PropertyViolation, match="contract_holds FAILED"):
        result.raise_for_failure()


def test_nondeterminism_is_judged_by_bounds_when_declared() -> None:
    # Declared nondeterministic: a 1e-3 shift is far beyond the fp32 bounds, so it still fails,
    # now against the sum of the two runs' bounds rather than bitwise.
    result = contract_holds(base(), bug_kernel(nondeterministic, deterministic=False))
    assert not result.ok
    assert "sum of 2 bounds" in result.message


def test_contract_holds_passes_the_correct_twin() -> None:
    result = contract_holds(base(), replace(bug_kernel(REFERENCE), name="torch/twin"))
    assert result.ok, result.report()
    assert result.scores["bit_identical"] == 1.0
