# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A failing o names the defect whose shape it has (`linattn_verify.compare.error_shapes`)."""

from __future__ import annotations

import pytest
import torch

from linattn_verify.compare.error_shapes import recognised
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.tolerance import forward_bounds

RECIPE = PrecisionRecipe(form="recurrent")


def _problem(varlen: bool, initial_state: bool) -> Problem:
    gen = torch.Generator().manual_seed(7)
    B, T, H, K, V = (1, 9, 2, 4, 3) if varlen else (2, 6, 2, 4, 3)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, H, V, generator=gen)
    g = -torch.rand(B, T, H, generator=gen)
    n = 3 if varlen else B
    S0 = torch.randn(n, H, K, V, generator=gen) if initial_state else None
    cu = torch.tensor([0, 2, 3, 9]) if varlen else None
    return validate_problem(q, k, v, g, initial_state=S0, cu_seqlens=cu)


def _state_before_token(p: Problem) -> torch.Tensor:
    """o_t = s q_t^T (a_t S_{t-1}): the state read before token t's key and value are added."""
    o = torch.zeros_like(p.v)
    for n, b, start, end in p.sequences():
        S = torch.zeros(p.q.shape[2], p.q.shape[3], p.v.shape[3])
        if p.initial_state is not None:
            S = p.initial_state[n].clone()
        for t in range(start, end):
            assert p.g is not None
            S = S * torch.exp(p.g[b, t])[:, None, None]
            o[b, t] = p.scale * torch.einsum("hk,hkv->hv", p.q[b, t], S)
            S = S + torch.einsum("hk,hv->hkv", p.k[b, t], p.v[b, t])
    return o


def _correct(p: Problem) -> torch.Tensor:
    o, _ = float32_reference("recurrent")(
        p.q, p.k, p.v, p.g, scale=p.scale, initial_state=p.initial_state,
        cu_seqlens=p.cu_seqlens,
    )  # fmt: skip
    return o


def _shape(p: Problem, o: torch.Tensor) -> str | None:
    return recognised(p, RECIPE, o, forward_bounds(p, RECIPE).tensors["o"])


@pytest.mark.parametrize(("varlen", "initial_state"), [(False, True), (True, True), (True, False)])
def test_the_state_read_before_the_token_is_named(varlen: bool, initial_state: bool) -> None:
    p = _problem(varlen, initial_state)
    said = _shape(p, _state_before_token(p))
    assert said is not None
    assert "the state read before token t is added" in said


def test_a_wrong_scale_is_named_with_its_factor() -> None:
    p = _problem(False, True)
    said = _shape(p, _correct(p) * 0.625)
    assert said is not None
    assert said.startswith("o is 0.625 times the exact value at every element")


def test_zeros_are_named_and_other_errors_are_not_given_a_shape() -> None:
    p = _problem(False, True)
    said = _shape(p, torch.zeros_like(p.v))
    assert said is not None
    assert said.startswith("o is 0 at every element")
    # An error of no known shape: a constant added, two heads' outputs averaged.
    o = _correct(p)
    assert _shape(p, o + 0.25) is None
    assert _shape(p, o.mean(2, keepdim=True).expand_as(o)) is None
    # A correct o has the shape of no defect either.
    assert _shape(p, o) is None


@pytest.mark.parametrize(("axis", "what"), [(0, "batch rows"), (1, "tokens"), (2, "heads")])
def test_a_permutation_is_named_with_what_moved(axis: int, what: str) -> None:
    p = _problem(False, True)
    said = _shape(p, _correct(p).flip(axis))
    assert said is not None
    assert said.startswith(f"o is the exact o with its {what} permuted, within its bound")
    letter = "bth"[axis]
    assert f"{letter}=0 holds {letter}={p.v.shape[axis] - 1}" in said


def test_value_columns_rolled_are_a_permutation() -> None:
    p = _problem(False, True)
    said = _shape(p, _correct(p).roll(1, dims=3))
    assert said is not None
    assert "value columns permuted" in said
    assert "c=0 holds c=2" in said
