# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The parallel form's fused score maps (taylor2, rebased) against the float64 oracle.

The fused path evaluates the weight κ(s q·k) from the raw K-dim q and k (no F-dim features);
an initial or final state, and favor+, go through `linattn_kernels.lifted.lifted_attention`.
Every comparison is `assert_linattn_close` (the harness's lifted error bounds against the
float64 oracle and float64 autograd of the parallel reference), as tests/kernels/test_parallel.py
does. Interpreter cases stay tiny (T <= 32, K <= 4, V <= 4); T = 32 with BT = 64 means one
query block per sequence, so varlen cases carry the block-table coverage.
"""

from __future__ import annotations

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
    import linattn_kernels.linear_attn.parallel as parallel_module
    from linattn_kernels.linear_attn.parallel import parallel_linear_attention, precision_recipe

pytestmark = [
    pytest.mark.interpret,
    pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning"),
]


@dataclass(frozen=True)
class Setup:
    """One problem, in the fields `kit.draw_inputs` reads."""

    feature_map: str
    B: int = 1
    T: int = 24
    H: int = 2
    K: int = 4
    V: int = 3
    dtype: torch.dtype = torch.float32
    normalize: bool = False
    eps: float = 0.0
    decay: str = "none"  # "none", "mild" (g in [-0.1, 0]) or "steep" (g in [-20, 0])
    initial_state: bool = False
    state_dtype: torch.dtype = torch.float32
    final_state: bool = False
    cu_seqlens: tuple[int, ...] | None = None
    scale: float | None = None
    seed: int = 0


FUSED = {
    "taylor2-plain-B2-fp32": Setup("taylor2", B=2),
    "taylor2-plain-mild-fp32": Setup("taylor2", T=32, decay="mild", seed=1),
    "taylor2-norm-eps0-fp32": Setup("taylor2", normalize=True, seed=2),
    # scale 0.9 with K = 4: |s q·k| reaches ~5, where x² dominates κ.
    "taylor2-norm-eps-steep-scale-fp32": Setup(
        "taylor2", T=30, normalize=True, eps=1e-3, decay="steep", scale=0.9, seed=3
    ),
    "taylor2-norm-eps0-mild-varlen-fp32": Setup(
        "taylor2", T=32, H=1, normalize=True, decay="mild", cu_seqlens=(0, 0, 1, 13, 32), seed=4
    ),
    "rebased-plain-fp32": Setup("rebased", K=3, V=4, seed=5),
    "rebased-plain-mild-varlen-fp32": Setup(
        "rebased", T=29, H=1, decay="mild", cu_seqlens=(0, 11, 11, 29), seed=6
    ),
    "rebased-norm-eps0-mild-B2-fp32": Setup("rebased", B=2, normalize=True, decay="mild", seed=7),
    "rebased-norm-eps-K1-V1-fp32": Setup("rebased", T=9, K=1, V=1, normalize=True, eps=1e-4),
    "taylor2-plain-mild-bf16": Setup("taylor2", dtype=torch.bfloat16, decay="mild", seed=8),
    "taylor2-norm-eps0-varlen-bf16": Setup(
        "taylor2", T=27, H=1, dtype=torch.bfloat16, normalize=True, cu_seqlens=(0, 5, 27), seed=9
    ),
    "rebased-plain-varlen-bf16": Setup(
        "rebased", T=25, H=1, dtype=torch.bfloat16, cu_seqlens=(0, 1, 25), seed=10
    ),
    "rebased-norm-eps-mild-bf16": Setup(
        "rebased", dtype=torch.bfloat16, normalize=True, eps=1e-3, decay="mild", seed=11
    ),
    "taylor2-norm-eps-fp16": Setup("taylor2", dtype=torch.float16, normalize=True, eps=1e-3),
}  # fmt: skip


def _run(kit: Any, kwargs: dict[str, Any], seed: int) -> Any:
    return kit.forward_backward(parallel_linear_attention, kwargs, seed)


def _recipe(dtype: torch.dtype) -> PrecisionRecipe:
    return PrecisionRecipe(**precision_recipe(dtype))  # type: ignore[arg-type]


def _assert_close(kit: Any, kwargs: dict[str, Any], run: Any, dtype: torch.dtype) -> None:
    __tracebackhide__ = True
    kit.assert_close(kwargs, run, _recipe(dtype), "triton/parallel-fused")


def _refuse_lifting(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the fused score-map path called lifted_attention")


@pytest.mark.parametrize("setup", list(FUSED.values()), ids=list(FUSED))
def test_parallel_score_map_fwd_bwd_match_oracle(
    kit: Any, monkeypatch: pytest.MonkeyPatch, setup: Setup
) -> None:
    """o, dq, dk, dv (and dg) of the fused path lie within the harness's lifted bounds."""
    # The fused path must not fall back on lifting (it would pass, more slowly).
    monkeypatch.setattr(parallel_module, "lifted_attention", _refuse_lifting)
    kwargs = kit.draw_inputs(setup)
    run = _run(kit, kwargs, setup.seed)
    assert run.o.dtype == setup.dtype
    assert run.o.shape == (setup.B, setup.T, setup.H, setup.V)
    for name, grad in run.grads.items():
        assert grad.dtype == kwargs[name].dtype, name
    _assert_close(kit, kwargs, run, setup.dtype)


