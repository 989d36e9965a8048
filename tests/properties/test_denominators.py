# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Denominator stability over every registered kernel, with families that stress it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from linattn_properties._testing import bug_kernel, example_spec, narrowed
from linattn_properties.denominators import denominator_stable

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels
from linattn_verify.results import Comparison, PropertyResult
from linattn_verify.running import check_property

KERNELS = list(registered_kernels("linear_attn").values())

SMALL: dict[str, Any] = {"max_seq_len": 20, "max_head_dim": 5}
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
def test_denominator_stable(linattn_kernel: Kernel, data: st.DataObject) -> None:
    if True not in linattn_kernel.capabilities.normalize:
        pytest.skip(f"{linattn_kernel.name} has no normalized output")
    steer = narrowed(linattn_kernel, normalize=(True,))
    spec = data.draw(kernel_specs(steer, values=STRESS, **SMALL), label="spec")
    if linattn_kernel.capabilities.configurable and data.draw(st.booleans(), label="eps=0"):
        # eps = 0 is where 0/0 and underflow bite; draw it often.
        spec = replace(spec, eps=0.0)
    result = check_property(denominator_stable, spec, linattn_kernel)
    assert result.status == "held", result.report()


@pytest.mark.cases(NASTY)
def test_denominator_stable_on_nasty_cases(linattn_kernel: Kernel, spec: ProblemSpec) -> None:
    result = check_property(denominator_stable, spec, linattn_kernel)
    assert result.status == "held", result.report()


def oracle_of(result: PropertyResult) -> Comparison:
    """The oracle comparison of o in a `denominator_stable` result."""
    (o,) = (c for c in result.comparisons if c.kind == "oracle")
    assert o.tensor == "o"
    return o


def test_counts_report_zero_rows_and_unverifiable_rows() -> None:
    kernel = KERNELS[-1]
    rows, V = 18 * 2, base().V
    zero = denominator_stable(NASTY["all-zero-features"], kernel)
    assert zero.status == "held", zero.report()
    assert oracle_of(zero).counts.undefined == rows * V
    assert [c.tensor for c in zero.comparisons] == ["o", "o[Z=0]"]
    under = denominator_stable(NASTY["underflow-eps0"], kernel)
    assert under.status == "held", under.report()
    assert oracle_of(under).counts.unverifiable == rows * V
    dominated = denominator_stable(NASTY["eps-dominated"], kernel)
    assert dominated.status == "held", dominated.report()
    eps_influence = oracle_of(dominated).scores.eps_influence
    assert eps_influence is not None
    assert eps_influence > 0.5


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
    ("spec", "expected"),
    [
        # Every feature is 0: every row is 0/0.
        (NASTY["all-zero-features"], "bug/no_zero_guard: o holds 108 NaN value(s) of 108"),
        (NASTY["underflow-eps0"], "bug/no_zero_guard: o holds "),
    ],
    ids=["zero-row", "underflow"],
)
def test_denominator_stable_fails_for_a_missing_zero_guard(
    spec: ProblemSpec, expected: str
) -> None:
    kernel = bug_kernel(no_zero_guard, initial_state=False, final_state=False)
    result = denominator_stable(spec, kernel)
    assert result.status == "failed"
    assert result.comparisons == ()
    assert result.reason is not None
    assert result.reason.startswith(expected), result.reason
    assert "NaN value(s)" in result.message()


def test_denominator_stable_fails_for_eps_added_twice() -> None:
    kernel = bug_kernel(eps_squared, initial_state=False, final_state=False)
    result = denominator_stable(base(values="normal", eps=1e-2), kernel)
    assert result.status == "failed"
    o = oracle_of(result)
    assert not o.ok
    assert o.deciding > 2
    assert o.counts.mismatched > 0
    assert "bug/eps_squared o is not close to the float64 oracle!" in result.message()
    # No row has Z = 0 here: the 0/0 comparison holds.
    zero_rows = result.comparisons[1]
    assert zero_rows.tensor == "o[Z=0]"
    assert zero_rows.ok


