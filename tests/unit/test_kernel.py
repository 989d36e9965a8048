# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`Kernel.call`: the calling convention as the harness speaks it, in both calling styles."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import OMITTABLE
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import FULL

# K = 2, V = 3, no decay, no states, dense, unnormalized, identity, default scale: every
# argument is at its default.
SPEC = ProblemSpec(1, 4, 1, 2, 3, "float32", "identity", False, 0.0, None, "normal", "none",
                   False, False, None, 0)  # fmt: skip


def _recorder(capabilities: Capabilities) -> tuple[Kernel, list[tuple[int, dict[str, Any]]]]:
    """A kernel that records (number of positional arguments, keywords) of every call."""
    calls: list[tuple[int, dict[str, Any]]] = []

    def record(*args: Any, **kwargs: Any) -> tuple[None, None]:
        calls.append((len(args), kwargs))
        return None, None

    return Kernel("test/record", record, capabilities, PrecisionRecipe(form="chunk")), calls


def test_explicit_style_passes_every_declared_argument() -> None:
    kernel, calls = _recorder(FULL)
    kernel.call(SPEC.build())
    # q, k, v and g=None positionally, then every keyword at its default value.
    assert calls == [
        (
            4,
            {
                "scale": 2**-0.5,
                "initial_state": None,
                "output_final_state": False,
                "cu_seqlens": None,
                "normalize": False,
                "eps": 0.0,
                "feature_map": "identity",
            },
        )
    ]


def test_a_kernel_is_passed_only_what_it_declares() -> None:
    narrow = Capabilities(initial_state=False, final_state=False)
    kernel, calls = _recorder(narrow)
    kernel.call(SPEC.build())
    assert calls == [(3, {"scale": 2**-0.5, "output_final_state": False})]


def test_omitted_defaults_are_left_out() -> None:
    kernel, calls = _recorder(FULL)
    kernel.call(replace(SPEC, omit=OMITTABLE).build())
    assert calls == [(3, {})]
    kernel.call(replace(SPEC, omit=("scale", "cu_seqlens")).build())
    assert calls[-1] == (
        4,
        {
            "initial_state": None,
            "output_final_state": False,
            "normalize": False,
            "eps": 0.0,
            "feature_map": "identity",
        },
    )


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("scale", {"scale": 0.25}),
        ("output_final_state", {"output_final_state": True}),
        ("normalize", {"normalize": True}),
        ("feature_map", {"feature_map": "elu1"}),
    ],
)
def test_an_omitted_argument_away_from_its_default_is_passed(
    name: str, changes: dict[str, Any]
) -> None:
    # A property may change a value of the case (the scale, the final state): the call then
    # passes it, whatever the calling style.
    kernel, calls = _recorder(FULL)
    problem = replace(SPEC.build(), omit=frozenset(OMITTABLE), **changes)
    assert name not in problem.at_default()
    kernel.call(problem)
    assert calls[-1][1] == changes


def test_describe_names_the_arguments_left_out() -> None:
    assert "called without" not in SPEC.build().describe()
    problem = replace(SPEC, omit=("scale", "output_final_state")).build()
    assert problem.describe().endswith("called without scale,output_final_state")
    # An omission that does not apply (the value is not the default) is not listed.
    assert "called without" not in replace(problem, scale=0.25, output_final_state=True).describe()


def test_a_kernel_limited_to_some_scales_is_drawn_and_judged_on_those_only() -> None:
    import torch
    from hypothesis import given, settings

    from linattn_verify.errors import InvalidArgument
    from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference
    from linattn_verify.linear_attn.semantics import validate_problem
    from linattn_verify.linear_attn.strategies import kernel_specs

    with pytest.raises(InvalidArgument, match="scales"):
        Capabilities(scales=("half",))
    cap = Capabilities(scales=("default", "one"))
    kernel = Kernel("limited", float32_reference("parallel"), cap, recipe=RECIPES["parallel"])
    q = torch.randn(1, 2, 1, 4)
    for scale, ok in ((None, True), (0.5, True), (1.0, True), (0.25, False)):
        problem = validate_problem(q, q, q, scale=scale)
        assert (kernel.supports(problem) is None) == ok, scale

    @settings(max_examples=30, deadline=None)
    @given(spec=kernel_specs(kernel, max_seq_len=4, max_head_dim=4))
    def drawn(spec: ProblemSpec) -> None:
        assert spec.scale in (None, spec.K**-0.5, 1.0)

    drawn()
