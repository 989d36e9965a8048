# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Compile invariance over every registered kernel, and a kernel that changes when traced."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import torch
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.compilation import compiled_matches_eager

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.running import check_property

base = partial(example_spec, B=2, T=11, K=3, V=5, scale=0.3, seed=5)

# A dynamo trace costs 1-3 s per case on a CPU: a few explicit cases instead of a search (the
# zoo's compile row searches; `linattn-verify check` searches it last in every round).
NASTY = {
    "decay-initial-state-fp32": base(decay="steep", initial_state=True),
    "normalized-varlen-bf16": base(
        B=1, dtype="bfloat16", normalize=True, eps=1e-2, feature_map="elu1", segments=(4, 0, 7)
    ),
}


@pytest.mark.cases(NASTY)
def test_compiled_matches_eager(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    result = check_property(compiled_matches_eager, spec, linattn_kernel)
    assert result.status == "held", result.report()
    assert "o" in {c.tensor for c in result.comparisons}
    assert all(c.kind == "bitwise" and c.deciding == 0 for c in result.comparisons)


_chunk = float32_reference("chunk")


def drops_scale_when_traced(q: Any, k: Any, v: Any, g: Any = None, **kwargs: Any) -> Any:
    # A "fused" traced path that forgets the caller's scale (fla #52).
    if torch.compiler.is_compiling():
        kwargs["scale"] = 1.0
    return _chunk(q, k, v, g, **kwargs)


def test_a_kernel_that_changes_under_compile_fails() -> None:
    kernel = bug_kernel(drops_scale_when_traced, form="chunk")
    result = compiled_matches_eager(NASTY["decay-initial-state-fp32"], kernel)
    assert result.status == "failed"
    by_tensor = {c.tensor: c for c in result.comparisons}
    assert set(by_tensor) == {"o", "final_state"}
    o = by_tensor["o"]
    assert not o.ok
    assert o.reference == "bitwise:under torch.compile"
    assert o.counts.mismatched > 0
    assert o.worst is not None
    assert "bug/drops_scale_when_traced o is not bit-identical under torch.compile!" in (
        result.message()
    )


def test_a_kernel_that_breaks_the_contract_when_traced_fails_naming_the_compiled_run() -> None:
    def widens_when_traced(q: Any, k: Any, v: Any, g: Any = None, **kwargs: Any) -> Any:
        o, final = _chunk(q, k, v, g, **kwargs)
        return (o.double() if torch.compiler.is_compiling() else o), final

    kernel = bug_kernel(widens_when_traced, form="chunk")
    result = compiled_matches_eager(NASTY["decay-initial-state-fp32"], kernel)
    assert result.status == "failed"
    assert result.comparisons == ()
    assert result.reason == (
        "bug/widens_when_traced under torch.compile returned o of dtype torch.float64, "
        "expected the input dtype torch.float32"
    )
