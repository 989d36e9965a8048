# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Cost of the oracles (docs/error-model.md §6.1): float64, double-double and mpmath.

Not part of the test suite. Run with ``python benchmarks/results.py`` or

    pytest benchmarks/test_oracle_cost.py --benchmark-only

(add ``-k "not mpmath-1024"`` to skip the minutes-long mpmath case). Problems: B = H = 1,
K = V = D, elu1, normalized (eps = 1e-6), fp32 inputs, with and without decay. torch runs on one
thread (``conftest.one_thread``) so the ratios compare single-core implementations.
"""

from __future__ import annotations

import pytest
import torch
from pytest_benchmark.fixture import BenchmarkFixture

from linattn_verify.linear_attn.oracles.double_double import double_double_oracle
from linattn_verify.linear_attn.oracles.mpmath_oracle import mpmath_oracle
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.semantics import Problem, validate_problem

SHAPES = [(256, 32), (1024, 64)]


def describe(benchmark: BenchmarkFixture, oracle: str, T: int, D: int, decay: bool) -> None:
    benchmark.group = f"T={T} D={D} {'decay' if decay else 'no decay'}"
    benchmark.extra_info.update(suite="oracle", oracle=oracle, T=T, D=D, decay=decay)


def make_problem(T: int, D: int, decay: bool) -> Problem:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 1, D, generator=gen) for _ in range(3))
    g = -torch.rand(1, T, 1, generator=gen) * 0.1 if decay else None
    return validate_problem(
        q, k, v, g, normalize=True, eps=1e-6, feature_map="elu1", output_final_state=True
    )


@pytest.mark.parametrize("decay", [False, True], ids=["nodecay", "decay"])
@pytest.mark.parametrize(("T", "D"), SHAPES, ids=[f"{T}x{D}" for T, D in SHAPES])
def test_float64(benchmark: BenchmarkFixture, T: int, D: int, decay: bool) -> None:
    problem = make_problem(T, D, decay).to(torch.float64)
    describe(benchmark, "float64", T, D, decay)
    o, _ = benchmark(parallel_reference, problem)
    assert o.shape == (1, T, 1, D)


@pytest.mark.parametrize("decay", [False, True], ids=["nodecay", "decay"])
@pytest.mark.parametrize(("T", "D"), SHAPES, ids=[f"{T}x{D}" for T, D in SHAPES])
def test_double_double(benchmark: BenchmarkFixture, T: int, D: int, decay: bool) -> None:
    problem = make_problem(T, D, decay)
    describe(benchmark, "double-double", T, D, decay)
    o, _ = benchmark.pedantic(  # type: ignore[no-untyped-call]
        double_double_oracle, args=(problem,), rounds=5, iterations=1, warmup_rounds=1
    )
    assert o.shape == (1, T, 1, D)


@pytest.mark.parametrize("decay", [False, True], ids=["nodecay", "decay"])
@pytest.mark.parametrize(("T", "D"), SHAPES, ids=[f"mpmath-{T}x{D}" for T, D in SHAPES])
def test_mpmath(benchmark: BenchmarkFixture, T: int, D: int, decay: bool) -> None:
    problem = make_problem(T, D, decay)
    describe(benchmark, "mpmath", T, D, decay)
    # One round: seconds at 256x32, minutes at 1024x64.
    o, _ = benchmark.pedantic(  # type: ignore[no-untyped-call]
        mpmath_oracle, args=(problem,), rounds=1, iterations=1
    )
    assert o.shape == (1, T, 1, D)
