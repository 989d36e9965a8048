# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The recurrent Triton kernel against the float64 oracle, forward and backward, plus contracts.

Runs under the Triton interpreter on a CPU, so every problem is tiny (T <= 16, B*H <= 4).
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from linattn_verify.compare import assert_linattn_close
from linattn_verify.errors import PropertyViolation
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import validate_problem

with warnings.catch_warnings():
    # The CPU fallback announces itself once at import; the tests mean to run interpreted.
    warnings.filterwarnings("ignore", message="linattn_kernels: no CUDA device")
    from linattn_kernels.linear_attn.recurrent import (
        precision_recipe,
        recurrent_linear_attention,
    )

pytestmark = [
    pytest.mark.interpret,
    pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning"),
]


@dataclass(frozen=True)
class Case:
    """One problem: shapes, dtype, options and how the decay and states are drawn."""

    B: int = 1
    T: int = 9
    H: int = 2
    K: int = 5
    V: int = 19
    dtype: torch.dtype = torch.float32
    feature_map: str = "identity"
    normalize: bool = False
    eps: float = 0.0
    decay: str = "none"  # "none", "mild" (g in [-0.1, 0]) or "steep" (g in [-20, 0], g = 0 too)
    initial_state: bool = False
    state_dtype: torch.dtype = torch.float32
    final_state: bool = True
    cu_seqlens: tuple[int, ...] | None = None
    scale: float | None = None
    seed: int = 0


CASES = {
    "identity-plain-fp32": Case(B=2, T=7),
    "elu1-norm-eps0-mild-h0-fp32": Case(
        T=13, K=16, V=16, feature_map="elu1", normalize=True, decay="mild", initial_state=True
    ),
    # V = 80 splits into two V-blocks; the key-sum terms must be added exactly once.
    "relu-norm-eps-steep-h0-2vblocks-fp32": Case(
        T=10, K=4, V=80, H=1, feature_map="relu", normalize=True, eps=1e-3, decay="steep",
        initial_state=True,
    ),
    "elu1-norm-eps-varlen-empty-len1-fp32": Case(
        T=12, feature_map="elu1", normalize=True, eps=1e-6, decay="mild", initial_state=True,
        cu_seqlens=(0, 0, 1, 5, 12),
    ),
    "relu-plain-steep-varlen-bf16": Case(
        T=11, H=1, K=8, V=12, dtype=torch.bfloat16, feature_map="relu", decay="steep",
        initial_state=True, state_dtype=torch.bfloat16, cu_seqlens=(0, 4, 4, 11), scale=0.3,
    ),
    "elu1-plain-mild-h0-bf16": Case(
        B=2, T=10, H=1, K=12, V=7, dtype=torch.bfloat16, feature_map="elu1", decay="mild",
        initial_state=True,
    ),
    "elu1-norm-eps-mild-nofinal-fp16": Case(
        T=11, K=8, V=12, dtype=torch.float16, feature_map="elu1", normalize=True, eps=1e-4,
        decay="mild", scale=0.7, final_state=False,
    ),
    "identity-norm-eps-T1-h0-fp32": Case(
        T=1, B=2, feature_map="identity", normalize=True, eps=0.5, initial_state=True, scale=0.3
    ),
    "elu1-norm-K1-V1-steep-fp32": Case(
        T=12, K=1, V=1, feature_map="elu1", normalize=True, decay="steep", initial_state=True
    ),
    "identity-plain-K256-V256-mild-h0-fp32": Case(
        T=3, H=1, K=256, V=256, decay="mild", initial_state=True
    ),
}  # fmt: skip


def _inputs(case: Case) -> dict[str, Any]:
    """Draw the kernel's inputs for ``case`` (leaves that require grad where differentiable)."""
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H, K, V = case.B, case.T, case.H, case.K, case.V

    def normal(*shape: int, dtype: torch.dtype = case.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype).requires_grad_()

    g = None
    if case.decay != "none":
        width = 0.1 if case.decay == "mild" else 20.0
        g_value = -width * torch.rand(B, T, H, generator=gen)
        if case.decay == "steep":
            # A gate of exactly 0 and one at the floor: both were bug sources (BUG_CLASSES.md).
            g_value[:, 0] = 0.0
            g_value[:, -1] = -width
        g = g_value.to(case.dtype).requires_grad_()
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    initial_state: Any = None
    if case.initial_state:
        S0 = normal(N, H, K, V, dtype=case.state_dtype)
        if case.normalize:
            z0 = torch.rand(N, H, K, generator=gen).to(case.state_dtype).requires_grad_()
            initial_state = (S0, z0)
        else:
            initial_state = S0
    cu = None if case.cu_seqlens is None else torch.tensor(case.cu_seqlens, dtype=torch.int32)
    return {
        "q": normal(B, T, H, K),
        "k": normal(B, T, H, K),
        "v": normal(B, T, H, V),
        "g": g,
        "scale": case.scale,
        "normalize": case.normalize,
        "eps": case.eps,
        "feature_map": case.feature_map,
        "initial_state": initial_state,
        "output_final_state": case.final_state,
        "cu_seqlens": cu,
    }


