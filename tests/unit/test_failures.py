# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Failure saving, loading and replay, and `check`: a wrong kernel's failure survives the trip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings

from linattn_verify.compare import check_against_oracle
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.failures import (
    ReplayMismatchWarning,
    load_failure,
    replay,
    save_failure,
)
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import FULL
from linattn_verify.results import PropertyResult
from linattn_verify.running import check_property as check

_correct = float32_reference("recurrent")


def _off_by_one(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """The float32 recurrent reference with 1 added to every output: wrong on any input."""
    o, state = _correct(*args, **kwargs)
    return o + 1, state


GOOD = Kernel("torch/recurrent", _correct, FULL, RECIPES["recurrent"], form="recurrent")
BAD = Kernel("torch/off_by_one", _off_by_one, FULL, RECIPES["recurrent"], form="recurrent")
KERNELS = {k.name: k for k in (GOOD, BAD)}


def fwd_matches_oracle(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """The forward output and final state lie within the bound of the float64 oracle."""
    problem = spec.build()
    o, state = kernel.call(problem)
    recipe = kernel.precision_recipe(problem.q.dtype)
    judged = check_against_oracle(problem, o, state, recipe=recipe, name=kernel.name)
    return replace(judged, property="fwd_matches_oracle", case=spec.describe())


PROPERTIES = {"fwd_matches_oracle": fwd_matches_oracle}

# Normal values, so that adding 1 to the output is far outside every bound; sliced and varlen, so
# the round trip has to carry the layout and the segments.
SPEC = ProblemSpec(1, 7, 2, 3, 5, "float32", "elu1", True, 1e-6, 0.5, "normal", "steep", True,
                   True, (2, 0, 5), 11, "sliced")  # fmt: skip


def _failing_path(tmp_path: Path) -> Path:
    with pytest.raises(PropertyViolation) as info:
        check(fwd_matches_oracle, SPEC, BAD, directory=tmp_path)
    path = tmp_path / "fwd_matches_oracle-torch_off_by_one.json"
    assert str(info.value).endswith(f"Replay: linattn-verify replay {path}")
    return path


def test_check_saves_a_failure_and_raises_with_the_replay_line(tmp_path: Path) -> None:
    path = _failing_path(tmp_path)
    assert path.is_file()
    assert path.with_suffix(".pt").is_file()
    document = json.loads(path.read_text())
    assert document["property"] == "fwd_matches_oracle"
    assert document["kernel"] == "torch/off_by_one"
    assert document["spec"]["layout"] == "sliced"
    assert document["spec"]["segments"] == [2, 0, 5]
    assert document["result"]["status"] == "failed"
    assert set(document["versions"]) >= {"python", "linattn-verify", "torch", "hypothesis"}
    assert document["versions"]["torch"] != "not installed"
    assert document["repro"] == SPEC.repro()


def test_check_returns_the_result_and_saves_nothing_when_the_property_holds(
    tmp_path: Path,
) -> None:
    result = check(fwd_matches_oracle, SPEC, GOOD, directory=tmp_path)
    assert result.ok
    assert result.kernel == "torch/recurrent"
    assert list(tmp_path.iterdir()) == []


def test_load_failure_round_trips_the_spec_and_inputs(tmp_path: Path) -> None:
    saved = load_failure(_failing_path(tmp_path).with_suffix(".pt"))
    assert saved.spec == SPEC
    assert (saved.property, saved.kernel) == ("fwd_matches_oracle", "torch/off_by_one")
    expected = SPEC.build()
    problem = saved.problem()
    for name, x in expected.inputs().items():
        assert torch.equal(saved.inputs[name], x), name
        assert torch.equal(problem.inputs()[name], x), name
    assert problem.cu_seqlens is not None
    assert problem.cu_seqlens.tolist() == [0, 2, 2, 7]
    assert saved.result.status == "failed"
    worst = saved.result.worst
    assert worst is not None
    assert worst.tensor == "o"
    assert worst.deciding > 2


def test_load_failure_round_trips_the_calling_style(tmp_path: Path) -> None:
    spec = replace(SPEC, scale=None, output_final_state=False, omit=("scale", "output_final_state"))
    with pytest.raises(PropertyViolation):
        check(fwd_matches_oracle, spec, BAD, directory=tmp_path)
    path = tmp_path / "fwd_matches_oracle-torch_off_by_one.json"
    saved = load_failure(path)
    assert saved.spec == spec
    assert saved.problem().omit == frozenset(spec.omit)
    # A failure saved before ``omit`` existed loads with every argument passed explicitly.
    document = json.loads(path.read_text())
    del document["spec"]["omit"]
    path.write_text(json.dumps(document))
    assert load_failure(path).spec == replace(spec, omit=())


def test_a_saved_failure_replays_to_the_same_failure(tmp_path: Path) -> None:
    path = _failing_path(tmp_path)
    saved = load_failure(path)
    result = replay(path, properties=PROPERTIES, kernels=KERNELS)
    assert not result.ok
    assert result.to_json() == saved.result.to_json()
    # The same case with the correct kernel holds: the failure belongs to the kernel.
    fixed = replay(path, properties=PROPERTIES, kernels={"torch/off_by_one": GOOD})
    assert fixed.ok


def test_replay_warns_and_says_so_when_the_generator_changed(tmp_path: Path) -> None:
    path = _failing_path(tmp_path)
    tensors = torch.load(path.with_suffix(".pt"), weights_only=True)
    tensors["q"] = tensors["q"] + 1
    torch.save(tensors, path.with_suffix(".pt"))
    with pytest.warns(ReplayMismatchWarning, match=r"differ from the saved ones in \['q'\]"):
        result = replay(path, properties=PROPERTIES, kernels=KERNELS)
    assert "did not run on the saved inputs" in result.message()


def test_replay_names_a_missing_property_or_kernel(tmp_path: Path) -> None:
    path = _failing_path(tmp_path)
    with pytest.raises(InvalidArgument, match="'fwd_matches_oracle'"):
        replay(path, properties={}, kernels=KERNELS)
    with pytest.raises(InvalidArgument, match="'torch/off_by_one'"):
        replay(path, properties=PROPERTIES, kernels={})


def test_load_failure_rejects_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_failure(tmp_path / "nothing.json")
    (tmp_path / "other.json").write_text('{"format": 99}')
    (tmp_path / "other.pt").write_bytes(b"")
    with pytest.raises(InvalidArgument, match="format 99"):
        load_failure(tmp_path / "other.json")


def test_save_failure_sanitizes_names(tmp_path: Path) -> None:
    result = PropertyResult("a/b c", "x", "case", "failed", reason="m")
    path = save_failure(result, SPEC, "lib/kernel[1]", tmp_path)
    assert path == tmp_path / "a_b_c-lib_kernel_1.json"
    assert load_failure(path).kernel == "lib/kernel[1]"


@pytest.mark.parametrize(
    ("kwargs", "quoted"),
    [
        ({"result": "failed"}, "result='failed'"),
        ({"spec": None}, "spec=None"),
        ({"kernel_name": ""}, "kernel_name=''"),
        ({"directory": 3}, "directory=3"),
    ],
)
def test_save_failure_validates_its_arguments(
    tmp_path: Path, kwargs: dict[str, Any], quoted: str
) -> None:
    args: dict[str, Any] = {
        "result": PropertyResult("p", "k", "case", "failed"),
        "spec": SPEC,
        "kernel_name": "k",
        "directory": tmp_path,
        **kwargs,
    }
    with pytest.raises(InvalidArgument) as info:
        save_failure(**args)
    assert quoted in str(info.value)


def test_check_rejects_a_property_that_returns_no_result(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="returned bool"):
        check(lambda spec, kernel: True, SPEC, GOOD, directory=tmp_path)  # type: ignore[arg-type,return-value]


def test_check_inside_hypothesis_leaves_the_minimal_example_on_disk(tmp_path: Path) -> None:
    @settings(database=None)
    @given(spec=kernel_specs(BAD, max_seq_len=16, values=("normal",)))
    def inner(spec: ProblemSpec) -> None:
        # Twice in one example: the second target() with the same label must not break it.
        check(fwd_matches_oracle, replace(spec, layout="contiguous"), GOOD, directory=tmp_path)
        check(fwd_matches_oracle, replace(spec, layout="contiguous"), GOOD, directory=tmp_path)
        check(fwd_matches_oracle, spec, BAD, directory=tmp_path)

    with pytest.raises(PropertyViolation) as info:
        inner()
    saved = load_failure(tmp_path / "fwd_matches_oracle-torch_off_by_one.json")
    # The example Hypothesis reports (the shrunk one, run last) is the one on disk.
    assert repr(saved.spec) in str(info.value)
    assert saved.spec.T == 1
