# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The four evaluations of the delta rule agree within their derived bounds (conftest.py).

float64 recurrent and chunked forms against the double-double oracle, the dd oracle against the
mpmath oracle, and the two float64 forms against each other, across gates, betas, L2
normalisation, varlen packing (with an empty and a length-1 sequence), T not a multiple of the
chunk size, and initial / final states. A planted defect (the error-before-decay reading) is
caught by the same bounds, so they are not vacuous.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from linattn_verify.delta import (
    delta_chunked,
    delta_double_double,
    delta_mpmath,
    delta_recurrent,
)
from linattn_verify.delta.reference import assemble

GATES = ("none", "scalar", "vector")
BETAS = ("zero", "one", "random", "near2")


def check_all_forms(problem, bounds, chunk_sizes=(16, 5)):
    rec_o, rec_S = delta_recurrent(problem)
    dd_o, dd_S = delta_double_double(problem)
    mp_o, mp_S = delta_mpmath(problem)
    b_rec = bounds.recurrent(problem)
    b_dd = bounds.recurrent(problem, u=bounds.U_DD)
    b_mp = bounds.recurrent(problem, u=bounds.U_MP50)
    u = bounds.U64
    # The oracles: dd against mpmath, each rounded once.
    bounds.assert_within(
        dd_o, mp_o, b_dd.o + b_mp.o + u * (dd_o.abs() + mp_o.abs()), "dd o vs mpmath"
    )
    bounds.assert_within(
        dd_S, mp_S, b_dd.state + b_mp.state + u * (dd_S.abs() + mp_S.abs()), "dd S_T vs mpmath"
    )
    # The float64 recurrent form against the dd oracle.
    bounds.assert_within(rec_o, dd_o, b_rec.o + b_dd.o + u * dd_o.abs(), "recurrent o vs dd")
    bounds.assert_within(
        rec_S, dd_S, b_rec.state + b_dd.state + u * dd_S.abs(), "recurrent S_T vs dd"
    )
    for C in chunk_sizes:
        ch_o, ch_S = delta_chunked(problem, chunk_size=C)
        b_ch = bounds.chunked(problem, C)
        bounds.assert_within(ch_o, dd_o, b_ch.o + b_dd.o + u * dd_o.abs(), f"chunk{C} o vs dd")
        bounds.assert_within(
            ch_S, dd_S, b_ch.state + b_dd.state + u * dd_S.abs(), f"chunk{C} S_T vs dd"
        )
        bounds.assert_within(ch_o, rec_o, b_ch.o + b_rec.o, f"chunk{C} o vs recurrent")
        bounds.assert_within(ch_S, rec_S, b_ch.state + b_rec.state, f"chunk{C} S vs recurrent")
    return rec_o, dd_o


@pytest.mark.parametrize("l2norm", [False, True], ids=["raw", "l2norm"])
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("gate", GATES)
def test_forms_agree_with_oracles(problem_factory, bounds, gate, beta, l2norm):
    problem = problem_factory(
        gate=gate, beta=beta, l2norm=l2norm, T=21, seed=GATES.index(gate) + 10 * BETAS.index(beta)
    )
    rec_o, _ = check_all_forms(problem, bounds)
    assert rec_o.shape == (2, 21, 2, 3)


@pytest.mark.parametrize("l2norm", [False, True], ids=["raw", "l2norm"])
@pytest.mark.parametrize("gate", GATES)
def test_varlen_forms_agree_with_oracles(problem_factory, bounds, gate, l2norm):
    # Sequence lengths 5, 0 (empty), 1 and 20 (not a multiple of either chunk size).
    cu = [0, 5, 5, 6, 26]
    problem = problem_factory(gate=gate, l2norm=l2norm, B=1, T=26, cu_seqlens=cu, seed=3)
    check_all_forms(problem, bounds)
    # Each packed sequence equals the same sequence run alone from its own initial state.
    o, S = delta_recurrent(problem)
    assert problem.initial_state is not None
    for n, (start, end) in enumerate(itertools.pairwise(cu)):
        alone = dataclasses.replace(
            problem,
            q=problem.q[:, start:end],
            k=problem.k[:, start:end],
            v=problem.v[:, start:end],
            beta=problem.beta[:, start:end],
            g=None if problem.g is None else problem.g[:, start:end],
            initial_state=problem.initial_state[n : n + 1],
            cu_seqlens=None,
        )
        o_n, S_n = delta_recurrent(alone)
        assert torch.equal(o[:, start:end], o_n)
        assert torch.equal(S[n : n + 1], S_n)
    # The empty sequence passes its initial state through untouched.
    assert torch.equal(S[1], problem.initial_state[1])


def test_agreement_is_tight_enough_to_catch_a_planted_defect(problem_factory, bounds):
    """The error-before-decay reading differs from FLA's order by far more than the bound."""
    problem = problem_factory(gate="vector", beta="random", T=21, seed=5)
    p = problem.to(torch.float64)

    def error_before_decay(seq):
        S, outs = seq.S0, []
        for t in range(seq.q.shape[1]):
            k_t = seq.k[:, t, :, None]
            w = seq.beta[:, t, None] * (seq.v[:, t] - (S * k_t).sum(1))
            S = torch.exp(seq.g[:, t])[:, :, None] * S + k_t * w[:, None, :]
            outs.append((p.scale * seq.q[:, t, :, None] * S).sum(1))
        return torch.stack(outs, 0), S

    wrong_o, _ = assemble(p, error_before_decay, most=None)
    dd_o, _ = delta_double_double(problem)
    allowed = bounds.recurrent(problem).o + bounds.U64 * dd_o.abs()
    with pytest.raises(AssertionError, match="outside the bound"):
        bounds.assert_within(wrong_o, dd_o, allowed, "error-before-decay o vs dd")


def test_chunked_form_bound_detects_a_perturbed_inverse(problem_factory, bounds, monkeypatch):
    """A relative error of 1e-9 in T = L^{-1} (a sloppy inverse) is outside the chunked bound."""
    import linattn_verify.delta.reference as reference

    exact_inverse = reference.forward_substitution_inverse

    def sloppy(L):
        T = exact_inverse(L)
        return T + 1e-9 * torch.tril(T, -1)

    problem = problem_factory(gate="scalar", beta="one", T=21, seed=7)
    dd_o, _ = delta_double_double(problem)
    allowed = bounds.chunked(problem, 16).o + bounds.U64 * dd_o.abs()
    monkeypatch.setattr(reference, "forward_substitution_inverse", sloppy)
    ch_o, _ = delta_chunked(problem, chunk_size=16)
    with pytest.raises(AssertionError, match="outside the bound"):
        bounds.assert_within(ch_o, dd_o, allowed, "sloppy-inverse chunk o vs dd")
