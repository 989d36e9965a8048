# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One kernel source for every family (`linattn_verify.core.source.TargetSource`): JSON and load."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from linattn_verify.delta.kernel import DeltaCapabilities, DeltaRecipe
from linattn_verify.delta.targets import DeltaKernelSource
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.targets import KernelSource

LINEAR = KernelSource(
    target="linattn_verify.linear_attn.oracles.chunk:chunk_reference",
    capabilities=Capabilities(normalize=(True,), zero_denominator="ieee"),
    recipe=PrecisionRecipe(form="chunk", chunk_size=32),
    form="chunk",
    timeout=5.0,
    inferred=("cu_seqlens: taken",),
)
DELTA = DeltaKernelSource(
    target="linattn_verify.delta.reference:delta_recurrent",
    capabilities=DeltaCapabilities(gates=("none", "scalar")),
    recipe=DeltaRecipe(form="recurrent"),
    device="cuda:1",
)


@pytest.mark.parametrize("source", [LINEAR, DELTA], ids=["linear_attn", "delta"])
def test_a_source_survives_json_with_its_family_and_device(source: KernelSource) -> None:
    document = json.loads(json.dumps(source.to_json()))
    assert document["family"] == source.family
    assert document["device"] == source.device
    assert type(source).from_json(document) == source


def test_a_document_saved_before_sources_had_a_device_or_family_computes_on_the_cpu() -> None:
    document = LINEAR.to_json()
    del document["device"], document["family"]
    assert KernelSource.from_json(document) == LINEAR


def test_a_malformed_document_is_refused_naming_the_family() -> None:
    with pytest.raises(InvalidArgument, match="delta kernel source"):
        DeltaKernelSource.from_json({"target": "m:f"})


def test_a_cpu_source_loads_its_kernel_unplaced_with_its_declaration() -> None:
    kernel = replace(DELTA, device="cpu").load()
    assert kernel.name == DELTA.target
    assert kernel.capabilities == DELTA.capabilities
    assert kernel.source == replace(DELTA, device="cpu").resolved().to_json()
