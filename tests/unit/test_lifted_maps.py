# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Lifted feature maps (taylor2, rebased, favor+; issue #17): semantics, oracles, bounds, draws."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.oracles.api import oracle
from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec, problem_specs
from linattn_verify.linear_attn.tolerance import forward_bounds
from linattn_verify.typing import LIFTED_MAPS

B, T, H, K, V = 1, 9, 2, 3, 4


def inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, H, V, generator=gen)
    g = -torch.rand(B, T, H, generator=gen)
    W = torch.randn(5, K, generator=gen)
    return q, k, v, g, W


def weights_for(feature_map: str, W: torch.Tensor) -> torch.Tensor | None:
    return W if feature_map == "favor+" else None


def explicit(feature_map: str, normalize: bool, eps: float = 0.0) -> torch.Tensor:
    """The function written out from its weights: Σ_j w_tj v_j (/ Σ_j w_tj + eps), in float64."""
    q, k, v, g, W = (x.double() for x in inputs())
    s = K**-0.5
    G = torch.cumsum(g, 1).permute(0, 2, 1)  # [B, H, T]
    decay = torch.exp(G[..., :, None] - G[..., None, :]).tril()
    if feature_map == "favor+":

        def phi(x: torch.Tensor) -> torch.Tensor:
            return torch.exp(x @ W.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(5)

        weight = s * torch.einsum("bthf,bshf->bhts", phi(q), phi(k))
    elif feature_map == "softmax":
        # φ(x)_i = e^{x_i} / Σ_j e^{x_j}, written out (no max subtracted: these inputs are small).
        def phi(x: torch.Tensor) -> torch.Tensor:
            return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)

        weight = s * torch.einsum("bthf,bshf->bhts", phi(q), phi(k))
    elif feature_map == "exp":
        weight = s * torch.einsum("bthf,bshf->bhts", torch.exp(q), torch.exp(k))
    else:
        x = s * torch.einsum("bthk,bshk->bhts", q, k)
        weight = 1 + x + x * x / 2 if feature_map == "taylor2" else x * x
    A = weight * decay
    o = torch.einsum("bhts,bshv->bthv", A, v)
    if normalize:
        o = o / (A.sum(-1).permute(0, 2, 1)[..., None] + eps)
    return o


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("feature_map", [*LIFTED_MAPS, "exp"])
def test_every_oracle_computes_the_weights_of_the_literature(
    feature_map: str, normalize: bool
) -> None:
    # κ(s q·k) = 1 + x + x²/2 (Based), x² (ReBased), s φ_W(q)·φ_W(k) (Performer), all three
    # oracles (the float64 one, double-double, mpmath) to float64 accuracy.
    q, k, v, g, W = inputs()
    eps = 1e-3 if normalize else 0.0
    want = explicit(feature_map, normalize, eps)
    for method in ("float64", "double-double", "mpmath"):
        o, _ = oracle(
            q, k, v, g, feature_map=feature_map, normalize=normalize, eps=eps,
            feature_weights=weights_for(feature_map, W), method=method,
        )  # fmt: skip
        assert torch.allclose(o, want, rtol=1e-12, atol=1e-14), method


def test_the_stabilised_favor_queries_leave_the_normalized_output_unchanged() -> None:
    q, k, v, g, W = inputs()
    big = 20 * q / q.norm(dim=-1, keepdim=True)  # every plain feature of a query underflows fp32
    o, _ = oracle(big, k, v, g, feature_map="favor+", normalize=True, feature_weights=W)

    def plain_features(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x @ W.to(x.dtype).T - 0.5 * (x * x).sum(-1, keepdim=True))

    # float64 still holds the plain features (about e^-200 is normal there): the same o.
    A = K**-0.5 * torch.einsum(
        "bthf,bshf->bhts", plain_features(big.double()), plain_features(k.double())
    )
    G = torch.cumsum(g.double(), 1).permute(0, 2, 1)
    A = A * torch.exp(G[..., :, None] - G[..., None, :]).tril()
    plain = torch.einsum("bhts,bshv->bthv", A, v.double()) / A.sum(-1).permute(0, 2, 1)[..., None]
    assert torch.allclose(o, plain, rtol=1e-12)
    assert bool((plain_features(big) == 0).all()), "a case where fp32 features underflow"


