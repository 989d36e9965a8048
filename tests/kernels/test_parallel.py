# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel Triton kernel against the float64 oracle, forward and backward, plus contracts.

Runs under the Triton interpreter on a CPU: problems stay small (T <= 100, B*H <= 4), but long
enough to cross the 64-token block, so diagonal and off-diagonal key blocks both occur.
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
    # Without CUDA the kernels announce their interpreter fallback once; that is intended here.
    warnings.filterwarnings("ignore", message="linattn_kernels: no CUDA device")
    from linattn_kernels.linear_attn.parallel import (
        blocks,
        parallel_linear_attention,
        precision_recipe,
    )

pytestmark = [
    pytest.mark.interpret,
    pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning"),
]


@dataclass(frozen=True)
class Setup:
    """One problem: shapes, dtype, options, and how decay and initial state are drawn."""

    B: int = 1
    T: int = 70
    H: int = 2
    K: int = 5
    V: int = 19
    dtype: torch.dtype = torch.float32
    feature_map: str = "identity"
    normalize: bool = False
    eps: float = 0.0
    decay: str = "none"  # "none", "mild" (g in [-0.1, 0]) or "steep" (g in [-20, 0])
    initial_state: bool = False
    state_dtype: torch.dtype = torch.float32
    final_state: bool = True
    cu_seqlens: tuple[int, ...] | None = None
    scale: float | None = None
    seed: int = 0


SETUPS = {
    "identity-plain-B2-fp32": Setup(B=2),
    "elu1-norm-eps0-mild-h0-T100-fp32": Setup(
        T=100, K=16, V=16, feature_map="elu1", normalize=True, decay="mild", initial_state=True
    ),
    # g down to -20 per token: |G| passes 88 inside the first 64-token block.
    "relu-norm-eps-steep-h0-scale-fp32": Setup(
        T=70, H=1, K=8, V=12, feature_map="relu", normalize=True, eps=1e-3, decay="steep",
        initial_state=True, scale=0.3,
    ),
    "elu1-norm-eps-varlen-empty-len1-fp32": Setup(
        T=90, H=1, feature_map="elu1", normalize=True, eps=1e-6, decay="mild", initial_state=True,
        cu_seqlens=(0, 0, 1, 40, 90),
    ),
    "relu-plain-steep-varlen-h0-bf16": Setup(
        T=70, H=1, K=8, V=12, dtype=torch.bfloat16, feature_map="relu", decay="steep",
        initial_state=True, state_dtype=torch.bfloat16, cu_seqlens=(0, 3, 3, 70), scale=0.3,
    ),
    "identity-plain-mild-h0-bf16": Setup(
        B=2, T=33, H=1, K=12, V=7, dtype=torch.bfloat16, decay="mild", initial_state=True
    ),
    "elu1-norm-eps-mild-fp16": Setup(
        T=65, K=8, V=12, dtype=torch.float16, feature_map="elu1", normalize=True, eps=1e-4,
        decay="mild", scale=0.7, initial_state=True, state_dtype=torch.float16,
    ),
    "identity-norm-eps-T1-h0-fp32": Setup(
        B=2, T=1, feature_map="identity", normalize=True, eps=0.5, initial_state=True, scale=0.3
    ),
    "elu1-norm-K1-V1-steep-h0-fp32": Setup(
        T=12, K=1, V=1, feature_map="elu1", normalize=True, decay="steep", initial_state=True
    ),
    # BK = 128, BV = 256 (BT = 16): several query blocks and a 2 x 4 grid of state tiles.
    "identity-plain-K100-V130-mild-h0-fp32": Setup(
        T=20, H=1, K=100, V=130, decay="mild", initial_state=True
    ),
    "relu-plain-no-final-state-fp32": Setup(T=9, H=1, feature_map="relu", final_state=False),
}  # fmt: skip


def _run(kit: Any, kwargs: dict[str, Any], seed: int = 0) -> Any:
    return kit.forward_backward(parallel_linear_attention, kwargs, seed)


