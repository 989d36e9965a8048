# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exact properties of the delta rule that the reference forms and oracles must show."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from linattn_verify.delta import (
    delta_chunked,
    delta_double_double,
    delta_mpmath,
    delta_recurrent,
    l2norm,
    validate_delta,
)

FORMS = {
    "recurrent": delta_recurrent,
    "chunk16": lambda p: delta_chunked(p, chunk_size=16),
    "chunk4": lambda p: delta_chunked(p, chunk_size=4),
    "dd": delta_double_double,
}


@pytest.mark.parametrize("gate", ["zeros3", "zeros4"])
@pytest.mark.parametrize("form", ["recurrent", "chunk16", "chunk4", "dd"])
def test_beta_zero_leaves_the_state_unchanged_bitwise(problem_factory, form, gate):
    """beta = 0 with g = 0: S_T == S_0 bit for bit (nothing is written, nothing decays)."""
    problem = problem_factory(gate="none", beta="zero", T=19, seed=11)
    g = torch.zeros(problem.q.shape if gate == "zeros4" else problem.q.shape[:3])
    problem = dataclasses.replace(problem, g=g.double())
    _, S = FORMS[form](problem)
    assert problem.initial_state is not None
    assert torch.equal(S, problem.initial_state)


@pytest.mark.parametrize("form", ["recurrent", "chunk16", "chunk4", "dd"])
@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
def test_unit_key_and_beta_one_read_back_what_was_written(problem_factory, bounds, form, gate):
    """||k_t|| = 1 exactly and beta_t = 1 give S_t^T k_t = v_t; read it with q = k, s = 1.

    Keys with entries ±1/2 (K = 4) are unit vectors exactly in float64, so the exact output is
    v itself and the allowed difference is the form's own derived bound.
    """
    base = problem_factory(gate=gate, beta="one", T=19, K=4, seed=13)
    gen = torch.Generator().manual_seed(1)
    signs = torch.randint(0, 2, base.k.shape, generator=gen).double() * 2 - 1
    k = 0.5 * signs
    problem = dataclasses.replace(base, q=k, k=k, scale=1.0)
    o, _ = FORMS[form](problem)
    if form == "recurrent":
        allowed = bounds.recurrent(problem).o
    elif form == "dd":
        allowed = bounds.recurrent(problem, u=bounds.U_DD).o + bounds.U64 * problem.v.abs()
    else:
        allowed = bounds.chunked(problem, int(form.removeprefix("chunk"))).o
    bounds.assert_within(o, problem.v, allowed, f"{form} read-back S_t^T k_t vs v_t")


@pytest.mark.parametrize("l2norm_qk", [False, True])
def test_scalar_gate_equals_vector_gate_repeated_over_k(problem_factory, bounds, l2norm_qk):
    problem = problem_factory(gate="scalar", l2norm=l2norm_qk, T=19, seed=17)
    assert problem.g is not None
    vector = dataclasses.replace(problem, g=problem.g[..., None].expand(problem.q.shape))
    for form in (delta_recurrent, delta_double_double, delta_mpmath):
        # The same operations on the same values, so the same bits.
        o_s, S_s = form(problem)
        o_v, S_v = form(vector)
        assert torch.equal(o_s, o_v), form.__name__
        assert torch.equal(S_s, S_v), form.__name__
    # The chunked form takes another path for a vector gate: equal within both bounds.
    b = bounds.chunked(problem, 16)
    o_s, S_s = delta_chunked(problem)
    o_v, S_v = delta_chunked(vector)
    bounds.assert_within(o_v, o_s, 2 * b.o, "chunk o vector vs scalar gate")
    bounds.assert_within(S_v, S_s, 2 * b.state, "chunk S_T vector vs scalar gate")