LIFTED = {
    "taylor2-norm-h0-final-mild-fp32": Setup(
        "taylor2", T=20, K=2, normalize=True, decay="mild", initial_state=True, final_state=True
    ),
    "rebased-plain-final-varlen-bf16": Setup(
        "rebased", T=21, H=1, K=3, dtype=torch.bfloat16, final_state=True, cu_seqlens=(0, 8, 21)
    ),
}  # fmt: skip


def _feature_dim(setup: Setup) -> int:
    K = setup.K
    return 1 + K + K * K if setup.feature_map == "taylor2" else K * K


@pytest.mark.parametrize("setup", list(LIFTED.values()), ids=list(LIFTED))
def test_parallel_score_map_with_state_goes_through_lifting(
    kit: Any, monkeypatch: pytest.MonkeyPatch, setup: Setup
) -> None:
    """With an initial or final state (F x V) the call is lifted, and still within bounds."""
    calls: list[str] = []
    lifted_attention = parallel_module.lifted_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["feature_map"])
        return lifted_attention(*args, **kwargs)

    monkeypatch.setattr(parallel_module, "lifted_attention", spy)
    # The state has F rows: draw it with K = F, then q, k with the real K.
    states = kit.draw_inputs(Setup(**{**setup.__dict__, "K": _feature_dim(setup)}))
    kwargs = kit.draw_inputs(setup)
    kwargs["initial_state"] = states["initial_state"]
    run = _run(kit, kwargs, setup.seed)
    assert calls == [setup.feature_map]
    for x in kit.as_list(run.final):
        assert x.shape[2] == _feature_dim(setup)
    _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_favor_goes_through_lifting(kit: Any) -> None:
    """favor+ (not a score map) is lifted, with its projection W, and lies within bounds."""
    setup = Setup("favor+", T=16, K=3, normalize=True)
    kwargs = kit.draw_inputs(setup)
    W = torch.randn(5, setup.K, generator=torch.Generator().manual_seed(3))
    run = kit.forward_backward(parallel_linear_attention, kwargs, 0, feature_weights=W)
    kit.assert_close({**kwargs, "feature_weights": W}, run, _recipe(setup.dtype), "triton/parallel")


def test_parallel_score_map_zero_denominator_row_returns_zero(kit: Any) -> None:
    """rebased with q_t = 0 and eps = 0: κ(0) = 0 for every key, so o_t = 0 and no gradient."""
    setup = Setup("rebased", T=20, H=1, normalize=True, decay="mild")
    kwargs = kit.draw_inputs(setup)
    with torch.no_grad():
        kwargs["q"][:, 7] = 0.0
    run = _run(kit, kwargs, setup.seed)
    assert bool((run.o[:, 7] == 0).all())
    assert bool(run.o[:, 8:].ne(0).all())
    assert bool((run.grads["q"][:, 7] == 0).all())
    assert all(bool(torch.isfinite(d).all()) for d in run.grads.values())
    _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_score_map_check_rejects_an_outer_scale(kit: Any) -> None:
    """The comparison is not vacuous: κ(s q·k) times a stray outer s is rejected."""
    setup = FUSED["taylor2-plain-mild-fp32"]
    kwargs = kit.draw_inputs(setup)
    run = _run(kit, kwargs, setup.seed)
    run.o = run.o * setup.K**-0.5
    with pytest.raises(PropertyViolation):
        _assert_close(kit, kwargs, run, setup.dtype)


def test_parallel_score_map_poison_never_leaks(kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN-poisoned torch.empty buffers change nothing: every element is written before use."""
    setup = FUSED["taylor2-norm-eps0-mild-varlen-fp32"]
    kwargs = kit.draw_inputs(setup)

    def outputs() -> list[torch.Tensor]:
        run = _run(kit, kwargs, setup.seed)
        return [run.o, *run.grads.values()]

    kit.assert_poison_never_leaks(monkeypatch, outputs)


@pytest.mark.parametrize("feature_map", ["taylor2", "rebased", "favor+"])
def test_parallel_lifted_map_refuses_a_vector_gate(feature_map: str) -> None:
    """A vector gate decays key dimensions, which a lifted map does not keep: ValueError on g."""
    q = torch.randn(1, 4, 1, 2)
    W = torch.randn(3, 2) if feature_map == "favor+" else None
    with pytest.raises(ValueError, match=r"vector gate g"):
        parallel_linear_attention(
            q, q, q, -torch.rand(1, 4, 1, 2), feature_map=feature_map, feature_weights=W
        )


@pytest.mark.parametrize("feature_map", ["identity", "elu1", "taylor2", "rebased"])
def test_parallel_feature_weights_only_with_favor(feature_map: str) -> None:
    """feature_weights with any map but favor+ is a ValueError naming it."""
    q = torch.randn(1, 4, 1, 2)
    with pytest.raises(ValueError, match=r"feature_weights"):
        parallel_linear_attention(q, q, q, feature_map=feature_map, feature_weights=q[0, 0])


def test_parallel_favor_needs_feature_weights() -> None:
    """favor+ without its projection W is a ValueError naming feature_weights."""
    q = torch.randn(1, 4, 1, 2)
    with pytest.raises(ValueError, match=r"feature_weights"):
        parallel_linear_attention(q, q, q, feature_map="favor+")
