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

from linattn_verify.errors import PropertyViolation
from linattn_verify.linear_attn.recipe import PrecisionRecipe

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


def _run(kit: Any, kwargs: dict[str, Any], seed: int) -> Any:
    return kit.forward_backward(recurrent_linear_attention, kwargs, seed)


def _assert_close(kit: Any, kwargs: dict[str, Any], run: Any, dtype: torch.dtype) -> None:
    __tracebackhide__ = True
    recipe = PrecisionRecipe(**precision_recipe(dtype))  # type: ignore[arg-type]
    kit.assert_close(kwargs, run, recipe, "triton/recurrent")


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_recurrent_fwd_bwd_matches_oracle(kit: Any, case: Case) -> None:
    """Outputs, final state and every gradient lie within the float64 oracle's bounds."""
    kwargs = kit.draw_inputs(case)
    if case.decay == "steep":
        # Steep cases are meant to drive the decay within one sequence past fp32 exp's range.
        g = kwargs["g"].detach().double()
        bounds = case.cu_seqlens or (0, case.T)
        assert (
            min(float(g[:, a:b].sum(1).min()) for a, b in itertools.pairwise(bounds) if b > a) < -88
        )
    run = _run(kit, kwargs, case.seed)
    o, grads = run.o, run.grads
    assert o.dtype == case.dtype
    assert o.shape == (case.B, case.T, case.H, case.V)
    for name, x in (("q", kwargs["q"]), ("k", kwargs["k"]), ("v", kwargs["v"])):
        assert grads[name].dtype == x.dtype, name
    if kwargs["g"] is not None:
        assert grads["g"].dtype == kwargs["g"].dtype
    if case.initial_state:
        assert grads["initial_state"].dtype == case.state_dtype
    _assert_close(kit, kwargs, run, case.dtype)


def test_recurrent_zero_denominator_row_returns_zero(kit: Any) -> None:
    """A normalized row with φ(q_t) = 0 and eps = 0 is 0/0: it returns 0, gradients stay finite."""
    case = Case(T=6, H=1, feature_map="relu", normalize=True, decay="mild")
    kwargs = kit.draw_inputs(case)
    with torch.no_grad():
        kwargs["q"][:, 2] = -kwargs["q"][:, 2].abs() - 0.5
    run = _run(kit, kwargs, case.seed)
    o, grads = run.o, run.grads
    assert bool((o[:, 2] == 0).all())
    assert bool(o[:, 3:].ne(0).any())
    assert all(bool(torch.isfinite(d).all()) for d in grads.values())
    _assert_close(kit, kwargs, run, case.dtype)


def test_recurrent_rejects_wrong_gradient(kit: Any) -> None:
    """The oracle comparison can fail: a perturbed dk (by far more than rounding) is rejected."""
    case = CASES["elu1-norm-eps0-mild-h0-fp32"]
    kwargs = kit.draw_inputs(case)
    run = _run(kit, kwargs, case.seed)
    run.grads["k"] = run.grads["k"].clone()
    run.grads["k"][0, 4, 1, 3] += 1e-3 * (1 + run.grads["k"].abs().max())
    with pytest.raises(PropertyViolation):
        _assert_close(kit, kwargs, run, case.dtype)


POISON_CASE = Case(
    T=9, K=5, V=80, H=1, feature_map="elu1", normalize=True, eps=1e-6, decay="steep",
    initial_state=True, cu_seqlens=(0, 0, 1, 9),
)  # fmt: skip


def test_recurrent_poisoned_allocations_never_leak(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every torch.empty buffer NaN-filled, all outputs are finite and unchanged."""
    kit.assert_poison_never_leaks(
        monkeypatch, lambda: _run(kit, kit.draw_inputs(POISON_CASE), POISON_CASE.seed).tensors()
    )


def test_recurrent_reruns_bit_identical_and_inputs_untouched(kit: Any) -> None:
    """Two runs give bitwise equal results; inputs are unchanged; strided views agree bitwise."""
    kit.assert_reruns_identical(
        kit.draw_inputs(POISON_CASE),
        lambda kwargs: _run(kit, kwargs, 0).tensors(),
        # The same q, k, v as non-contiguous views: slices of a buffer twice as wide.
        lambda x: torch.cat([x, torch.zeros_like(x)], dim=-1)[..., : x.shape[-1]],
    )


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
def test_recurrent_rejects_bad_arguments(
    kit: Any, overrides: dict[str, Any], argument: str
) -> None:
    """Each malformed argument raises ValueError naming it."""
    with pytest.raises(ValueError, match=argument):
        kit.call_with_defaults(recurrent_linear_attention, **overrides)


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
