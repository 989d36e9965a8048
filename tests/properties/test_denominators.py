# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Denominator stability over every registered kernel, with families that stress it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, note, target
from hypothesis import strategies as st
from linattn_properties._testing import assert_holds, bug_kernel, example_spec, narrowed
from linattn_properties.denominators import denominator_stable

from linattn_verify.errors import PropertyViolation
from linattn_verify.kernel import Kernel
from linattn_verify.reference_kernels import float32_reference
from linattn_verify.registry import registered_kernels
from linattn_verify.strategies import ProblemSpec, kernel_specs

KERNELS = list(registered_kernels().values())

SMALL = {"max_seq_len": 20, "max_head_dim": 5}
STRESS = ("underflowing_features", "tiny", "zero_rows", "large", "normal")


base = partial(
    example_spec,
    T=18,
    feature_map="elu1",
    normalize=True,
    values="underflowing_features",
    decay="none",
    initial_state=False,
    output_final_state=False,
    seed=9,
)


NASTY = {
    # elu1(q ~ -100) underflows in fp32: the kernel's Z is exactly 0 with eps = 0 (0/0 -> 0).
    "underflow-eps0": base(),
    "underflow-eps0-bf16-decay": base(dtype="bfloat16", decay="steep"),
    # relu of values near -100: every feature is 0, the exact 0/0 row.
    "all-zero-features": base(feature_map="relu"),
    "tiny-relu-fp16": base(feature_map="relu", values="tiny", dtype="float16"),
    # identity features: Z cancels, rows are unverifiable and judged by the residual only.
    "identity-cancelling": base(feature_map="identity", values="normal", eps=1e-6, T=20),
    "eps-dominated": base(values="underflowing_features", eps=1e-2, initial_state=True),
}


@given(data=st.data())
def test_denominator_stable(kernel: Kernel, data: st.DataObject) -> None:
    if True not in kernel.capabilities.normalize:
        pytest.skip(f"{kernel.name} has no normalized output")
    steer = narrowed(kernel, normalize=(True,))
    spec = data.draw(kernel_specs(steer, values=STRESS, **SMALL), label="spec")
    if kernel.capabilities.configurable and data.draw(st.booleans(), label="eps=0"):
        # eps = 0 is where 0/0 and underflow bite; draw it often.
        spec = replace(spec, eps=0.0)
    result = denominator_stable(spec, kernel)
    note(result.report())
    assert result.skipped is None, result.report()
    target(max(result.scores["max_r"], result.scores["max_eta"]), label="max r, η")
    result.raise_for_failure()


@pytest.mark.cases(NASTY)
def test_denominator_stable_on_nasty_cases(kernel: Kernel, spec: ProblemSpec) -> None:
    result = denominator_stable(spec, kernel)
    assert_holds(result)


def test_scores_report_zero_rows_and_unverifiable_rows() -> None:
    kernel = KERNELS[-1]
    zero = denominator_stable(NASTY["all-zero-features"], kernel)
    assert zero.scores["zero_rows"] == 18 * 2
    under = denominator_stable(NASTY["underflow-eps0"], kernel)
    assert under.scores["unverifiable_rows"] == 18 * 2
    dominated = denominator_stable(NASTY["eps-dominated"], kernel)
    assert dominated.scores["max_eps_influence"] > 0.5


# Meta tests: a missing 0/0 guard and a misplaced eps must fail.

REFERENCE = float32_reference("recurrent")


def _parts(q: Any, k: Any, v: Any, g: Any, kw: dict[str, Any]) -> tuple[Any, Any]:
    kw = {**kw, "normalize": False, "output_final_state": False, "initial_state": None}
    kw.pop("eps")
    N, _ = REFERENCE(q, k, v, g, **kw)
    Z, _ = REFERENCE(q, k, torch.ones_like(v[..., :1]), g, **kw)
    return N.float(), Z.float()


def no_zero_guard(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    N, Z = _parts(q, k, v, g, kw)
    return (N / (Z + kw["eps"])).to(q.dtype), None


def eps_squared(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # eps added twice (once in the kernel, once by a wrapper that thinks it is missing).
    N, Z = _parts(q, k, v, g, kw)
    den = Z + 2 * kw["eps"]
    return torch.where(den == 0, 0.0, N / den).to(q.dtype), None


@pytest.mark.parametrize(
    ("fn", "spec", "expected"),
    [
        (no_zero_guard, NASTY["all-zero-features"], "o holds 108 NaN value(s) of 108"),
        (no_zero_guard, NASTY["underflow-eps0"], "NaN"),
        (eps_squared, base(values="normal", eps=1e-2), "is not close to the float64 oracle"),
    ],
    ids=["zero-row", "underflow", "eps-twice"],
)
def test_denominator_stable_fails_for_wrong_denominators(
    fn: Any, spec: ProblemSpec, expected: str
) -> None:
    result = denominator_stable(spec, bug_kernel(fn, initial_state=False, final_state=False))
    assert not result.ok
    assert expected in result.message, result.message
    with pytest.raises(PropertyViolation, match="denominator_stable FAILED"):
        result.raise_for_failure()


def test_denominator_stable_passes_the_correct_twin() -> None:
    twin = replace(bug_kernel(REFERENCE, initial_state=False, final_state=False), name="twin")
    for spec in NASTY.values():
        if not spec.initial_state:
            assert denominator_stable(spec, twin).ok