def _assert_close(kit: Any, kwargs: dict[str, Any], run: Any, dtype: torch.dtype) -> None:
    __tracebackhide__ = True
    recipe = PrecisionRecipe(**precision_recipe(dtype))  # type: ignore[arg-type]
    kit.assert_close(kwargs, run, recipe, "triton/parallel")


@pytest.mark.parametrize("setup", list(SETUPS.values()), ids=list(SETUPS))
def test_parallel_fwd_bwd_matches_oracle(kit: Any, setup: Setup) -> None:
    """Output, final state and every gradient lie within the float64 oracle's error bounds."""
    kwargs = kit.draw_inputs(setup)
    if setup.decay == "steep" and setup.T > 60:
        # The steep cases must drive |G| past fp32 exp's range inside one 64-token block.
        g = kwargs["g"].detach().double()[:, : blocks(setup.K, setup.V).BT]
        assert float(g.sum(1).min()) < -88
    run = _run(kit, kwargs, setup.seed)
    assert run.o.dtype == setup.dtype
    assert run.o.shape == (setup.B, setup.T, setup.H, setup.V)
    for name in ("q", "k", "v", "g"):
        if kwargs[name] is not None:
            assert run.grads[name].dtype == kwargs[name].dtype, name
    for name, x in zip(kit.GRAD_NAMES[4:], kit.as_list(kwargs["initial_state"]), strict=False):
        assert run.grads[name].dtype == x.dtype, name
    for x in kit.as_list(run.final):
        assert x.dtype == torch.float32
    _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_zero_denominator_row_returns_zero(kit: Any) -> None:
    """A normalized row with φ(q_t) = 0 and eps = 0 is 0/0: it returns 0 and passes no gradient."""
    setup = Setup(T=70, H=1, feature_map="relu", normalize=True, decay="mild")
    kwargs = kit.draw_inputs(setup)
    with torch.no_grad():
        kwargs["q"][:, 66] = -kwargs["q"][:, 66].abs() - 0.5
    run = _run(kit, kwargs, setup.seed)
    assert bool((run.o[:, 66] == 0).all())
    assert bool(run.o[:, 67:].ne(0).any())
    assert bool((run.grads["q"][:, 66] == 0).all())
    assert all(bool(torch.isfinite(d).all()) for d in run.grads.values())
    _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_oracle_check_rejects_a_wrong_gradient(kit: Any) -> None:
    """The comparison is not vacuous: a dk off by far more than rounding is rejected."""
    setup = SETUPS["elu1-norm-eps0-mild-h0-T100-fp32"]
    kwargs = kit.draw_inputs(setup)
    run = _run(kit, kwargs, setup.seed)
    run.grads["k"] = run.grads["k"].clone()
    run.grads["k"][0, 80, 1, 3] += 1e-3 * (1 + run.grads["k"].abs().max())
    with pytest.raises(PropertyViolation):
        _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_packed_sequences_equal_separate_runs(kit: Any) -> None:
    """Packing with cu_seqlens gives bit-identical results to running each sequence alone."""
    setup = Setup(T=90, H=1, K=8, V=12, feature_map="elu1", normalize=True, eps=1e-6,
                  decay="mild", initial_state=True, cu_seqlens=(0, 0, 1, 70, 90))  # fmt: skip
    kwargs = kit.draw_inputs(setup)
    packed = _run(kit, kwargs)
    bounds = setup.cu_seqlens
    assert bounds is not None
    S0, z0 = kwargs["initial_state"]
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        if a == b:
            # An empty sequence passes its initial state through and gets its cotangent back.
            assert torch.equal(packed.final[0][n], S0[n].detach())
            assert torch.equal(packed.grads["initial_state"][n], packed.d_final[0][n])
            continue
        part = {**kwargs, "cu_seqlens": None}
        for name in ("q", "k", "v", "g"):
            part[name] = kwargs[name].detach()[:, a:b].clone().requires_grad_()
        part["initial_state"] = (S0.detach()[n : n + 1].clone().requires_grad_(),
                                 z0.detach()[n : n + 1].clone().requires_grad_())  # fmt: skip
        q, k, v, g = (part.pop(name) for name in ("q", "k", "v", "g"))
        o, final = parallel_linear_attention(q, k, v, g, **part)
        assert torch.equal(o.detach(), packed.o[:, a:b])
        assert torch.equal(final[0].detach(), packed.final[0][n : n + 1])
        assert torch.equal(final[1].detach(), packed.final[1][n : n + 1])
        # Gradients too: the same cotangents, sliced, must give the same bits.
        seq_do = packed.do[:, a:b]
        d_final = (packed.d_final[0][n : n + 1], packed.d_final[1][n : n + 1])
        leaves = [q, k, v, g, *part["initial_state"]]
        grads = torch.autograd.grad([o, *final], leaves, [seq_do, *d_final])
        for name, d in zip(kit.GRAD_NAMES, grads, strict=True):
            expected = packed.grads[name]
            expected = expected[:, a:b] if name in ("q", "k", "v", "g") else expected[n : n + 1]
            assert torch.equal(d, expected), name