def test_lifted_problems_refuse_what_does_not_belong_to_them() -> None:
    q, k, v, g, W = inputs()
    with pytest.raises(InvalidArgument, match="feature_weights"):
        validate_problem(q, k, v, feature_map="favor+")
    with pytest.raises(InvalidArgument, match="feature_weights"):
        validate_problem(q, k, v, feature_map="taylor2", feature_weights=W)
    with pytest.raises(InvalidArgument, match=r"shape \[m >= 1, K=3\]"):
        validate_problem(q, k, v, feature_map="favor+", feature_weights=W[:, :2])
    with pytest.raises(InvalidArgument, match="vector gate"):
        validate_problem(q, k, v, g[..., None].expand(B, T, H, K), feature_map="rebased")
    with pytest.raises(InvalidArgument, match=r"initial_state of shape \(1, 2, 13, 4\)"):
        validate_problem(q, k, v, feature_map="taylor2", initial_state=torch.zeros(1, H, K, V))


@pytest.mark.parametrize("form", ["parallel", "chunk", "recurrent"])
@pytest.mark.parametrize("feature_map", LIFTED_MAPS)
def test_float32_references_stay_within_the_lifted_bound(form: str, feature_map: str) -> None:
    q, k, v, g, W = inputs(1)
    for dtype in (torch.float32, torch.bfloat16):
        args = [x.to(dtype) for x in (q, k, v)]
        kw = {
            "feature_map": feature_map, "normalize": True, "output_final_state": True,
            "feature_weights": weights_for(feature_map, W),
        }  # fmt: skip
        o, (S, _) = float32_reference(form)(*args, g, **kw)
        bounds = forward_bounds(validate_problem(*args, g, **kw), RECIPES[form]).tensors
        for name, actual in (("o", o), ("final_state", S)):
            tb = bounds[name]
            err = (actual.double() - tb.reference).abs()
            assert bool((err <= tb.bound).all()), (name, dtype, float((err / tb.bound).max()))


@settings(max_examples=40, deadline=None)
@given(spec=problem_specs(feature_maps=LIFTED_MAPS, max_seq_len=8, max_feature_dim=21))
def test_lifted_specs_draw_what_their_map_needs(spec: ProblemSpec) -> None:
    problem = spec.build()
    assert problem.feature_dim <= 21
    assert problem.g is None or problem.g.ndim == 3, "no vector gate with a lifted map"
    assert (problem.feature_weights is not None) == (spec.feature_map == "favor+")
    assert spec.values not in ("near_max", "underflowing_features")


def test_score_cancellation_puts_the_scores_at_the_polynomials_minimum() -> None:
    spec = ProblemSpec(
        B=1, T=6, H=1, K=4, V=2, dtype="float32", feature_map="taylor2", normalize=True,
        eps=0.0, scale=None, values="score_cancellation", decay="none", initial_state=False,
        output_final_state=False, segments=None, seed=3,
    )  # fmt: skip
    p = spec.build().to(torch.float64)
    x = p.scale * torch.einsum("bthk,bshk->bhts", p.q, p.k)
    a = p.scale * torch.einsum("bthk,bshk->bhts", p.q.abs(), p.k.abs())
    kappa = 1 + x + x * x / 2  # = (1 + (1 + x)²) / 2, smallest (1/2) at x = -1
    assert float(kappa.max()) <= 1, "x = s q·k near -1, where κ is smallest"
    assert float((1 + a + a * a / 2).min()) > 20, "while its terms are large: cancellation"