def test_denominator_stable_fails_for_a_nonzero_zero_row() -> None:
    def one_on_zero_rows(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        N, Z = _parts(q, k, v, g, kw)
        den = Z + kw["eps"]
        return torch.where(den == 0, 1.0, N / den).to(q.dtype), None

    kernel = bug_kernel(one_on_zero_rows, initial_state=False, final_state=False)
    result = denominator_stable(NASTY["all-zero-features"], kernel)
    assert result.status == "failed"
    zero_rows = result.comparisons[1]
    assert zero_rows.tensor == "o[Z=0]"
    assert zero_rows.kind == "bitwise"
    assert not zero_rows.ok
    assert zero_rows.counts.mismatched == 108
    assert zero_rows.worst is not None
    assert (zero_rows.worst.actual, zero_rows.worst.expected) == (1.0, 0.0)
    assert "o[Z=0] is not bit-identical to 0 on rows whose exact denominator is 0" in (
        result.message()
    )


def test_denominator_stable_fails_for_an_inf_on_a_bounded_quotient() -> None:
    def overflows_first_token(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        N, Z = _parts(q, k, v, g, kw)
        o = N / (Z + kw["eps"])
        o[:, 0] = torch.inf
        return o.to(q.dtype), None

    kernel = bug_kernel(overflows_first_token, initial_state=False, final_state=False)
    result = denominator_stable(base(values="normal", eps=1e-2), kernel)
    assert result.status == "failed"
    assert result.reason is not None
    assert result.reason.startswith(
        "o is infinite where the denominator is certified nonzero and the quotient is bounded!\n"
        "Infinite elements: 6 / 108\nFirst at index (0, 0, 0, 0)"
    ), result.reason
    # The oracle comparison sees the same elements: finite exact values, certified rows.
    o = oracle_of(result)
    assert o.counts.nonfinite == 6


def test_denominator_stable_passes_the_correct_twin() -> None:
    twin = replace(bug_kernel(REFERENCE, initial_state=False, final_state=False), name="twin")
    for spec in NASTY.values():
        if not spec.initial_state:
            result = denominator_stable(spec, twin)
            assert result.status == "held", result.report()


# Declared conventions (docs/design.md §3): the same IEEE kernel, three declarations.


def ieee_division(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
    # A correct kernel that divides as IEEE arithmetic does: 0/0 = NaN on the 0/0 rows.
    N, Z = _parts(q, k, v, g, kw)
    return (N / (Z + kw["eps"])).to(q.dtype), None


@pytest.mark.parametrize("convention", ["ieee", "any"])
@pytest.mark.parametrize("name", ["all-zero-features", "underflow-eps0", "tiny-relu-fp16"])
def test_an_ieee_kernel_is_stable_under_its_declaration(name: str, convention: str) -> None:
    kernel = bug_kernel(
        ieee_division, initial_state=False, final_state=False, zero_denominator=convention
    )
    result = denominator_stable(NASTY[name], kernel)
    assert result.status == "held", result.report()
    # No "o[Z=0]" comparison with 0: that is the zero convention's.
    assert [c.tensor for c in result.comparisons] == ["o"]


def test_an_ieee_kernel_declared_zero_breaks_its_declaration() -> None:
    kernel = bug_kernel(ieee_division, initial_state=False, final_state=False)
    assert kernel.capabilities.zero_denominator == "zero"
    result = denominator_stable(NASTY["all-zero-features"], kernel)
    assert result.status == "failed"
    assert result.reason is not None
    assert "on rows whose exact denominator is 0, where it declared zero_denominator='zero'" in (
        result.reason
    )


def test_an_ieee_kernel_counts_the_zero_rows_as_undefined() -> None:
    kernel = bug_kernel(
        ieee_division, initial_state=False, final_state=False, zero_denominator="ieee"
    )
    result = denominator_stable(NASTY["all-zero-features"], kernel)
    assert oracle_of(result).counts.undefined == 18 * 2 * base().V

    # A NaN on a row whose denominator is certified nonzero is still never allowed.
    def nan_elsewhere(q: Any, k: Any, v: Any, g: Any = None, **kw: Any) -> Any:
        o, _ = ieee_division(q, k, v, g, **kw)
        o[:, 0] = torch.nan
        return o, None

    broken = replace(kernel, fn=nan_elsewhere)
    bad = denominator_stable(base(values="normal", eps=1e-2), broken)
    assert bad.status == "failed"
    assert bad.reason is not None
    assert "outside the rows whose exact denominator is or may be 0" in bad.reason
