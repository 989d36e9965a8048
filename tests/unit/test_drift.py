# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn_verify.drift`: correct kernels stay within their O(T) bound at every T (scalar and
vector gates), a planted bf16 state is flagged, the budget stops the run, settings are checked.

That the O(T) bound equals the dense one is `test_bound_scan`'s."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from linattn_verify.core.family import family_of
from linattn_verify.delta.reference_kernels import with_state_dtype as delta_with_state_dtype
from linattn_verify.drift import (
    DriftPoint,
    DriftSettings,
    TensorDrift,
    cast_inputs,
    drift_variants,
    growth_exponent,
    measure_drift,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.reference_kernels import with_state_dtype
from linattn_verify.registry import get_kernel
from linattn_verify.results import FAIL_THRESHOLD

SMALL = {"max_T": 256, "heads": 1, "head_dim": 16, "value_dim": 16}


def _drift(name: str, **settings: object) -> list[DriftPoint]:
    merged = {**SMALL, **settings}
    return measure_drift(get_kernel(name), DriftSettings(**merged)).points  # type: ignore[arg-type]


def _series(points: list[DriftPoint], dtype: str, state: str, tensor: str) -> list[TensorDrift]:
    return [p.tensors[tensor] for p in points if (p.dtype, p.state_dtype) == (dtype, state)]


@pytest.mark.parametrize("name", ["torch/chunk", "torch/delta.chunk", "torch/recurrent"])
def test_reference_kernels_stay_within_their_bound_as_T_grows(name: str) -> None:
    states = ("float32",) if name == "torch/recurrent" else ("float32", "bfloat16")
    points = _drift(name, dtypes=("float32", "bfloat16"), state_dtypes=states)
    assert {p.T for p in points} == {64, 128, 256}
    assert len(points) == 3 * 2 * len(states)
    for p in points:
        # Correct kernels: r <= 1 is the model's promise, r <= 2 the pass line.
        assert not p.failed, (p.dtype, p.state_dtype, p.T, p.tensors)
        assert p.max_r <= 1.0
    # The points share their input prefix: rows up to T are the same at 2T, so neither the
    # largest error of o nor its largest bound can shrink, and with more tokens both grow.
    o = _series(points, "float32", "float32", "o")
    for a, b in itertools.pairwise(o):
        assert b.max_err >= a.max_err
        assert b.max_bound >= a.max_bound
    assert o[-1].max_err > o[0].max_err
    assert o[-1].max_bound > o[0].max_bound


def test_a_vector_gate_is_drifted_within_its_bound() -> None:
    # GLA's gate, one decay per key dimension: its bound is the block scan's too.
    points = _drift("torch/chunk", gate="vector", max_T=256)
    assert {p.T for p in points} == {64, 128, 256}
    assert all(not p.failed and p.max_r <= 1.0 for p in points), [p.tensors for p in points]


@pytest.mark.parametrize("name", ["torch/chunk", "torch/delta.chunk"])
def test_a_declared_16_bit_state_is_charged_and_covered(name: str) -> None:
    points = _drift(name, max_T=128, state_dtypes=("float32", "bfloat16"))
    fp32, bf16 = (
        _series(points, "float32", "float32", "o"),
        _series(points, "float32", "bfloat16", "o"),
    )
    for a, b in zip(fp32, bf16, strict=True):
        # A bf16 read of the state costs ~2^-8 relative: far more error, and a bound to match.
        assert b.max_err > 100 * a.max_err
        # The declared recipe charges it (whether the fp32 recipe would not cover it is
        # test_an_undeclared_bf16_state_is_flagged's question).
        assert b.max_bound > 10 * a.max_bound
        assert b.max_r <= 1.0


@pytest.mark.parametrize("name", ["torch/chunk", "torch/delta.chunk"])
def test_an_undeclared_bf16_state_is_flagged(name: str) -> None:
    kernel = get_kernel(name)
    # The bf16 state without the recipe saying so: what a kernel storing h in bf16 while
    # declaring fp32 does.
    planted = kernel.with_options(f"{name}[undeclared bf16 state]", state_dtype="bfloat16")
    assert planted.precision_recipe(torch.float32) == kernel.precision_recipe(torch.float32)
    result = measure_drift(planted, DriftSettings(**{**SMALL, "max_T": 256}))  # type: ignore[arg-type]
    assert any(p.failed for p in result.points)
    assert max(p.tensors["o"].max_r for p in result.points) > FAIL_THRESHOLD


def test_the_budget_stops_before_a_level_it_cannot_afford() -> None:
    settings = DriftSettings(**{**SMALL, "max_T": 4096, "budget": 1e-3})  # type: ignore[arg-type]
    result = measure_drift(get_kernel("torch/chunk"), settings)
    # The first level has no cost to predict from; the second is predicted past the budget.
    assert result.stopped == "budget"
    assert [p.T for p in result.points] == [64]
    assert result.reached_T == 64
    assert "stopped before T=128" in result.reason


def test_max_T_reached_is_reported() -> None:
    result = measure_drift(get_kernel("torch/chunk"), DriftSettings(**{**SMALL, "max_T": 128}))  # type: ignore[arg-type]
    assert result.stopped == "max_T"
    assert result.reached_T == 128
    assert "max_T=128" in result.reason


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"max_T": 100}, "max_T"),
        ({"start_T": 0}, "start_T"),
        ({"start_T": 256, "max_T": 128}, "max_T"),
        ({"budget": 0.0}, "budget"),
        ({"dtypes": ("float8",)}, "dtypes"),
        ({"state_dtypes": ()}, "state_dtypes"),
        ({"gate": "diagonal"}, "gate"),
        ({"heads": 0}, "heads"),
    ],
)
def test_settings_name_the_bad_argument(changes: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        DriftSettings(**changes)  # type: ignore[arg-type]


def test_state_dtypes_need_a_kernel_with_the_option() -> None:
    settings = DriftSettings(state_dtypes=("float32", "bfloat16"))
    with pytest.raises(InvalidArgument, match="state_dtype"):
        drift_variants(get_kernel("torch/recurrent"), settings)
    with pytest.raises(InvalidArgument, match="state_dtype"):
        with_state_dtype(get_kernel("torch/parallel"), "bfloat16")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="state_dtype"):
        delta_with_state_dtype(get_kernel("torch/delta.recurrent"), "bfloat16")  # type: ignore[arg-type]


