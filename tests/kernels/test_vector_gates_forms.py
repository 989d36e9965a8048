# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Vector gates (g ``[B, T, H, K]``) in the three Triton forms against the float64 oracle.

Every case runs forward and backward (q, k, v, g, S_0, z_0) and is judged by
`assert_linattn_close` with the form's own `precision_recipe`: the per-element bounds of
docs/error-model.md §2.7 and §5.1. Gates come from `VECTOR_DECAY_FAMILIES`, including
``overflowing_some`` (|G| > 88 inside one chunk in some dimensions only) and ``one_steep``.
Problems are small: the kernels run under the Triton interpreter.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from linattn_verify.compare import assert_linattn_close
from linattn_verify.compare.pairwise import Side, compare_pair
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.strategies._tensors import VECTOR_DECAY_FAMILIES, decay_values
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from linattn_kernels.linear_attn import FORMS, precision_recipes

pytestmark = [
    pytest.mark.interpret,
    pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning"),
]

FORM_NAMES = ("recurrent", "chunk", "parallel")


@dataclass(frozen=True)
class Case:
    """One vector-gate problem; `make` draws its tensors deterministically from ``seed``."""

    T: int = 37
    B: int = 1
    H: int = 2
    K: int = 20
    V: int = 24
    dtype: torch.dtype = torch.float32
    family: str = "mixed"
    feature_map: str = "identity"
    normalize: bool = False
    eps: float = 0.0
    initial_state: bool = False
    final_state: bool = False
    cu_seqlens: tuple[int, ...] | None = None
    chunk_size: int = 16
    scale: float | None = None
    seed: int = 0

    @property
    def decay(self) -> str:
        """The family, under the name `kit.kernel_kwargs` does not read (kept for `describe`)."""
        return self.family


def make(case: Case, kit: Any, *, scalar: bool = False) -> dict[str, Any]:
    """The kernel's keyword arguments for ``case``: leaves q, k, v, g (and S_0, z_0).

    With ``scalar`` the gate is drawn per token and head and repeated over K instead.
    """
    assert case.family in VECTOR_DECAY_FAMILIES
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H, K, V = case.B, case.T, case.H, case.K, case.V
    N = B if case.cu_seqlens is None else len(case.cu_seqlens) - 1
    if scalar:
        g3 = decay_values(case.family, (B, T, H), gen)
        assert g3 is not None
        g = g3[..., None].expand(B, T, H, K).contiguous()
    else:
        g4 = decay_values(case.family, (B, T, H, K), gen)
        assert g4 is not None
        g = g4
    q = torch.randn(B, T, H, K, generator=gen).to(case.dtype)
    k = torch.randn(B, T, H, K, generator=gen).to(case.dtype)
    v = torch.randn(B, T, H, V, generator=gen).to(case.dtype)
    state: Any = None
    if case.initial_state:
        S0 = torch.randn(N, H, K, V, generator=gen)
        state = (S0, torch.rand(N, H, K, generator=gen)) if case.normalize else S0
    leaves = [q, k, v, g, *(state if isinstance(state, tuple) else [state] * (state is not None))]
    for x in leaves:
        x.requires_grad_(True)
    return kit.kernel_kwargs(case, q, k, v, g, state)


def recipe_of(form: str, case: Case) -> PrecisionRecipe:
    extra = {"chunk_size": case.chunk_size} if form == "chunk" else {}
    return PrecisionRecipe(**precision_recipes[form](case.dtype, **extra))  # type: ignore[arg-type]


def run_and_check(form: str, case: Case, kit: Any, kwargs: dict[str, Any]) -> Any:
    """Forward and backward through ``form``; assert everything lies within the oracle's bounds."""
    __tracebackhide__ = True
    extra = {"chunk_size": case.chunk_size} if form == "chunk" else {}
    run = kit.forward_backward(FORMS[form], kwargs, seed=case.seed, **extra)
    for name, leaf in kit.leaves(kwargs).items():
        assert run.grads[name].shape == leaf.shape, name
        assert run.grads[name].dtype == leaf.dtype, name
    result = assert_linattn_close(
        kit.problem_of(kwargs),
        run.o,
        run.final,
        recipe=recipe_of(form, case),
        grads=run.grads,
        do=run.do,
        d_final_state=run.d_final,
        name=f"triton/{form}",
    )
    return run, result


