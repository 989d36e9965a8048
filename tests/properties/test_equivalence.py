# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Equivalences: the forms agree, and the chunk size changes nothing; with meta tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import RARE_CASES, bug_kernel, example_spec
from linattn_properties.equivalence import chunk_size_invariant, forms_agree

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels
from linattn_verify.running import check_property
from linattn_verify.typing import FORMS

REGISTERED = registered_kernels("linear_attn")
TRITON_FORMS = [REGISTERED[f"triton/{form}"] for form in FORMS]
TORCH_FORMS = [REGISTERED[f"torch/{form}"] for form in FORMS]

# Small enough for the Triton interpreter: some properties call a kernel three or more times.
SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 6}
FORMS_SMALL: dict[str, Any] = {"max_seq_len": 16, "max_head_dim": 6}
"""`forms_agree` runs every form on each case; T <= 24 crossed no chunk or block boundary of the
Triton forms either (C = 64, parallel blocks of 32 or 64), so 16 costs a third less for the same
structure."""


base = example_spec


@pytest.mark.parametrize("kernels", [TRITON_FORMS, TORCH_FORMS], ids=["triton", "torch"])
@given(data=st.data())
def test_forms_agree(kernels: list[Kernel], data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernels[0], **FORMS_SMALL), label="spec")
    check_property(forms_agree, spec, kernels)


@given(data=st.data())
def test_chunk_size_invariant(data: st.DataObject) -> None:
    kernel = REGISTERED["triton/chunk"]
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check_property(chunk_size_invariant, spec, kernel)


@pytest.mark.cases(RARE_CASES)
@pytest.mark.parametrize("kernels", [TRITON_FORMS, TORCH_FORMS], ids=["triton", "torch"])
def test_equivalences_on_nasty_cases(kernels: list[Kernel], spec: ProblemSpec) -> None:
    # @example cannot be combined with st.data(), so the nasty cases run here explicitly.
    check_property(forms_agree, spec, kernels)
    for kernel in kernels:
        check_property(chunk_size_invariant, spec, kernel)


# Meta tests: deliberately wrong kernels must fail, with a message that says where.

REFERENCE = float32_reference("recurrent")


def drops_initial_state(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    kw.pop("initial_state", None)
    return REFERENCE(q, k, v, g, **kw)


def skips_last_partial_chunk(
    q: Any, k: Any, v: Any, g: Any = None, *, chunk_size: int = 8, **kw: Any
) -> Any:
    # Lightning-attention #27: a partial last chunk is left uninitialised (here: zeros).
    kw.pop("output_final_state", None)
    problem = validate_problem(q, k, v, g, **kw).to(torch.float32)
    o, _ = chunk_reference(problem, chunk_size)
    T = q.shape[1]
    o = o.clone()
    o[:, T - T % chunk_size :] = 0
    return o.to(q.dtype), None


def test_forms_agree_fails_when_one_kernel_drops_the_initial_state() -> None:
    kernels = [*TORCH_FORMS[:2], bug_kernel(drops_initial_state, name="bug/drops_initial_state")]
    result = forms_agree(base(), kernels)
    assert result.status == "failed"
    message = result.message()
    assert "and bug/drops_initial_state disagree on o!" in message, message
    failing = {(c.tensor, c.other) for c in result.comparisons if not c.ok}
    assert ("o", "bug/drops_initial_state") in failing
    # The two correct kernels agree with each other.
    assert all(c.ok for c in result.comparisons if "bug/" not in c.reference + c.subject)
    assert result.report().startswith("forms_agree FAILED")


def test_forms_agree_passes_for_correct_kernels_and_rejects_a_single_one() -> None:
    result = forms_agree(base(normalize=True, eps=1e-2), TORCH_FORMS)
    assert result.status == "held", result.report()
    tensors = {c.tensor for c in result.comparisons}
    assert {"o", "dq", "dinitial_key_sum"} <= tensors
    assert all(c.kind == "pair" for c in result.comparisons)
    with pytest.raises(InvalidArgument, match="at least two kernels"):
        forms_agree(base(), TORCH_FORMS[:1])


def test_chunk_size_invariant_fails_when_the_last_partial_chunk_is_skipped() -> None:
    kernel = bug_kernel(
        skips_last_partial_chunk,
        name="bug/skips_last_partial_chunk",
        chunk_sizes=(8, 16),
        final_state=False,
        backward=False,
    )
    # T = 27: the partial last chunk is [24, 27) for C = 8 but [16, 27) for C = 16.
    result = chunk_size_invariant(base(T=27, output_final_state=False), kernel)
    assert result.status == "failed"
    assert "[C=8] and bug/skips_last_partial_chunk[C=16] disagree on o!" in result.message()
    # The worst element is a token the C = 16 run dropped but the C = 8 run kept.
    worst = result.worst
    assert worst is not None
    assert worst.worst is not None
    assert 16 <= worst.worst.index[1] < 24


def test_chunk_size_invariant_does_not_apply_without_chunk_sizes() -> None:
    result = chunk_size_invariant(base(), TORCH_FORMS[1])
    assert result.status == "not_applicable"
    assert result.reason is not None
    assert "fewer than two chunk sizes" in result.reason
