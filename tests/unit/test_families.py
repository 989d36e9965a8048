# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn_verify.core.family`: families come from entry points; everything finds its family."""

from __future__ import annotations

import pytest

from linattn_verify.core.family import (
    Family,
    FamilyCase,
    FamilyKernel,
    families,
    family_named,
    family_of,
    is_case,
    register_family,
)
from linattn_verify.delta.reference_kernels import delta_reference_kernels
from linattn_verify.delta.strategies import DeltaCase
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import registered_kernels

DELTA_CASE = DeltaCase(
    B=1, T=3, H=1, K=2, V=2, dtype="float32", gate="none", gate_family="none",
    beta_family="sigmoid", key_family="unit", value_family="unit", l2norm_qk=False,
    negative_eigenvalues=False, initial_state=False, output_final_state=True, seq_lens=None,
    scale=None, seed=0,
)  # fmt: skip
SPEC = ProblemSpec(1, 4, 1, 2, 3, "float32", "identity", False, 0.0, None, "normal", "none",
                   False, False, None, 0)  # fmt: skip


def test_kernels_cases_and_problems_name_their_family() -> None:
    assert family_of(registered_kernels()["torch/chunk"]).name == "linear_attn"
    assert family_of(delta_reference_kernels()[0]).name == "delta"
    assert family_of(SPEC).name == family_of(SPEC.build()).name == "linear_attn"
    assert family_of(DELTA_CASE).name == family_of(DELTA_CASE.build()).name == "delta"


def test_registry_filters_by_family() -> None:
    delta = registered_kernels("delta")
    assert set(delta) == {
        "torch/delta.recurrent",
        "torch/delta.chunk",
        "triton/delta.recurrent",
        "triton/delta.chunk",
    }
    assert not set(delta) & set(registered_kernels("linear_attn"))


def test_only_cases_of_a_family_are_cases() -> None:
    assert is_case(SPEC)
    assert is_case(DELTA_CASE)
    assert not is_case(SPEC.build())
    assert not is_case("ProblemSpec(...)")


@pytest.mark.parametrize("name", ["nope", None, ["delta"]])
def test_an_unknown_family_names_the_families(name: object) -> None:
    with pytest.raises(InvalidArgument, match="the families are"):
        family_named(name)


def test_each_family_has_its_catalogue() -> None:
    for family in families().values():
        assert "outputs_match_oracle" in family.properties()


def test_the_shipped_families_are_installed_entry_points() -> None:
    from importlib import metadata

    named = {e.name for e in metadata.entry_points(group="linattn_verify.families")}
    assert {"linear_attn", "delta"} <= named
    assert all(isinstance(f, Family) for f in families().values())


def test_kernels_and_cases_of_every_family_have_what_shared_code_reads() -> None:
    for kernel in (registered_kernels()["torch/chunk"], delta_reference_kernels()[0]):
        assert isinstance(kernel, FamilyKernel)
    for case in (SPEC, DELTA_CASE):
        assert isinstance(case, FamilyCase)


def test_a_family_is_registered_once_by_name() -> None:
    with pytest.raises(InvalidArgument, match="a family of that name exists"):
        register_family(family_named("delta"))
    with pytest.raises(InvalidArgument, match=r"Expected a linattn_verify\.core\.Family"):
        register_family("delta")  # type: ignore[arg-type]
