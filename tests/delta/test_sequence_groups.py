# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Sequences of one length are evaluated together, with the results each would have alone.

The oracle, the forward bounds and the gradient bounds stack a problem's equal-length
sequences head-wise (`linattn_verify.delta.reference.sequence_groups`), so the Python loop
over tokens and chunks runs once per length rather than once per sequence (issue #27). Each
sequence's results must be those of the sequence checked on its own: every element equal to
1e-12 relative of the tensor's largest (float64 matrix products may group their sums otherwise
in a batch), the same infinities.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.delta.bounds import forward_bounds
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem, validate_delta
from linattn_verify.delta.reference import delta_chunked, delta_recurrent
from linattn_verify.delta.strategies import DeltaCase

CASE = DeltaCase(
    B=1, T=44, H=2, K=6, V=5, dtype="float32", gate="scalar", gate_family="logsigmoid",
    beta_family="sigmoid", key_family="unit", value_family="unit", l2norm_qk=True,
    negative_eigenvalues=False, initial_state=True, output_final_state=True,
    seq_lens=(5, 17, 0, 5, 17), scale=None, seed=11,
)  # fmt: skip
DENSE = replace(CASE, B=3, T=19, seq_lens=None)
RELATIVE = 1e-12


def _alone(problem: DeltaProblem) -> dict[int, DeltaProblem]:
    """Each non-empty sequence of ``problem`` as a problem of its own (B = 1, no packing)."""
    out = {}
    for n, b, start, end in problem.sequences():
        if end == start:
            continue  # no problem has T = 0: `test_an_empty_sequence_keeps_its_state`
        rows = [x[b : b + 1, start:end] for x in (problem.q, problem.k, problem.v, problem.beta)]
        g = None if problem.g is None else problem.g[b : b + 1, start:end]
        S0 = problem.initial_state
        out[n] = validate_delta(
            *rows,
            g,
            scale=problem.scale,
            l2norm_qk=problem.l2norm_qk,
            initial_state=None if S0 is None else S0[n : n + 1],
            output_final_state=problem.output_final_state,
        )
    return out


def _tokens(problem: DeltaProblem, x: torch.Tensor, n: int) -> torch.Tensor:
    """Sequence ``n``'s rows of a ``[B, T, ...]`` tensor of ``problem``."""
    _, b, start, end = list(problem.sequences())[n]
    return x[b : b + 1, start:end]


def _agree(together: torch.Tensor, alone: torch.Tensor, what: str) -> None:
    assert together.shape == alone.shape, what
    finite = torch.isfinite(alone)
    assert torch.equal(finite, torch.isfinite(together)), f"{what}: infinities differ"
    if finite.any():
        scale = alone[finite].abs().max()
        error = (together[finite] - alone[finite]).abs().max()
        assert error <= RELATIVE * scale, f"{what}: {error:.3g} against {scale:.3g}"


def _cotangents(problem: DeltaProblem) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    do = torch.randn(problem.v.shape, generator=gen, dtype=torch.float64)
    N, H, K, V = problem.num_sequences, *problem.q.shape[2:], problem.v.shape[-1]
    return do, torch.randn(N, H, K, V, generator=gen, dtype=torch.float64)


def _bounds(
    problem: DeltaProblem, recipe: DeltaRecipe, do: torch.Tensor, dS: torch.Tensor
) -> dict[str, TensorBound]:
    backward = backward_bounds(problem, recipe, do=do, d_final_state=dS)
    return forward_bounds(problem, recipe) | backward


@pytest.mark.parametrize("case", [CASE, DENSE], ids=["varlen", "dense"])
@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
@pytest.mark.parametrize("form", ["recurrent", "chunk"])
def test_grouped_bounds_equal_each_sequence_alone(case: DeltaCase, gate: str, form: str) -> None:
    family = "none" if gate == "none" else "logsigmoid"
    problem = replace(case, gate=gate, gate_family=family).build()
    recipe = DeltaRecipe(form=form, chunk_size=8)
    do, dS = _cotangents(problem)
    together = _bounds(problem, recipe, do, dS)
    for n, single in _alone(problem).items():
        alone = _bounds(single, recipe, _tokens(problem, do, n), dS[n : n + 1])
        for name, bound in alone.items():
            for field in ("reference", "bound", "magnitude"):
                whole = getattr(together[name], field)
                # The final state and dS_0 are [N, ...]; the rest are token rows.
                mine = whole[n : n + 1] if name in ("final_state", "dinitial_state") else (
                    _tokens(problem, whole, n))  # fmt: skip
                _agree(mine, getattr(bound, field), f"sequence {n} {name}.{field}")


@pytest.mark.parametrize("oracle", [delta_recurrent, delta_chunked])
def test_the_grouped_oracle_equals_each_sequence_alone(oracle: object) -> None:
    problem = CASE.build()
    o, S = oracle(problem)  # type: ignore[operator]
    for n, single in _alone(problem).items():
        o_n, S_n = oracle(single)  # type: ignore[operator]
        _agree(_tokens(problem, o, n), o_n, f"o of sequence {n}")
        _agree(S[n : n + 1], S_n, f"S_T of sequence {n}")


def test_an_empty_sequence_keeps_its_state_in_a_group_of_its_own() -> None:
    problem = CASE.build()
    (empty,) = [n for n, _, start, end in problem.sequences() if start == end]
    bounds = forward_bounds(problem, DeltaRecipe(form="chunk", chunk_size=8))
    assert problem.initial_state is not None
    expected = problem.initial_state[empty].double()
    assert torch.equal(bounds["final_state"].reference[empty], expected)