# One case per combination that matters; each id names what it exercises. Every form runs
# every case (the chunk size only matters to the chunk form).
# fmt: off
CASES = {
    # T = 37 > 32, not a multiple; K = 20 spans two 16-wide score tiles at C = 32.
    "fp32-elu1-norm-h0-mixed-C32": Case(
        family="mixed", feature_map="elu1", normalize=True, eps=1e-6, initial_state=True,
        final_state=True, chunk_size=32,
    ),
    # C = 64: T = 70 crosses one chunk boundary.
    "fp32-relu-steep-T70-C64": Case(
        T=70, H=1, K=12, V=9, family="steep", feature_map="relu", final_state=True,
        initial_state=True, chunk_size=64, scale=0.8,
    ),
    "fp16-identity-overflowing-some-varlen": Case(
        T=40, H=1, K=10, V=14, dtype=torch.float16, family="overflowing_some",
        initial_state=True, final_state=True, cu_seqlens=(0, 17, 17, 18, 40),
    ),
    "fp16-elu1-norm-logsigmoid-C128": Case(
        T=33, K=8, V=16, dtype=torch.float16, family="logsigmoid", feature_map="elu1",
        normalize=True, eps=1e-6, final_state=True, chunk_size=128, seed=3,
    ),
    "bf16-relu-norm-one-steep-T45": Case(
        T=45, K=16, V=8, dtype=torch.bfloat16, family="one_steep", feature_map="relu",
        normalize=True, final_state=True, initial_state=True,
    ),
    "bf16-identity-zero-gate-varlen": Case(
        T=30, H=1, K=6, V=11, dtype=torch.bfloat16, family="zero", final_state=True,
        cu_seqlens=(0, 1, 1, 30), scale=0.5,
    ),
    "fp32-elu1-overflowing-some-norm-varlen": Case(
        T=50, H=1, K=9, V=7, family="overflowing_some", feature_map="elu1", normalize=True,
        initial_state=True, final_state=True, cu_seqlens=(0, 20, 20, 21, 50), seed=5,
    ),
    # The wide case: K = 80 and V = 72 span two K and two V tiles in every form.
    "wide-fp32-elu1-norm-K80-V72": Case(
        T=18, H=1, K=80, V=72, family="one_steep", feature_map="elu1", normalize=True,
        eps=1e-6, initial_state=True, final_state=True, chunk_size=16,
    ),
}
# fmt: on


@pytest.mark.parametrize("form", FORM_NAMES)
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_vector_gate_fwd_bwd_match_oracle(form: str, case: Case, kit: Any) -> None:
    run, _ = run_and_check(form, case, kit, make(case, kit))
    if case.final_state:
        assert all(s.dtype == torch.float32 for s in kit.as_list(run.final))
    else:
        assert run.final is None


SCALAR_CASE = Case(
    T=36, K=8, V=10, family="steep", feature_map="elu1", normalize=True, eps=1e-6,
    initial_state=True, final_state=True, seed=7,
)  # fmt: skip


def sides(
    label: str, run: Any, problem: Any, recipe: PrecisionRecipe
) -> tuple[dict[str, Side], dict[str, Any]]:
    """Each tensor of ``run`` with the bound of its own problem and recipe, and the bounds."""
    fb = forward_bounds(problem, recipe)
    bb = backward_bounds(problem, recipe, do=run.do, d_final_state=run.d_final, forward=fb)
    bounds = {**fb.tensors, **bb}
    values = {"o": run.o}
    values.update(zip(("final_state", "final_key_sum"), kit_list(run.final), strict=False))
    values.update(run.grads)
    return {n: Side.of(label, x, bounds[n]) for n, x in values.items()}, bounds


def kit_list(state: Any) -> list[torch.Tensor]:
    """A final state (None, S_T or (S_T, z_T)) as a list."""
    return [] if state is None else list(state) if isinstance(state, tuple) else [state]


