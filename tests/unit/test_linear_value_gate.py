# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""GLA's value gate gv: folded into single-column problems, judged as the function it is.

S_t = diag(e^{g_t}) S_{t-1} diag(e^{gv_t}) + k_t v_t^T; column c is linear attention of one
value column with the gate g + gv_c (`linattn_verify.linear_attn.value_gate`). These tests pin
the fold against the recurrence written out, the bound against an fp32 kernel that decays in
two steps as FLA's ``fused_recurrent_gla`` does, and the declarations around it. End to end: the
corpus (``gla_value_gate``, FLA's ``fused_recurrent_gla`` with gv) and the zoo
(``gla_value_gate_after_update``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.compare import compare
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.exact import exact_oracle
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds
from linattn_verify.linear_attn.value_gate import fold


def _written_out(p: Problem, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence token by token in ``dtype``: decay by e^g, then by e^gv, then add k v^T
    (one sequence per batch row)."""
    B, T, H, K, V = p.shape
    S = torch.zeros(B, H, K, V, dtype=dtype) if p.initial_state is None else p.initial_state
    S = S.to(dtype)
    assert p.gv is not None
    outs = []
    for t in range(T):
        if p.g is not None:
            d = torch.exp(p.g[:, t].to(dtype))
            S = S * (d[..., None] if p.g.ndim == 4 else d[..., None, None])
        S = S * torch.exp(p.gv[:, t].to(dtype))[:, :, None, :]
        S = S + p.k[:, t].to(dtype)[..., None] * p.v[:, t].to(dtype)[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, p.q[:, t].to(dtype) * p.scale))
    return torch.stack(outs, 1), S


def _case(gate: str, **changes: object) -> ProblemSpec:
    spec = ProblemSpec(
        B=2, T=9, H=2, K=3, V=4, dtype="float32", feature_map="identity", normalize=False,
        eps=0.0, scale=None, values="normal", decay="none" if gate == "none" else "mild",
        initial_state=True, output_final_state=True, segments=None, seed=4,
        gate="vector" if gate == "vector" else "scalar", value_gate="logsigmoid",
    )  # fmt: skip
    return replace(spec, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
def test_the_fold_is_the_recurrence_written_out(gate: str) -> None:
    p = _case(gate).build().to(torch.float64)
    o, S = _written_out(p, torch.float64)
    for reference in (recurrent_reference, chunk_reference):
        o_ref, S_ref = reference(p)
        torch.testing.assert_close(o_ref, o, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(S_ref, S, rtol=1e-12, atol=1e-12)


def test_the_folded_problem_has_one_head_per_value_column() -> None:
    p = _case("vector").build()
    folded = fold(p)
    B, T, H, K, V = p.shape
    assert folded.shape == (B, T, H * V, K, 1)
    assert folded.gv is None
    assert folded.gate_factors == 2
    assert folded.g is not None
    assert p.g is not None
    assert p.gv is not None
    # Head h·V + c decays key dimension m by g_hm + gv_hc.
    torch.testing.assert_close(
        folded.g[:, :, 1 * V + 2, :], p.g[:, :, 1].double() + p.gv[:, :, 1, 2, None].double()
    )


def test_dyadic_gates_fold_exactly() -> None:
    """With dyadic inputs and gates the exact oracle of the fold is the rational recurrence."""
    p = _case("scalar", decay="zero", value_gate="zero").build().to(torch.float64)
    o_exact, S_exact = exact_oracle(p)
    o, S = _written_out(p, torch.float64)
    torch.testing.assert_close(o_exact, o, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(S_exact, S, rtol=1e-13, atol=1e-13)


@settings(max_examples=12, deadline=None)
@given(
    gate=st.sampled_from(["none", "scalar", "vector"]),
    value_gate=st.sampled_from(["mild", "steep", "logsigmoid", "mixed", "overflowing_some"]),
    T=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_an_fp32_kernel_decaying_in_two_steps_is_within_the_bound(
    gate: str, value_gate: str, T: int, seed: int
) -> None:
    """The bound charges exp(g) and exp(gv) apart (gate_factors = 2): FLA's order holds."""
    p = _case(gate, T=T, seed=seed, value_gate=value_gate).build()
    o, S = _written_out(p, torch.float32)
    fb = forward_bounds(p, PrecisionRecipe(form="recurrent", decay_scan="per_step"))
    for actual, name in ((o, "o"), (S, "final_state")):
        comparison = compare(actual, fb.tensors[name], subject="two-step fp32")
        assert comparison.ok, comparison


def test_a_value_gate_applied_after_the_update_is_outside_the_bound() -> None:
    p = _case("scalar", value_gate="steep").build()
    B, T, H, K, V = p.shape
    assert p.gv is not None
    S = torch.zeros(B, H, K, V) if p.initial_state is None else p.initial_state.float()
    outs = []
    for t in range(T):
        S = S * torch.exp(p.g[:, t])[..., None, None] if p.g is not None else S
        S = (S + p.k[:, t, :, :, None] * p.v[:, t, :, None, :]) * torch.exp(p.gv[:, t])[:, :, None]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, p.q[:, t] * p.scale))
    fb = forward_bounds(p, PrecisionRecipe(form="recurrent", decay_scan="per_step"))
    assert not compare(torch.stack(outs, 1), fb.tensors["o"], subject="after").ok


def test_declarations_around_a_value_gate_are_checked() -> None:
    p = _case("none").build()
    with pytest.raises(InvalidArgument, match="gv with normalize=True"):
        validate_problem(p.q, p.k, p.v, gv=p.gv, normalize=True)
    with pytest.raises(InvalidArgument, match=r"gv of shape \[B, T, H, V\]"):
        validate_problem(p.q, p.k, p.v, gv=p.gv[..., :1])
    assert p.gv is not None
    with pytest.raises(InvalidArgument, match="gv <= 0"):
        validate_problem(p.q, p.k, p.v, gv=p.gv.abs() + 1)
    with pytest.raises(InvalidArgument, match="value_gate=True with backward=True"):
        Capabilities(value_gate=True)
    do = torch.ones_like(p.v)
    with pytest.raises(InvalidArgument, match="value gate gv: its gradients are not judged"):
        backward_bounds(p, PrecisionRecipe(form="recurrent"), do=do)


@pytest.mark.parametrize("scan", ["chunk_local", "global", "per_step"])
def test_the_scan_charges_a_value_gate_as_the_dense_pairs_do(scan: str) -> None:
    """The block scan (long sequences) gives the dense evaluation's bound on a value gate.

    The folded gate's weights are products of two exponentials, charged (2f - 1) ε_w
    (error model §2.9) in every pair: the scan's pairs within a chunk once lacked the factor,
    so on a chunk-local scan they were charged ε_w alone.
    """
    p = _case("vector", T=40, B=1, decay="steep").build()
    recipe = PrecisionRecipe(form="chunk", chunk_size=8, decay_scan=scan)
    dense = forward_bounds(p, recipe)
    scanned = forward_bounds(p, recipe, scan_block=16)
    for name, bound in dense.tensors.items():
        torch.testing.assert_close(scanned.tensors[name].bound, bound.bound, rtol=1e-9, atol=0)