def _states(x: Any) -> list[torch.Tensor]:
    if x is None:
        return []
    return list(x) if isinstance(x, tuple) else [x]


def _forward_backward(
    kwargs: dict[str, Any], seed: int
) -> tuple[torch.Tensor, Any, dict[str, torch.Tensor], torch.Tensor, Any]:
    """Run the kernel and its backward with random non-zero cotangents for o and the state."""
    q, k, v, g = kwargs["q"], kwargs["k"], kwargs["v"], kwargs["g"]
    options = {key: val for key, val in kwargs.items() if key not in ("q", "k", "v", "g")}
    o, final = recurrent_linear_attention(q, k, v, g, **options)
    gen = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(o.shape, generator=gen).to(o.dtype)
    finals = _states(final)
    d_finals = [torch.randn(f.shape, generator=gen).to(f.dtype) for f in finals]
    names = ["q", "k", "v", "g", "initial_state", "initial_key_sum"]
    leaves = [q, k, v, g, *_states(kwargs["initial_state"])]
    pairs = [(n, x) for n, x in zip(names, leaves, strict=False) if x is not None]
    grads = torch.autograd.grad([o, *finals], [x for _, x in pairs], [do, *d_finals])
    d_final: Any = None
    if d_finals:
        d_final = tuple(d_finals) if len(d_finals) == 2 else d_finals[0]
    if isinstance(final, tuple):
        final = tuple(x.detach() for x in final)
    elif final is not None:
        final = final.detach()
    return o.detach(), final, {n: d for (n, _), d in zip(pairs, grads, strict=True)}, do, d_final


def _problem(kwargs: dict[str, Any]) -> Any:
    detached = {
        key: (val.detach() if isinstance(val, torch.Tensor) and val.is_floating_point() else val)
        for key, val in kwargs.items()
    }
    if isinstance(kwargs["initial_state"], tuple):
        detached["initial_state"] = tuple(x.detach() for x in kwargs["initial_state"])
    q, k, v, g = (detached.pop(name) for name in ("q", "k", "v", "g"))
    return validate_problem(q, k, v, g, **detached)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_recurrent_fwd_bwd_matches_oracle(case: Case) -> None:
    """Outputs, final state and every gradient lie within the float64 oracle's bounds."""
    kwargs = _inputs(case)
    if case.decay == "steep":
        # Steep cases are meant to drive the decay within one sequence past fp32 exp's range.
        g = kwargs["g"].detach().double()
        bounds = case.cu_seqlens or (0, case.T)
        assert (
            min(float(g[:, a:b].sum(1).min()) for a, b in itertools.pairwise(bounds) if b > a) < -88
        )
    o, final, grads, do, d_final = _forward_backward(kwargs, case.seed)
    assert o.dtype == case.dtype
    assert o.shape == (case.B, case.T, case.H, case.V)
    for name, x in (("q", kwargs["q"]), ("k", kwargs["k"]), ("v", kwargs["v"])):
        assert grads[name].dtype == x.dtype, name
    if kwargs["g"] is not None:
        assert grads["g"].dtype == kwargs["g"].dtype
    if case.initial_state:
        assert grads["initial_state"].dtype == case.state_dtype
    assert_linattn_close(
        _problem(kwargs),
        o,
        final,
        recipe=PrecisionRecipe(**precision_recipe(case.dtype)),  # type: ignore[arg-type]
        grads=grads,
        do=do,
        d_final_state=d_final,
        name="triton/recurrent",
    )


def test_recurrent_zero_denominator_row_returns_zero() -> None:
    """A normalized row with φ(q_t) = 0 and eps = 0 is 0/0: it returns 0, gradients stay finite."""
    case = Case(T=6, H=1, feature_map="relu", normalize=True, decay="mild")
    kwargs = _inputs(case)
    with torch.no_grad():
        kwargs["q"][:, 2] = -kwargs["q"][:, 2].abs() - 0.5
    o, final, grads, do, d_final = _forward_backward(kwargs, case.seed)
    assert bool((o[:, 2] == 0).all())
    assert bool(o[:, 3:].ne(0).any())
    assert all(bool(torch.isfinite(d).all()) for d in grads.values())
    assert_linattn_close(
        _problem(kwargs),
        o,
        final,
        recipe=PrecisionRecipe(**precision_recipe(case.dtype)),  # type: ignore[arg-type]
        grads=grads,
        do=do,
        d_final_state=d_final,
        name="triton/recurrent",
    )