@pytest.mark.parametrize("form", ["recurrent", "chunk16", "chunk4", "dd"])
def test_no_gate_equals_zero_gate(problem_factory, form):
    problem = problem_factory(gate="none", T=19, seed=19)
    zero = dataclasses.replace(problem, g=torch.zeros(problem.q.shape[:3], dtype=torch.float64))
    o, S = FORMS[form](problem)
    o0, S0 = FORMS[form](zero)
    # exp(0) = 1 exactly and 1·x = x, so no bit may change.
    assert torch.equal(o, o0)
    assert torch.equal(S, S0)


def test_l2norm_follows_fla_formula_and_makes_keys_sub_unit():
    """x / sqrt(Σx² + 1e-6), with inputs whose squares are exact so the sums can be written."""
    tiny = 2.0**-14
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [tiny, 0.0]], dtype=torch.float64)
    y = l2norm(x)
    sums = torch.tensor([25 + 1e-6, 1e-6, tiny * tiny + 1e-6], dtype=torch.float64)
    assert torch.equal(y, x / torch.sqrt(sums)[:, None])
    assert bool((y.norm(dim=-1) < 1).all())


def test_l2norm_option_equals_normalising_the_inputs_first(problem_factory):
    problem = problem_factory(gate="vector", l2norm=True, T=19, seed=23)
    manual = dataclasses.replace(problem, q=l2norm(problem.q), k=l2norm(problem.k), l2norm_qk=False)
    for form in (delta_recurrent, delta_chunked):
        o, S = form(problem)
        o_m, S_m = form(manual)
        assert torch.equal(o, o_m)
        assert torch.equal(S, S_m)


def test_final_state_is_returned_only_when_asked(problem_factory):
    problem = problem_factory(final=False, T=7, seed=29)
    for form in (*FORMS.values(), delta_mpmath):
        o, S = form(problem)
        assert S is None
        assert o.shape == (*problem.q.shape[:3], problem.v.shape[-1])
        assert o.dtype == torch.float64


def test_low_precision_inputs_are_converted_exactly(problem_factory):
    problem = problem_factory(T=9, seed=31)
    half = problem.to(torch.bfloat16)
    widened = half.to(torch.float64)
    for form in (delta_recurrent, delta_chunked, delta_double_double):
        o_h, S_h = form(half)
        o_w, S_w = form(widened)
        assert torch.equal(o_h, o_w)
        assert torch.equal(S_h, S_w)


def test_validate_then_evaluate_a_gated_deltanet_example(bounds):
    """A hand-checkable two-token case: K = V = 1, scalar gate, scale 1."""
    q = torch.tensor([1.0, 1.0], dtype=torch.float64).reshape(1, 2, 1, 1)
    k = torch.tensor([1.0, 0.5], dtype=torch.float64).reshape(1, 2, 1, 1)
    v = torch.tensor([2.0, 4.0], dtype=torch.float64).reshape(1, 2, 1, 1)
    beta = torch.tensor([0.5, 1.0], dtype=torch.float64).reshape(1, 2, 1)
    g = torch.log(torch.tensor([0.5, 0.25], dtype=torch.float64)).reshape(1, 2, 1)
    S0 = torch.tensor([4.0], dtype=torch.float64).reshape(1, 1, 1, 1)
    p = validate_delta(q, k, v, beta, g, scale=1.0, initial_state=S0, output_final_state=True)
    # t=1: S' = 2, S = 2 + 0.5·1·(2 - 2) = 2. t=2: S' = 0.5, S = 0.5 + 0.5·(4 - 0.25) = 2.375.
    # (The error-before-decay reading gives 1 at t=1.)
    expected = torch.tensor([2.0, 2.375], dtype=torch.float64).reshape(1, 2, 1, 1)
    # exp(log 0.5) need not be 0.5 exactly: allow each form's derived bound.
    allowed = bounds.recurrent(p).o + bounds.chunked(p, 16).o + bounds.U64 * expected.abs()
    for form in (delta_recurrent, delta_chunked, delta_double_double, delta_mpmath):
        o, S = form(p)
        bounds.assert_within(o, expected, allowed, f"{form.__name__} o")
        bounds.assert_within(S.reshape(1), expected[0, 1, 0], allowed[0, 1, 0], "S_T")
