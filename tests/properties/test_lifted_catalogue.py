# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The whole catalogue on the lifted feature maps (taylor2, rebased, favor+; issue #17).

Every registered kernel of ours that applies lifted maps (the torch references and the Triton
kernels) is narrowed to them, so each drawn case has one, and every property of the catalogue
must not fail on it. The general tests draw lifted maps among all six; this one makes sure each
property meets them in CI. FLA's based and rebased kernels have their own tests
(tests/adapters/test_fla_lifted.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import get_kernel, registered_properties
from linattn_verify.running import check_property
from linattn_verify.typing import LIFTED_MAPS, OWN_FEATURE_MAPS

OWN_LIFTED = tuple(m for m in LIFTED_MAPS if m in OWN_FEATURE_MAPS)
"""The lifted maps our kernels apply (softmax over the features is for kernels declaring it)."""

KERNELS = ("torch/chunk", "triton/parallel", "triton/chunk")
"""The torch reference, our fused parallel form and our lift step (triton/recurrent and the other
torch forms share the lift and the features with these)."""

EXAMPLES = {"torch": 4, "triton": 2}
"""Cases per (kernel, property): the interpreter is slow."""


def lifted_only(name: str) -> Kernel:
    """The registered kernel with its feature maps narrowed to the lifted ones."""
    kernel = get_kernel(name)
    assert isinstance(kernel, Kernel)
    assert set(OWN_LIFTED) <= set(kernel.capabilities.feature_maps), name
    return replace(kernel, capabilities=replace(kernel.capabilities, feature_maps=OWN_LIFTED))


# compiled_matches_eager compares a kernel with its torch.compile'd self, whatever it computes:
# the general property tests run it on these kernels (lifted maps among their draws).
PROPERTIES = sorted(set(registered_properties()) - {"compiled_matches_eager"})


@pytest.mark.parametrize("prop", PROPERTIES)
@pytest.mark.parametrize("name", KERNELS)
def test_the_catalogue_holds_on_lifted_maps(name: str, prop: str) -> None:
    kernel = lifted_only(name)
    check = registered_properties()[prop]

    @settings(
        max_examples=EXAMPLES[name.split("/")[0]],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(spec=kernel_specs(kernel, max_seq_len=12, max_head_dim=4))
    def holds(spec: ProblemSpec) -> None:
        assert spec.feature_map in OWN_LIFTED
        result = check_property(check, spec, kernel)
        assert result.status != "failed", result.message()

    holds()
