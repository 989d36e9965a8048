# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The recurrent gradient bound covers a decayed state S' = e^g S that underflows fp32.

A steep scalar gate makes S' subnormal: forming it rounds to an absolute 2^-150, which a
relative ε misses. A correct fp32 kernel that forms dg as the bound's docstring writes it,
Σ S'_ij Λ'_ij, then read that absolute error multiplied by the adjoint (found by a search on
`triton/delta.recurrent`: r = 6.2 before the bound charged it).
"""

from __future__ import annotations

import torch

from linattn_verify.compare import compare
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.strategies import DeltaCase, random_delta_cotangents

CASE = DeltaCase(
    B=1, T=19, H=2, K=1, V=1, dtype="float32", gate="scalar", gate_family="steep",
    beta_family="zero", key_family="unit", value_family="large", l2norm_qk=False,
    negative_eigenvalues=False, initial_state=True, output_final_state=False, seq_lens=None,
    scale=None, seed=0,
)  # fmt: skip


def formula_order_dg(problem, do: torch.Tensor) -> tuple[torch.Tensor, float]:  # type: ignore[no-untyped-def]
    """dg in fp32, token by token, from the decayed state S' (what a kernel may well do).

    Returns dg and the smallest nonzero |S'| met.
    """
    q, k, v, beta, g = (
        x[0].float() for x in (problem.q, problem.k, problem.v, problem.beta, problem.g)
    )
    S = problem.initial_state[0].float()  # [H, K, V]
    decayed = []
    for t in range(q.shape[0]):
        Sp = torch.exp(g[t])[:, None, None] * S
        decayed.append(Sp)
        e = v[t] - (k[t][:, :, None] * Sp).sum(1)
        S = Sp + beta[t][:, None, None] * k[t][:, :, None] * e[:, None, :]
    s = problem.scale
    dg = torch.empty_like(g)
    Lam = torch.zeros_like(S)
    for t in reversed(range(q.shape[0])):
        Lam = Lam + s * q[t][:, :, None] * do[0, t].float()[:, None, :]
        lam_k = (Lam * k[t][:, :, None]).sum(1)
        Lam_p = Lam - beta[t][:, None, None] * k[t][:, :, None] * lam_k[:, None, :]
        dg[t] = (decayed[t] * Lam_p).sum((1, 2))
        Lam = torch.exp(g[t])[:, None, None] * Lam_p
    states = torch.stack(decayed).abs()
    return dg[None], float(states[states > 0].min())


def test_dg_from_an_underflowing_decayed_state_is_within_its_bound() -> None:
    problem = CASE.build()
    assert problem.g is not None
    do, _ = random_delta_cotangents(problem, seed=0)
    dg, smallest = formula_order_dg(problem, do)
    assert smallest < 2.0**-126  # the decayed state does underflow
    recipe = DeltaRecipe(form="recurrent", accumulation="ieee")
    bounds = backward_bounds(problem, recipe, do=do, d_final_state=None)
    comparison = compare(dg, bounds["dg"])
    assert comparison.ok, comparison
    assert comparison.scores.r <= 1.0


SUBNORMAL_CASE = DeltaCase(
    B=2, T=17, H=1, K=7, V=1, dtype="float32", gate="scalar", gate_family="steep",
    beta_family="zero", key_family="raw", value_family="tiny", l2norm_qk=True,
    negative_eigenvalues=False, initial_state=True, output_final_state=True, seq_lens=None,
    scale=0.4352220310234295, seed=61428,
)  # fmt: skip


def test_the_chunk_gradient_bound_covers_gradients_in_the_subnormal_range() -> None:
    # Tiny values (1e-20) put dq at 2.5e-40, below fp32's normal range: every operation that
    # forms it errs by up to 2^-150 absolutely, 230 of them on the worst element here, which
    # the chunk bound charged nowhere (r = 4.7 on the correct chunk twin, found by the soak of
    # the delta zoo). The property must hold on the twin.
    from linattn_properties.delta import delta_catalogue

    from linattn_verify.delta.reference_kernels import delta_reference_kernels

    twin = next(k for k in delta_reference_kernels() if k.name == "torch/delta.chunk")
    result = delta_catalogue()["gradients_match_oracle"](SUBNORMAL_CASE, twin)
    assert result.status == "held", result.message()


SUBNORMAL_WEIGHT_CASE = DeltaCase(
    B=1, T=25, H=2, K=1, V=1, dtype="float32", gate="scalar", gate_family="steep",
    beta_family="zero", key_family="unit", value_family="large", l2norm_qk=False,
    negative_eigenvalues=False, initial_state=True, output_final_state=True,
    seq_lens=(0, 25, 0), scale=None, seed=139,
)  # fmt: skip


def test_the_chunk_gradient_bound_carries_a_subnormal_weight_through_its_products() -> None:
    # A steep gate makes e^{G_i} subnormal in fp32 (2^-150 absolutely), and dg multiplies that
    # weight by s q S dO (about 1e4 with large values): the bound charged underflow only as a
    # constant, and the correct chunk reference failed dg at r = 18 (found with the corpus's
    # chunk kernels, issue #25). Each node now carries its own underflow through the products.
    from linattn_properties.delta import delta_catalogue

    from linattn_verify.delta.reference_kernels import delta_reference_kernels

    chunk = next(k for k in delta_reference_kernels() if k.name == "torch/delta.chunk")
    result = delta_catalogue()["gradients_match_oracle"](SUBNORMAL_WEIGHT_CASE, chunk)
    assert result.status == "held", result.message()
