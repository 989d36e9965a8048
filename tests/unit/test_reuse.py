# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Reusing a result for equal inputs in a scope (`linattn_verify.core.reuse`); the reach's use."""

from __future__ import annotations

import gc
import time
import weakref
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from linattn_properties.oracle import gradients_match_oracle, outputs_match_oracle

from linattn_verify.checking import CheckListener, SearchSettings, _reach
from linattn_verify.core.reuse import reused, reusing_results
from linattn_verify.linear_attn import tolerance
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.reach import RERUNS
from linattn_verify.registry import get_kernel
from linattn_verify.results import PropertyVerdict


class _Counted:
    """A computation that counts its calls and returns a fresh object each time."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[int]:
        self.calls += 1
        return [self.calls]


@dataclass(frozen=True)
class _A:
    x: torch.Tensor
    n: int


@dataclass(frozen=True)
class _B:
    x: torch.Tensor
    n: int


def test_nothing_is_kept_outside_a_scope() -> None:
    compute = _Counted()
    key = (torch.ones(3), 1)
    assert reused("f", key, compute) == [1]
    assert reused("f", key, compute) == [2]


def test_equal_inputs_give_the_same_result_within_a_scope() -> None:
    compute = _Counted()
    with reusing_results():
        first = reused("f", (_A(torch.arange(4.0), 2), "chunk"), compute)
        # Equal, not identical: another tensor with the same values.
        again = reused("f", (_A(torch.arange(4.0), 2), "chunk"), compute)
        assert again is first
        assert compute.calls == 1
        # Anything different is computed again: a value, a dtype, a field, a class, a name.
        for key in (
            (_A(torch.arange(4.0) + 1, 2), "chunk"),
            (_A(torch.arange(4.0, dtype=torch.float64), 2), "chunk"),
            (_A(torch.arange(4.0), 3), "chunk"),
            (_B(torch.arange(4.0), 3), "chunk"),
            (_B(torch.arange(4.0), 3), "recurrent"),
        ):
            calls = compute.calls
            reused("f", key, compute)
            assert compute.calls == calls + 1, key
    # The scope's end forgets everything.
    reused("f", (_B(torch.arange(4.0), 3), "recurrent"), compute)
    assert compute.calls == 7


def test_the_key_is_a_snapshot_and_nan_never_matches() -> None:
    compute = _Counted()
    x = torch.zeros(3)
    with reusing_results():
        reused("f", (x,), compute)
        x.add_(1)  # e.g. a kernel that writes into its inputs after the bounds were formed
        reused("f", (x,), compute)
        assert compute.calls == 2
        nan = torch.tensor([float("nan")])
        reused("f", (nan,), compute)
        reused("f", (nan,), compute)
        assert compute.calls == 4


def test_the_last_result_is_freed_before_the_next_is_computed() -> None:
    alive: list[bool] = []
    with reusing_results():
        first = reused("f", (1,), lambda: torch.zeros(1))
        ref = weakref.ref(first)
        del first

        def second() -> torch.Tensor:
            gc.collect()
            alive.append(ref() is not None)
            return torch.zeros(1)

        reused("f", (2,), second)
    assert alive == [False], "two results (hundreds of MB each at T = 65,536) never coexist"


def test_reused_forward_bounds_equal_fresh_ones() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 40, 2, 8, generator=gen) for _ in range(3))
    g = -torch.rand(1, 40, 2, generator=gen)
    recipe = PrecisionRecipe(form="chunk", chunk_size=16)
    fresh = tolerance.forward_bounds(validate_problem(q, k, v, g), recipe)
    with reusing_results():
        first = tolerance.forward_bounds(validate_problem(q, k, v, g), recipe)
        again = tolerance.forward_bounds(validate_problem(q.clone(), k, v, g), recipe)
        assert again is first
        other = tolerance.forward_bounds(validate_problem(q, k, v, g), recipe, causal_exact=False)
        assert other is not first
    for name, tb in fresh.tensors.items():
        assert torch.equal(tb.bound, first.tensors[name].bound)
        assert torch.equal(tb.reference, first.tensors[name].reference)


def test_the_reach_forms_each_case_s_forward_bounds_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    formed: list[tuple[int, int, int, int]] = []
    original = tolerance._forward_bounds

    def counting(problem, *args):  # type: ignore[no-untyped-def]
        formed.append((problem.q.shape[1], *problem.q.shape[2:], problem.v.shape[3]))
        return original(problem, *args)

    monkeypatch.setattr(tolerance, "_forward_bounds", counting)
    judged: list[tuple[str, tuple[int, int, int, int]]] = []

    def forward(spec, kernel):  # type: ignore[no-untyped-def]
        judged.append(("forward", (spec.T, spec.H, spec.K, spec.V)))
        return outputs_match_oracle(spec, kernel)

    def backward(spec, kernel):  # type: ignore[no-untyped-def]
        judged.append(("backward", (spec.T, spec.H, spec.K, spec.V)))
        return gradients_match_oracle(spec, kernel)

    properties = {"outputs_match_oracle": forward, "gradients_match_oracle": backward}
    # Chunks of 16 and heads up to 16: the whole plan is T = 16, 17 and 33 at K = V = 16, and
    # T = 17 with 16 heads.
    kernel = get_kernel("torch/chunk")
    cap = replace(kernel.capabilities, chunk_sizes=(16,), max_head_dim=16)
    kernel = replace(kernel, capabilities=cap)
    verdicts = {name: PropertyVerdict(kernel.name, name, "held") for name in properties}
    search = SearchSettings(budget=10.0, failures_dir=tmp_path, max_seq_len=65)
    _reach(kernel, properties, search, verdicts, CheckListener(), time.perf_counter(), 60.0)
    assert all(v.ok for v in verdicts.values())
    # Past the chunk size (T = 17 and 33, H = 2) the forward pass is judged four times per case,
    # elsewhere once; the backward pass once everywhere. A case is (T, H, K, V) as drawn (a
    # varlen case packs more tokens, a lifted map takes a smaller K).
    judgings = Counter(judged)
    cases = {case for _, case in judged}
    assert len(cases) == 4
    forward = sorted(judgings["forward", case] for case in cases)
    assert forward == [1, 1, 1 + RERUNS, 1 + RERUNS]
    assert all(judgings["backward", case] == 1 for case in cases)
    # One forward bound per case, however many items judged it.
    assert sorted(formed) == sorted({case for _, case in judged})