def test_recurrent_rejects_wrong_gradient() -> None:
    """The oracle comparison can fail: a perturbed dk (by far more than rounding) is rejected."""
    case = CASES["elu1-norm-eps0-mild-h0-fp32"]
    kwargs = _inputs(case)
    o, final, grads, do, d_final = _forward_backward(kwargs, case.seed)
    grads["k"] = grads["k"].clone()
    grads["k"][0, 4, 1, 3] += 1e-3 * (1 + grads["k"].abs().max())
    with pytest.raises(PropertyViolation):
        assert_linattn_close(
            _problem(kwargs), o, final,
            recipe=PrecisionRecipe(**precision_recipe(case.dtype)),  # type: ignore[arg-type]
            grads=grads, do=do, d_final_state=d_final, name="triton/recurrent",
        )  # fmt: skip


def _all_outputs(kwargs: dict[str, Any], seed: int) -> list[torch.Tensor]:
    o, final, grads, _, _ = _forward_backward(kwargs, seed)
    return [o, *_states(final), *grads.values()]


POISON_CASE = Case(
    T=9, K=5, V=80, H=1, feature_map="elu1", normalize=True, eps=1e-6, decay="steep",
    initial_state=True, cu_seqlens=(0, 0, 1, 9),
)  # fmt: skip


def test_recurrent_poisoned_allocations_never_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every torch.empty buffer NaN-filled, all outputs are finite and unchanged."""
    clean = _all_outputs(_inputs(POISON_CASE), POISON_CASE.seed)
    empty = torch.empty

    def poisoned(*args: Any, **kwargs: Any) -> torch.Tensor:
        x = empty(*args, **kwargs)
        if x.is_floating_point():
            x.fill_(math.nan)
        return x

    monkeypatch.setattr(torch, "empty", poisoned)
    assert bool(torch.isnan(torch.empty(2)).all())
    dirty = _all_outputs(_inputs(POISON_CASE), POISON_CASE.seed)
    for a, b in zip(clean, dirty, strict=True):
        assert bool(torch.isfinite(b).all())
        assert torch.equal(a, b)


def test_recurrent_reruns_bit_identical_and_inputs_untouched() -> None:
    """Two runs give bitwise equal results; inputs are unchanged; strided views agree bitwise."""
    kwargs = _inputs(POISON_CASE)
    before = {k: v.detach().clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    states_before = [x.detach().clone() for x in kwargs["initial_state"]]
    first = _all_outputs(kwargs, 0)
    second = _all_outputs(kwargs, 0)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    for name, x in before.items():
        assert torch.equal(kwargs[name].detach(), x), name
    for x, y in zip(kwargs["initial_state"], states_before, strict=True):
        assert torch.equal(x.detach(), y)
    # The same q, k, v as non-contiguous views: slices of a buffer twice as wide.
    strided = dict(kwargs)
    for name in ("q", "k", "v"):
        x = kwargs[name].detach()
        view = torch.cat([x, torch.zeros_like(x)], dim=-1)[..., : x.shape[-1]].requires_grad_()
        assert not view.is_contiguous()
        strided[name] = view
    for a, b in zip(first, _all_outputs(strided, 0), strict=True):
        assert torch.equal(a, b)


def _call(**overrides: Any) -> None:
    args: dict[str, Any] = {
        "q": torch.randn(1, 4, 2, 8),
        "k": torch.randn(1, 4, 2, 8),
        "v": torch.randn(1, 4, 2, 6),
    }
    args.update(overrides)
    recurrent_linear_attention(**args)


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"q": torch.randn(4, 2, 8)}, "q"),
        ({"v": torch.randn(1, 5, 2, 6)}, "v"),
        ({"feature_map": "gelu"}, "feature_map"),
        ({"eps": 1e-6}, "eps"),
        ({"normalize": True, "eps": -1.0}, "eps"),
        ({"scale": math.inf}, "scale"),
        ({"g": torch.zeros(1, 4, 3)}, "g"),
        ({"initial_state": torch.zeros(1, 2, 6, 8)}, "initial_state"),
        ({"normalize": True, "initial_state": torch.zeros(1, 2, 8, 6)}, "initial_state"),
        ({"cu_seqlens": torch.tensor([0, 5])}, "cu_seqlens"),
        ({"q": torch.randn(1, 4, 2, 300), "k": torch.randn(1, 4, 2, 300)}, "K=300"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_recurrent_rejects_bad_arguments(overrides: dict[str, Any], argument: str) -> None:
    """Each malformed argument raises ValueError naming it."""
    with pytest.raises(ValueError, match=argument):
        _call(**overrides)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_recurrent_precision_recipe_is_a_valid_recipe(dtype: torch.dtype) -> None:
    """The declared recipe builds a PrecisionRecipe describing an all-fp32 per-step recurrence."""
    recipe = PrecisionRecipe(**precision_recipe(dtype))  # type: ignore[arg-type]
    assert recipe.form == "recurrent"
    assert recipe.dots_on_path == 0
    assert recipe.casts_on_path == 0
    assert recipe.decay_scan == "per_step"
    with pytest.raises(ValueError, match="dtype"):
        precision_recipe(torch.float64)
