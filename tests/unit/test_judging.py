# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The judging device: which device the oracles and bounds run on, and moving their results.

The CPU has one device, so the moves are checked against PyTorch's ``meta`` device (shapes and
dtypes without values); `tests/gpu/test_bounds_on_device.py` judges on CUDA for real.
"""

from __future__ import annotations

import pytest
import torch
from linattn_properties._testing import example_spec

from linattn_verify.core.judging import (
    ENVIRONMENT,
    bound_on,
    judging_device,
    judging_on,
    problem_on,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.tolerance import forward_bounds

CPU = torch.device("cpu")
META = torch.device("meta")


def test_the_context_wins_over_the_environment_which_wins_over_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert judging_device(CPU) == CPU
    monkeypatch.setenv(ENVIRONMENT, "meta")
    assert judging_device(CPU) == META
    with judging_on("cpu") as device:
        assert device == CPU
        assert judging_device(META) == CPU
    assert judging_device(CPU) == META


def test_a_device_that_is_none_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidArgument, match="device='gpu-0'"), judging_on("gpu-0"):
        pass
    monkeypatch.setenv(ENVIRONMENT, "nowhere")
    with pytest.raises(InvalidArgument, match=f"{ENVIRONMENT}='nowhere'"):
        judging_device(CPU)


def test_a_problem_moves_with_its_dtypes_and_keeps_its_sequence_bounds_on_the_cpu() -> None:
    spec = example_spec(dtype="bfloat16", initial_state=True, segments=(5, 16), B=1)
    problem = spec.build()
    moved = problem_on(problem, META)
    for name, tensor in problem.inputs().items():
        twin = moved.inputs()[name]
        assert twin.device == META, name
        assert twin.dtype == tensor.dtype, name
    assert moved.cu_seqlens is not None
    assert moved.cu_seqlens.device == CPU


def test_a_bound_moves_with_its_residual() -> None:
    problem = example_spec(normalize=True, feature_map="elu1", eps=1e-6).build()
    bound = forward_bounds(problem, PrecisionRecipe(form="chunk")).tensors["o"]
    moved = bound_on(bound, META)
    assert moved.residual is not None
    assert bound.residual is not None
    for holder in (moved, moved.residual):
        for name, value in vars(holder).items():
            if isinstance(value, torch.Tensor):
                assert value.device == META, name
    assert moved.unit == bound.unit
    assert moved.name == bound.name