def test_state_dtype_kernels_declare_what_they_do() -> None:
    linear = with_state_dtype(get_kernel("torch/chunk"), "bfloat16")  # type: ignore[arg-type]
    recipe = linear.precision_recipe(torch.float32)
    assert (recipe.intermediate_dtype, recipe.casts_on_path) == ("bfloat16", 1)
    assert linear.name == "torch/chunk[state=bfloat16]"
    delta = delta_with_state_dtype(get_kernel("torch/delta.chunk"), "float16")  # type: ignore[arg-type]
    assert delta.precision_recipe(torch.float32).state_dtype == "float16"
    # The registered kernels are unchanged: no option, fp32 state.
    assert get_kernel("torch/chunk").precision_recipe(torch.float32).casts_on_path == 0
    assert get_kernel("torch/delta.chunk").precision_recipe(torch.float32).state_dtype is None


def test_points_are_prefixes_of_one_draw() -> None:
    settings = DriftSettings(**SMALL)  # type: ignore[arg-type]
    kernel = get_kernel("torch/delta.chunk")
    inputs = family_of(kernel).drift_driver(kernel, settings).inputs(settings)
    short, long = cast_inputs(inputs, 64, "bfloat16"), cast_inputs(inputs, 128, "bfloat16")
    for name, x in short.items():
        assert torch.equal(x, long[name][:, :64])
    # Unit keys and beta in (0, 1): inside the delta kernels' contract.
    norms = inputs["k"].pow(2).sum(-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    assert bool((inputs["beta"] > 0).all() and (inputs["beta"] < 1).all())


def test_growth_exponent_is_the_log_log_slope() -> None:
    def point(T: int, err: float) -> DriftPoint:
        t = TensorDrift(err, 1.0, 1.0, 0.1, err, 1.0, err, True)
        return DriftPoint("float32", "float32", T, {"o": t}, 0.0, 0.0)

    points = [point(T, 1e-6 * math.sqrt(T)) for T in (64, 128, 256, 512)]
    slope = growth_exponent(points, "o")
    assert slope is not None
    assert slope == pytest.approx(0.5)
    assert growth_exponent(points[:1], "o") is None


def test_the_next_level_is_predicted_from_the_growth_of_the_last() -> None:
    from linattn_verify.drift import _predicted

    assert _predicted([], 2) == [0.0, 0.0]
    # One level: at least doubled (the computation is at least linear in T).
    assert _predicted([[1.0, 2.0]], 2) == [2.0, 4.0]
    # Two: the measured growth (a quadratic kernel: 4), never below 2, at most 8.
    assert _predicted([[1.0, 1.0, 1.0], [4.0, 1.0, 20.0]], 3) == [16.0, 2.0, 160.0]
