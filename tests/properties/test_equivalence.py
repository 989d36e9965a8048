# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Equivalences: forms agree, chunk size, state split and varlen packing; with meta tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import event, given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import RARE_CASES, bug_kernel, example_spec
from linattn_properties.equivalence import (
    Side,
    chunk_size_invariant,
    discrepancy,
    forms_agree,
    state_split_composes,
    varlen_matches_separate_runs,
)

from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.oracles.chunk import chunk_reference
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.registry import registered_kernels
from linattn_verify.semantics import validate_problem
from linattn_verify.strategies import ProblemSpec, kernel_specs
from linattn_verify.verdict import PropertyResult

REGISTERED = registered_kernels()
KERNELS = list(REGISTERED.values())
TRITON_FORMS = [REGISTERED[f"triton/{form}"] for form in ("parallel", "chunk", "recurrent")]
TORCH_FORMS = [REGISTERED[f"torch/{form}"] for form in ("parallel", "chunk", "recurrent")]

# Small enough for the Triton interpreter: some properties call a kernel three or more times.
SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 6}


base = example_spec


def check(result: PropertyResult) -> None:
    note(result.report())
    event("skipped" if result.skipped else "checked")
    if result.scores:
        target(max(result.scores.values()), label="worst score")
    result.raise_for_failure()


@pytest.mark.parametrize("kernels", [TRITON_FORMS, TORCH_FORMS], ids=["triton", "torch"])
@given(data=st.data())
def test_forms_agree(kernels: list[Kernel], data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernels[0], **SMALL), label="spec")
    check(forms_agree(spec, kernels))


@given(data=st.data())
def test_chunk_size_invariant(data: st.DataObject) -> None:
    kernel = REGISTERED["triton/chunk"]
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check(chunk_size_invariant(spec, kernel))


@given(data=st.data())
def test_state_split_composes(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, min_seq_len=2, **SMALL), label="spec")
    # The split is defined for dense cases (varlen has its own property): a varlen draw is run
    # as the dense single sequence of the same tokens.
    spec = replace(spec, segments=None)
    check(state_split_composes(spec, kernel))


@given(data=st.data())
def test_varlen_matches_separate_runs(kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(kernel, **SMALL), label="spec")
    check(varlen_matches_separate_runs(spec, kernel))


@pytest.mark.cases(RARE_CASES)
@pytest.mark.parametrize("kernels", [TRITON_FORMS, TORCH_FORMS], ids=["triton", "torch"])
def test_equivalences_on_nasty_cases(kernels: list[Kernel], spec: ProblemSpec) -> None:
    # @example cannot be combined with st.data(), so the nasty cases run here explicitly.
    forms_agree(spec, kernels).raise_for_failure()
    for kernel in kernels:
        for prop in (state_split_composes, varlen_matches_separate_runs):
            prop(spec, kernel).raise_for_failure()
        chunk_size_invariant(spec, kernel).raise_for_failure()


def test_state_split_at_every_position_of_a_chunk_boundary() -> None:
    # Splits just before, at and after the 16-token chunk boundary of triton/chunk.
    kernel = replace(REGISTERED["triton/chunk"], options={"chunk_size": 16})
    spec = base(T=33, normalize=True, feature_map="elu1", eps=1e-6)
    for split in (15, 16, 17, 32):
        result = state_split_composes(spec, kernel, split=split)
        assert f"s={split}" in result.message
        result.raise_for_failure()


# Meta tests: deliberately wrong kernels must fail, with a message that says where.

REFERENCE = float32_reference("recurrent")


