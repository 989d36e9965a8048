# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Splitting the work: a state carried across a split, packed varlen runs; with meta tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import RARE_CASES, bug_kernel, example_spec
from linattn_properties.splitting import state_split_composes, varlen_matches_separate_runs

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels
from linattn_verify.running import check_property

REGISTERED = registered_kernels("linear_attn")

# Small enough for the Triton interpreter: these properties call a kernel three or more times.
SMALL: dict[str, Any] = {"max_seq_len": 24, "max_head_dim": 6}


base = example_spec


@given(data=st.data())
def test_state_split_composes(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, min_seq_len=2, **SMALL), label="spec")
    # The split is defined for dense cases (varlen has its own property): a varlen draw is run
    # as the dense single sequence of the same tokens.
    spec = replace(spec, segments=None)
    check_property(state_split_composes, spec, linattn_kernel)


@given(data=st.data())
def test_varlen_matches_separate_runs(linattn_kernel: Kernel, data: st.DataObject) -> None:
    spec = data.draw(kernel_specs(linattn_kernel, **SMALL), label="spec")
    check_property(varlen_matches_separate_runs, spec, linattn_kernel)


@pytest.mark.cases(RARE_CASES)
def test_splits_on_nasty_cases(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    # @example cannot be combined with st.data(), so the nasty cases run here explicitly.
    for prop in (state_split_composes, varlen_matches_separate_runs):
        check_property(prop, spec, linattn_kernel)


def test_state_split_at_every_position_of_a_chunk_boundary() -> None:
    # Splits just before, at and after the 16-token chunk boundary of triton/chunk.
    kernel = replace(REGISTERED["triton/chunk"], options={"chunk_size": 16})
    spec = base(T=33, normalize=True, feature_map="elu1", eps=1e-6)
    for split in (15, 16, 17, 32):
        result = state_split_composes(spec, kernel, split=split)
        assert result.status == "held", result.report()
        assert f"split at s={split}" in result.notes


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
    assert result.status == "failed"
    message = result.message()
    assert "split at s=9" in message
    assert "o[9:] is not close to the float64 oracle" in message, message
    assert "disagree on o!" in message
    failing = [c for c in result.comparisons if not c.ok]
    assert {c.tensor for c in failing} >= {"o[9:]", "o"}
    # Every failing element of the whole-sequence comparison lies after the split.
    pair = next(c for c in failing if c.kind == "pair" and c.tensor == "o")
    assert pair.worst is not None
    assert pair.worst.index[1] >= 9


def test_state_split_composes_does_not_apply_where_it_cannot_split() -> None:
    kernel = REGISTERED["torch/parallel"]
    assert state_split_composes(base(T=1), kernel).reason == "T < 2: nothing to split"
    assert state_split_composes(base(segments=(10, 11)), kernel).status == "not_applicable"
    no_state = bug_kernel(REFERENCE, name="no-state", initial_state=False)
    assert state_split_composes(base(initial_state=False), no_state).status == "not_applicable"
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
    assert result.status == "failed"
    message = result.message()
    assert "bug/ignores packed and separate runs disagree on" in message, message


def test_varlen_matches_separate_runs_packs_dense_cases_and_needs_varlen() -> None:
    result = varlen_matches_separate_runs(base(B=1), REGISTERED["torch/parallel"])
    assert result.status == "held", result.report()
    assert any("packed from the dense batch rows" in n for n in result.notes)
    no_varlen = bug_kernel(REFERENCE, name="no-varlen", varlen=False)
    result = varlen_matches_separate_runs(base(segments=(10, 11)), no_varlen)
    assert result.status == "not_applicable"
