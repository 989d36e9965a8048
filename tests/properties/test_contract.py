# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract over every registered kernel, and meta tests with contract breakers."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.contract import backward_takes_any_cotangent, contract_holds

from linattn_verify.core.memory import nan_poisoned_allocations
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.running import check_property

SMALL: dict[str, Any] = {"max_seq_len": 10, "max_head_dim": 4}


base = partial(example_spec, B=2, T=13, K=3, V=5, scale=0.3, seed=3)


NASTY = {
    "normalized-varlen-bf16": base(
        B=1, dtype="bfloat16", normalize=True, eps=1e-2, feature_map="elu1", segments=(4, 0, 9)
    ),
    "T=1-fp16": base(T=1, dtype="float16", decay="none"),
}


@given(data=st.data())
def test_contract_holds(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(contract_holds, spec, linattn_kernel)


@pytest.mark.cases(NASTY)
def test_contract_holds_on_nasty_cases(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    result = check_property(contract_holds, spec, linattn_kernel)
    assert result.status == "held", result.report()


@given(data=st.data())
def test_backward_takes_any_cotangent(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(backward_takes_any_cotangent, spec, linattn_kernel)


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
        # The run on private copies of the inputs notices the write.
        (modifies_input, "bug/modifies_input: input v was modified in place by the forward"),
        # The allocation poisoned with NaN leaks into o. (Only the finding is asserted, not which
        # run made it: memory torch.empty_like really hands out may hold NaN already, and then
        # the plain run reports it first. Without the poisoning it almost never does, and the
        # property would hold.)
        (reads_uninitialised, "bug/reads_uninitialised: o holds"),
        (
            changes_dtype,
            "bug/changes_dtype returned o of dtype torch.float16, expected the input dtype",
        ),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_contract_holds_fails_for_kernels_breaking_the_calling_convention(
    fn: Any, expected: str
) -> None:
    result = contract_holds(base(), bug_kernel(fn))
    assert result.status == "failed"
    assert result.reason is not None
    assert expected in result.reason, result.reason
    assert expected in result.message()


@pytest.mark.parametrize(
    ("fn", "tensor", "condition"),
    [
        (ignores_strides, "o", "with transposed-stride inputs"),
        (nondeterministic, "o", "on a rerun"),
    ],
    ids=lambda x: getattr(x, "__name__", x),
)
def test_contract_holds_fails_for_runs_that_differ(fn: Any, tensor: str, condition: str) -> None:
    result = contract_holds(base(), bug_kernel(fn))
    assert result.status == "failed"
    failing = {(c.tensor, c.other) for c in result.comparisons if not c.ok}
    assert (tensor, condition) in failing, failing
    (c,) = (c for c in result.comparisons if (c.tensor, c.other) == (tensor, condition))
    assert c.kind == "bitwise"
    assert c.counts.mismatched > 0
    assert f"{fn.__name__} {tensor} is not bit-identical {condition}!" in result.message()
    assert "every rerun bit-identical: False" in result.notes


def test_contract_holds_fails_for_a_kernel_writing_to_cu_seqlens() -> None:
    def shifts_cu_seqlens(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        out = REFERENCE(q, k, v, g, **kw)
        kw["cu_seqlens"][1:-1] += 1  # the caller's tensor: not copied by the harness
        return out

    spec = base(B=1, segments=(6, 7))
    result = contract_holds(spec, bug_kernel(shifts_cu_seqlens))
    assert result.status == "failed"
    (first, *_) = (c for c in result.comparisons if c.tensor == "input cu_seqlens")
    assert first.other == "after the first call (modified in place)"
    assert not first.ok
    assert first.worst is not None
    assert first.worst.index == (1,)
    assert "input cu_seqlens is not bit-identical after the first call (modified in place)!" in (
        result.message()
    )


def test_nondeterminism_is_judged_by_bounds_when_declared() -> None:
    # Declared nondeterministic: a 1e-3 shift is far beyond the fp32 bounds, so it still fails,
    # now against the sum of the two runs' bounds rather than bitwise.
    result = contract_holds(base(), bug_kernel(nondeterministic, deterministic=False))
    assert result.status == "failed"
    failing = [c for c in result.comparisons if not c.ok]
    assert failing
    assert all(c.kind == "pair" for c in failing)
    rerun = next(c for c in failing if c.subject == "bug/nondeterministic on a rerun")
    assert rerun.tensor == "o"
    assert rerun.other == "the reference run"
    assert rerun.deciding > 2
    assert "bug/nondeterministic on a rerun and the reference run disagree on o!" in (
        result.message()
    )


def test_contract_holds_passes_the_correct_twin() -> None:
    result = contract_holds(base(), replace(bug_kernel(REFERENCE), name="torch/twin"))
    assert result.status == "held", result.report()
    assert "every rerun bit-identical: True" in result.notes
    assert all(c.kind == "bitwise" and c.deciding == 0 for c in result.comparisons)
    conditions = {c.other for c in result.comparisons}
    assert {
        "on a rerun",
        "with transposed-stride inputs",
        "with inputs sliced from larger tensors",
        "with torch.empty/empty_like returning NaN-filled memory",
        "with the inputs' last dim strided",
        "with one head's inputs expanded (stride 0)",
    } <= conditions


def last_stride_ignored(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # Steps the last dim by 1 whatever its stride (a ptr++ loop), then copies as most kernels.
    def walked(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, x.shape, (*x.stride()[:-1], 1), x.storage_offset())

    return REFERENCE(walked(q), walked(k), walked(v), g, **kw)


def test_contract_holds_fails_for_a_kernel_ignoring_the_last_dims_stride() -> None:
    result = contract_holds(base(), bug_kernel(last_stride_ignored))
    assert result.status == "failed"
    # The layouts whose last stride is 1 pass; the strided one reads the NaN between the
    # elements (its validation refuses them).
    assert not [c for c in result.comparisons if not c.ok]
    assert result.reason is not None
    assert result.reason.startswith("run with the inputs' last dim strided: ")
    assert "holds NaN" in result.reason


class _DenseCotangent(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        dense = torch.empty(grad.shape).stride()
        return torch.as_strided(grad, grad.shape, dense, grad.storage_offset())


def dense_cotangent(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    o, final = REFERENCE(q, k, v, g, **kw)
    return _DenseCotangent.apply(o), final


def test_a_backward_reading_its_cotangent_as_dense_fails() -> None:
    result = backward_takes_any_cotangent(base(), bug_kernel(dense_cotangent))
    assert result.status == "failed"
    # o.sum()'s expanded cotangent has a one-element storage: reading it as dense raises.
    assert "the cotangent o.sum() gives" in (result.reason or ""), result.reason
    transposed = [c for c in result.comparisons if c.other == "with a transposed-stride cotangent"]
    assert any(not c.ok and c.tensor.startswith("d") for c in transposed)


def test_backward_takes_any_cotangent_holds_for_the_twin_bit_for_bit() -> None:
    result = backward_takes_any_cotangent(base(), replace(bug_kernel(REFERENCE), name="torch/twin"))
    assert result.status == "held", result.report()
    assert {c.other for c in result.comparisons} == {
        "with the cotangent o.sum() gives (ones, every stride 0)",
        "with a transposed-stride cotangent",
        "with a zero cotangent (every stride 0)",
    }
    assert all(c.kind == "bitwise" for c in result.comparisons)