def drops_initial_state(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    kw.pop("initial_state", None)
    return REFERENCE(q, k, v, g, **kw)


def drops_initial_key_sum(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # PR #268's bug: resuming from (S, z) with the carried key sum z dropped.
    state = kw.pop("initial_state", None)
    if isinstance(state, tuple):
        state = (state[0], torch.zeros_like(state[1]))
    return REFERENCE(q, k, v, g, initial_state=state, **kw)


def ignores_cu_seqlens(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # The state never restarts at a sequence boundary; the final state is the last sequence's.
    cu = kw.pop("cu_seqlens", None)
    state = kw.pop("initial_state", None)
    if cu is not None and state is not None:
        state = state[:1] if isinstance(state, torch.Tensor) else (state[0][:1], state[1][:1])
    o, final = REFERENCE(q, k, v, g, initial_state=state, **kw)
    if final is not None and cu is not None:
        N = cu.numel() - 1
        final = final.expand(N, *final.shape[1:]).clone()
    return o, final


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
    assert not result.ok
    assert "and bug/drops_initial_state disagree on o!" in result.message, result.message
    assert result.scores["o.max_ratio"] > 2
    with pytest.raises(PropertyViolation, match="forms_agree FAILED"):
        result.raise_for_failure()


def test_forms_agree_passes_for_correct_kernels_and_rejects_a_single_one() -> None:
    result = forms_agree(base(normalize=True, eps=1e-2), TORCH_FORMS)
    assert result.ok, result.report()
    assert {"o.max_ratio", "dq.max_ratio", "dinitial_key_sum.max_ratio"} <= set(result.scores)
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
    assert not result.ok
    assert "[C=8] and bug/skips_last_partial_chunk[C=16] disagree on o!" in result.message
    # The worst element is a token the C = 16 run dropped but the C = 8 run kept.
    assert result.worst_index is not None
    assert 16 <= result.worst_index[1] < 24


def test_chunk_size_invariant_skips_kernels_without_chunk_sizes() -> None:
    result = chunk_size_invariant(base(), TORCH_FORMS[1])
    assert result.ok
    assert result.skipped is not None


@pytest.mark.parametrize(
    ("fn", "normalize"),
    [(drops_initial_state, False), (drops_initial_key_sum, True)],
    ids=["drops_initial_state", "drops_initial_key_sum"],
)
def test_state_split_composes_fails_when_the_state_is_not_resumed(
    fn: Callable[..., Any], normalize: bool
) -> None:
    # No initial state in the case: only the second half of the split starts from a state.
    spec = base(initial_state=False, normalize=normalize, feature_map="elu1")
    result = state_split_composes(spec, bug_kernel(fn), split=9)
    assert not result.ok
    assert "split at s=9" in result.message
    assert "o[9:] is not close to the float64 oracle" in result.message, result.message
    assert "disagree on o!" in result.message
    assert result.worst_index is not None
    assert result.worst_index[1] >= 9


def test_state_split_composes_skips_what_it_cannot_split() -> None:
    kernel = TORCH_FORMS[0]
    assert state_split_composes(base(T=1), kernel).skipped == "T < 2: nothing to split"
    assert state_split_composes(base(segments=(10, 11)), kernel).skipped is not None
    no_state = bug_kernel(REFERENCE, name="no-state", initial_state=False)
    assert state_split_composes(base(initial_state=False), no_state).skipped is not None
    with pytest.raises(InvalidArgument, match="split must be in"):
        state_split_composes(base(), kernel, split=21)


@pytest.mark.parametrize(
    "spec",
    [base(T=19, segments=(0, 6, 0, 1, 12)), base(B=2, T=9)],
    ids=["varlen", "packed-from-dense"],
)
def test_varlen_matches_separate_runs_fails_when_state_crosses_boundaries(
    spec: ProblemSpec,
) -> None:
    result = varlen_matches_separate_runs(spec, bug_kernel(ignores_cu_seqlens, name="bug/ignores"))
    assert not result.ok
    assert "bug/ignores packed and separate runs disagree on" in result.message, result.message


def test_varlen_matches_separate_runs_packs_dense_cases_and_skips_without_varlen() -> None:
    result = varlen_matches_separate_runs(base(B=1), TORCH_FORMS[0])
    assert result.ok, result.report()
    assert result.skipped is None
    no_varlen = bug_kernel(REFERENCE, name="no-varlen", varlen=False)
    assert varlen_matches_separate_runs(base(segments=(10, 11)), no_varlen).skipped is not None


def test_discrepancy_scores_against_the_sum_of_the_bounds() -> None:
    ones = torch.ones(4, dtype=torch.bool)
    a = Side("a", torch.tensor([1.0, 2.0, torch.inf, 5.0]), torch.full((4,), 0.5), ones)
    b = Side("b", torch.tensor([1.5, 0.0, 3.0, 5.0]), torch.full((4,), 0.5), ones)
    d = discrepancy("x", a, b, torch.tensor([1.0, 1.0, 3.0, 5.0], dtype=torch.float64))
    assert not d.ok
    assert d.nonfinite == 1
    assert d.index == (2,)
    a = replace(a, verifiable=torch.tensor([True, False, False, True]))
    d = discrepancy("x", a, b, torch.tensor([1.0, 1.0, 3.0, 5.0], dtype=torch.float64))
    assert d.ok
    assert d.max_ratio == pytest.approx(0.5)
    assert d.excluded == 2