POISON_SETUP = Setup(
    T=70, H=1, K=5, V=19, feature_map="elu1", normalize=True, eps=1e-6, decay="steep",
    initial_state=True, cu_seqlens=(0, 0, 1, 70),
)  # fmt: skip


def test_parallel_poisoned_allocations_never_leak(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every torch.empty buffer NaN-filled, all outputs are finite and bitwise unchanged."""
    kit.assert_poison_never_leaks(
        monkeypatch, lambda: _run(kit, kit.draw_inputs(POISON_SETUP)).tensors()
    )


def test_parallel_reruns_bit_identical_and_inputs_untouched(kit: Any) -> None:
    """Reruns are bitwise equal, inputs are unchanged, and strided views give the same bits."""
    kit.assert_reruns_identical(
        kit.draw_inputs(POISON_SETUP),
        lambda kwargs: _run(kit, kwargs).tensors(),
        # Every other column of a buffer twice as wide: same values, non-unit last stride.
        lambda x: torch.stack([x, torch.zeros_like(x)], dim=-1)[..., 0],
    )


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"q": torch.randn(4, 2, 8)}, "q"),
        ({"k": torch.randn(1, 4, 2, 7)}, "k"),
        ({"v": torch.randn(1, 5, 2, 6)}, "v"),
        ({"v": torch.randn(1, 4, 2, 6, dtype=torch.float64)}, "float64"),
        ({"feature_map": "gelu"}, "feature_map"),
        ({"eps": 1e-6}, "eps"),
        ({"normalize": True, "eps": -1.0}, "eps"),
        ({"scale": math.nan}, "scale"),
        ({"g": torch.zeros(1, 4, 3)}, "g"),
        ({"initial_state": torch.zeros(1, 2, 6, 8)}, "initial_state"),
        ({"normalize": True, "initial_state": torch.zeros(1, 2, 8, 6)}, "initial_state"),
        ({"cu_seqlens": torch.tensor([0, 5])}, "cu_seqlens"),
        ({"q": torch.randn(1, 4, 2, 257), "k": torch.randn(1, 4, 2, 257)}, "K=257"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_parallel_rejects_bad_arguments(kit: Any, overrides: dict[str, Any], argument: str) -> None:
    """Each malformed argument raises ValueError naming it."""
    with pytest.raises(ValueError, match=argument):
        kit.call_with_defaults(parallel_linear_attention, **overrides)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_parallel_precision_recipe_describes_the_kernel(dtype: torch.dtype) -> None:
    """The declared recipe is a valid PrecisionRecipe for the parallel form in this mode."""
    recipe = PrecisionRecipe(**precision_recipe(dtype))  # type: ignore[arg-type]
    assert recipe.form == "parallel"
    assert recipe.dots_on_path == 2
    assert recipe.decay_scan == "global"
    # Under the interpreter every product is exact fp32 and nothing is cast to a lower dtype.
    assert recipe.dot_precision == "ieee"
    assert recipe.casts_on_path == 0
    with pytest.raises(ValueError, match="dtype"):
        precision_recipe(torch.float64)
