# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The error bound is sharp: small planted defects fail, while their correct twins pass.

Each defect stays under a typical hand-picked tolerance: the normwise error ratio
rmse(x̂ - x) / rmse(x) < 0.005 that flash-linear-attention's own tests accept. The condition-aware
bound still flags it, because it judges every element against its own rounding budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from linattn_verify.compare import check_against_oracle
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.tolerance import forward_bounds

HAND_PICKED_RATIO = 0.005
"""The strawman: flash-linear-attention's tests pass when rmse(x̂ - x) / rmse(x) is below this."""

RECURRENT = PrecisionRecipe(form="recurrent", dots_on_path=0, decay_scan="per_step")
PARALLEL = PrecisionRecipe(form="parallel", dots_on_path=0, decay_scan="global")


def _recurrent_fp32(p: Problem, state_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A float32 recurrent kernel whose state is stored in ``state_dtype`` between steps."""
    q = apply_feature_map(p.q.float(), p.feature_map)
    k = apply_feature_map(p.k.float(), p.feature_map)
    v = p.v.float()
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1])
    z = torch.zeros(B, H, K)
    out = []
    for t in range(T):
        a = torch.exp(p.g[:, t].float()) if p.g is not None else torch.ones(B, H)
        S = a[..., None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        z = a[..., None] * z + k[:, t]
        S = S.to(state_dtype).float()
        num = p.scale * (q[:, t, :, :, None] * S).sum(-2)
        if p.normalize:
            num = num / (p.scale * (q[:, t] * z).sum(-1, keepdim=True) + p.eps)
        out.append(num)
    return torch.stack(out, dim=1)


def _parallel_fp32(
    p: Problem, score_dtype: torch.dtype = torch.float32, eps_used: float | None = None
) -> torch.Tensor:
    """A float32 parallel kernel that rounds the scores P to ``score_dtype`` before P @ V."""
    q = apply_feature_map(p.q.float(), p.feature_map).transpose(1, 2)
    k = apply_feature_map(p.k.float(), p.feature_map).transpose(1, 2)
    v = p.v.float().transpose(1, 2)
    T = q.shape[2]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    P = (p.scale * q @ k.transpose(-1, -2)).masked_fill(~mask, 0.0)
    P = P.to(score_dtype).float()
    o = P @ v
    if p.normalize:
        o = o / (P.sum(-1, keepdim=True) + (p.eps if eps_used is None else eps_used))
    return o.transpose(1, 2)


def _inputs(
    seed: int, T: int = 48, H: int = 2, K: int = 16, V: int = 16, shift: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, H, K, generator=gen) + shift
    k = torch.randn(1, T, H, K, generator=gen) + shift
    v = torch.rand(1, T, H, V, generator=gen) + 0.5
    return q, k, v


def _normwise_ratio(actual: torch.Tensor, reference: torch.Tensor) -> float:
    diff = actual.double() - reference
    return float(diff.square().mean().sqrt() / reference.square().mean().sqrt())


def _state_in_bf16(
    seed: int,
) -> tuple[
    Problem, Callable[[Problem], torch.Tensor], Callable[[Problem], torch.Tensor], PrecisionRecipe
]:
    q, k, v = _inputs(seed)
    g = -0.05 * torch.rand(1, 48, 2, generator=torch.Generator().manual_seed(seed))
    p = validate_problem(q, k, v, g, feature_map="elu1")
    return p, _recurrent_fp32, lambda p: _recurrent_fp32(p, torch.bfloat16), RECURRENT


def _scores_in_bf16(
    seed: int,
) -> tuple[
    Problem, Callable[[Problem], torch.Tensor], Callable[[Problem], torch.Tensor], PrecisionRecipe
]:
    q, k, v = _inputs(seed)
    p = validate_problem(q, k, v, feature_map="elu1", normalize=True, eps=1e-6)
    return p, _parallel_fp32, lambda p: _parallel_fp32(p, torch.bfloat16), PARALLEL


def _wrong_eps(
    seed: int,
) -> tuple[
    Problem, Callable[[Problem], torch.Tensor], Callable[[Problem], torch.Tensor], PrecisionRecipe
]:
    # Features near exp(-2.3) make the first denominators ~1e-1: eps = 1e-4 moves them by ~1e-3
    # relative, while the outputs (weighted means of v in [0.5, 1.5]) hardly move normwise.
    q, k, v = _inputs(seed, shift=-2.3)
    p = validate_problem(q, k, v, feature_map="elu1", normalize=True, eps=0.0)
    return p, _parallel_fp32, lambda p: _parallel_fp32(p, eps_used=1e-4), PARALLEL


def _one_row_off(
    seed: int,
) -> tuple[
    Problem, Callable[[Problem], torch.Tensor], Callable[[Problem], torch.Tensor], PrecisionRecipe
]:
    q, k, v = _inputs(seed)
    p = validate_problem(q, k, v, feature_map="elu1", normalize=True, eps=1e-6)

    def defective(p: Problem) -> torch.Tensor:
        o = _parallel_fp32(p)
        o[0, 17, 1] *= 1 + 1e-4
        return o

    return p, _parallel_fp32, defective, PARALLEL


DEFECTS = {
    "state kept in bf16": _state_in_bf16,
    "scores rounded to bf16": _scores_in_bf16,
    "eps 1e-4 instead of 0": _wrong_eps,
    "one row off by 1e-4": _one_row_off,
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_planted_defect_is_flagged_and_its_twin_passes(defect: str, seed: int) -> None:
    problem, correct, defective, recipe = DEFECTS[defect](seed)
    good = check_against_oracle(problem, correct(problem), recipe=recipe, name="twin")
    assert good.ok, good.report()
    bad_o = defective(problem)
    eps = recipe.effective_eps(problem.eps, problem.q.dtype)
    exact = forward_bounds(replace(problem, eps=eps), recipe)
    # The strawman tolerance misses the defect ...
    assert _normwise_ratio(bad_o, exact.tensors["o"].reference) < HAND_PICKED_RATIO
    # ... the error model does not.
    verdict = check_against_oracle(problem, bad_o, recipe=recipe, name=defect)
    assert not verdict.ok, verdict.report()