@pytest.mark.parametrize("form", FORM_NAMES)
def test_vector_gate_repeated_over_k_matches_scalar_gate(form: str, kit: Any) -> None:
    """g repeated over K and the scalar g: each within the oracle's bound, and within B_a + B_b.

    Both runs are judged against the oracle of their own problem (same values); then every
    output and gradient pair satisfies |a - b| <= B_a + B_b (`compare_pair`), and the scalar
    dg against Σ_m dg_sm of the vector run with the bound Σ_m B(dg_sm) (docs/error-model.md §5.1).
    """
    vector = make(SCALAR_CASE, kit, scalar=True)
    scalar = dict(vector)
    scalar["g"] = vector["g"].detach()[..., 0].clone().requires_grad_(True)
    recipe = recipe_of(form, SCALAR_CASE)
    run_v, _ = run_and_check(form, SCALAR_CASE, kit, vector)
    run_s, _ = run_and_check(form, SCALAR_CASE, kit, scalar)
    side_v, bounds_v = sides("vector gate", run_v, kit.problem_of(vector), recipe)
    side_s, bounds_s = sides("scalar gate", run_s, kit.problem_of(scalar), recipe)
    assert set(side_v) == set(side_s)
    dg_v = side_v.pop("g")
    side_v["g"] = Side(
        "vector gate (Σ_m)", dg_v.value.sum(-1), dg_v.bound.sum(-1), dg_v.verifiable.all(-1)
    )
    for name, a in side_v.items():
        comparison = compare_pair(name, a, side_s[name], bounds_s[name].reference)
        assert comparison.ok, (name, comparison)
    assert bounds_v["g"].reference.shape[-1] == SCALAR_CASE.K


@pytest.mark.parametrize("form", FORM_NAMES)
def test_vector_gate_never_reads_uninitialised_memory(
    form: str, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = Case(
        T=21, H=1, K=6, V=5, family="mixed", feature_map="elu1", normalize=True,
        initial_state=True, final_state=True, cu_seqlens=(0, 4, 4, 21),
    )  # fmt: skip
    kwargs = make(case, kit)
    extra = {"chunk_size": case.chunk_size} if form == "chunk" else {}
    kit.assert_poison_never_leaks(
        monkeypatch,
        lambda: kit.forward_backward(FORMS[form], kwargs, seed=1, **extra).tensors(),
    )


def test_vector_gate_empty_sequence_passes_state_through_exactly(kit: Any) -> None:
    case = Case(
        T=9, H=1, K=5, V=3, family="steep", normalize=True, initial_state=True,
        final_state=True, cu_seqlens=(0, 9, 9),
    )  # fmt: skip
    for form in FORM_NAMES:
        kwargs = make(case, kit)
        extra = {"chunk_size": case.chunk_size} if form == "chunk" else {}
        run = kit.forward_backward(FORMS[form], kwargs, seed=2, **extra)
        S0, z0 = kwargs["initial_state"]
        S_T, z_T = run.final
        assert torch.equal(S_T[1], S0[1].detach()), form
        assert torch.equal(z_T[1], z0[1].detach()), form
        dS_T, dz_T = run.d_final
        assert torch.equal(run.grads["initial_state"][1], dS_T[1]), form
        assert torch.equal(run.grads["initial_key_sum"][1], dz_T[1]), form


@pytest.mark.parametrize("form", FORM_NAMES)
def test_vector_gate_arguments_are_checked(form: str) -> None:
    q = torch.randn(1, 4, 2, 8)
    v = torch.randn(1, 4, 2, 6)
    with pytest.raises(ValueError, match=r"g of shape \[B, T, H\] or \[B, T, H, K\]"):
        FORMS[form](q, q, v, -torch.rand(1, 4, 2, 7))
    g = -torch.rand(1, 4, 2, 8)
    g[0, 2, 1, 5] = 0.25
    with pytest.raises(ValueError, match=r"g <= 0"):
        FORMS[form](q, q, v, g)
