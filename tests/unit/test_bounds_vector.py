# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The forward bound for vector gates (g ``[B, T, H, K]``, docs/error-model.md §2.7).

Soundness: the three float64 reference forms evaluated in float32 (inputs upcast exactly from
their storage dtype, output rounded back), each with the recipe that describes it (as in
test_bounds_sound.py), never score r or η above 1 on problems from every vector-gate family.
Consistency: a scalar gate and the same gate repeated over K have the same bound. Sharpness:
planted defects of the per-dimension decay fail, their correct twins pass.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, note, settings, target
from hypothesis import strategies as st

from linattn_verify.compare import check_against_oracle
from linattn_verify.feature_maps import apply_feature_map
from linattn_verify.oracles.chunk import chunk_reference
from linattn_verify.oracles.parallel import parallel_reference
from linattn_verify.oracles.recurrent import recurrent_reference
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import Problem, validate_problem
from linattn_verify.strategies import VECTOR_DECAY_FAMILIES
from linattn_verify.strategies._tensors import decay_values, family_values
from linattn_verify.tolerance import forward_bounds

SOUND_LIMIT = 1.0
"""A correct computation must satisfy its rigorous bound: r, η <= 1 (no slack needed)."""

FORMS = {
    "parallel": (
        parallel_reference,
        PrecisionRecipe(form="parallel", dots_on_path=0, decay_scan="global"),
    ),
    "chunk": (
        lambda p: chunk_reference(p, chunk_size=8),
        PrecisionRecipe(form="chunk", chunk_size=8, dots_on_path=0, decay_scan="chunk_local"),
    ),
    "recurrent": (
        recurrent_reference,
        PrecisionRecipe(form="recurrent", dots_on_path=0, decay_scan="per_step"),
    ),
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
VALUES = ("normal", "heavy_tailed", "large", "positive", "underflowing_features")
"""Value families drawn for q, k, v (``near_max`` needs its own magnitude and is left out)."""


def build(
    *,
    family: str,
    dtype: str,
    normalize: bool,
    feature_map: str,
    values: str,
    T: int,
    H: int,
    K: int,
    V: int,
    seed: int,
) -> Problem:
    """A vector-gate problem (B = 1) with an initial state, asking for the final state."""
    gen = torch.Generator().manual_seed(seed)
    shape = (1, T, H, K)
    q = family_values(values, "q", shape, gen)
    k = family_values(values, "k", shape, gen)
    v_family = "normal" if values == "underflowing_features" else values
    v = family_values(v_family, "v", (1, T, H, V), gen)
    g = decay_values(family, shape, gen)
    S0 = torch.randn(1, H, K, V, generator=gen)
    h0: Any = (S0, torch.rand(1, H, K, generator=gen)) if normalize else S0
    return validate_problem(
        q.to(DTYPES[dtype]),
        k.to(DTYPES[dtype]),
        v.to(DTYPES[dtype]),
        g,
        normalize=normalize,
        eps=1e-6 if normalize else 0.0,
        feature_map=feature_map,
        initial_state=h0,
        output_final_state=True,
    )


@st.composite
def vector_problems(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of `build`: small vector-gate problems of every family."""
    return {
        "family": draw(st.sampled_from(VECTOR_DECAY_FAMILIES), label="family"),
        "dtype": draw(st.sampled_from(sorted(DTYPES)), label="dtype"),
        "normalize": draw(st.booleans(), label="normalize"),
        "feature_map": draw(st.sampled_from(("elu1", "relu", "identity")), label="feature_map"),
        "values": draw(st.sampled_from(VALUES), label="values"),
        "T": draw(st.integers(1, 24), label="T"),
        "H": draw(st.integers(1, 2), label="H"),
        "K": draw(st.integers(1, 6), label="K"),
        "V": draw(st.integers(1, 6), label="V"),
        "seed": draw(st.integers(0, 2**31 - 1), label="seed"),
    }


def _run_float32(form: str, problem: Problem) -> tuple[torch.Tensor, Any]:
    """Evaluate in float32 and round the output to the input dtype, as a kernel would."""
    fn, _ = FORMS[form]
    o, state = fn(problem.to(torch.float32))
    return o.to(problem.q.dtype), state


def _worst(verdict: Any) -> float:
    return max(c.deciding for c in verdict.comparisons)


STEEP_NORMALIZED = {
    "family": "overflowing_some",
    "dtype": "float32",
    "normalize": True,
    "feature_map": "elu1",
    "values": "normal",
    "T": 24,
    "H": 2,
    "K": 6,
    "V": 3,
    "seed": 7,
}


@pytest.mark.parametrize("form", sorted(FORMS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kwargs=vector_problems())
@example(kwargs=STEEP_NORMALIZED)
@example(kwargs={**STEEP_NORMALIZED, "family": "logsigmoid", "dtype": "bfloat16", "seed": 3})
@example(kwargs={**STEEP_NORMALIZED, "family": "mixed", "dtype": "float16", "normalize": False})
def test_float32_forms_satisfy_the_vector_gate_bound(form: str, kwargs: dict[str, Any]) -> None:
    problem = build(**kwargs)
    note(problem.describe())
    o, state = _run_float32(form, problem)
    verdict = check_against_oracle(problem, o, state, recipe=FORMS[form][1], name=f"torch/{form}")
    worst = _worst(verdict)
    target(worst, label=f"worst score {form}")
    assert all(c.counts.nonfinite == 0 for c in verdict.comparisons), verdict.report()
    assert worst <= SOUND_LIMIT, verdict.report()


# -- a scalar gate is the vector gate repeated ------------------------------------------------

# The two paths sum the same terms with the same counts and weight errors; they differ in the
# association of each product (Σ_m |q̃_m||k̃_m| w vs w Σ_m |q̃_m||k̃_m|) and of a few sums, so in
# float64 roundings of relative size ~(K + L)·2^-53 ≈ 1e-14 here, and in the underflow term of
# the K-sum (λ(K + 2) per term, weighted by w in the scalar path): absolutely below 1e-36.
REPEAT_RTOL = 1e-12
REPEAT_ATOL = 1e-30


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("family", ["mild", "steep", "overflowing"])
@pytest.mark.parametrize("normalize", [False, True])
def test_scalar_gate_bound_equals_repeated_vector_gate_bound(
    form: str, family: str, normalize: bool
) -> None:
    gen = torch.Generator().manual_seed(5)
    T, H, K, V = 20, 2, 4, 3
    g = decay_values(family, (1, T, H), gen)
    assert g is not None
    S0 = torch.randn(1, H, K, V, generator=gen)
    scalar = validate_problem(
        torch.randn(1, T, H, K, generator=gen),
        torch.randn(1, T, H, K, generator=gen),
        torch.randn(1, T, H, V, generator=gen),
        g,
        normalize=normalize,
        eps=1e-6 if normalize else 0.0,
        feature_map="elu1",
        initial_state=(S0, torch.rand(1, H, K, generator=gen)) if normalize else S0,
        output_final_state=True,
    )
    vector = replace(scalar, g=g[..., None].expand(1, T, H, K).contiguous())
    recipe = FORMS[form][1]
    a, b = forward_bounds(scalar, recipe), forward_bounds(vector, recipe)
    assert a.tensors.keys() == b.tensors.keys()
    for name, x in a.tensors.items():
        y = b.tensors[name]
        for what in ("reference", "bound", "magnitude"):
            torch.testing.assert_close(
                getattr(y, what),
                getattr(x, what),
                rtol=REPEAT_RTOL,
                atol=REPEAT_ATOL,
                msg=lambda m, name=name, what=what: f"{name}.{what}: {m}",
            )
        if x.residual is not None:
            assert y.residual is not None
            torch.testing.assert_close(
                y.residual.numerator_bound, x.residual.numerator_bound, rtol=REPEAT_RTOL, atol=0
            )
            torch.testing.assert_close(
                y.residual.denominator_bound,
                x.residual.denominator_bound,
                rtol=REPEAT_RTOL,
                atol=REPEAT_ATOL,
            )


# -- sharpness: planted defects of the per-dimension decay ------------------------------------

RECURRENT = FORMS["recurrent"][1]


def _recurrent_fp32(p: Problem, defect: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 recurrent kernel for a vector gate, with an optional planted ``defect``.

    ``"dim0 gate"`` decays every dimension with dimension 0's gate; ``"dropped token"`` never
    adds token 7's key and value; ``"gate twice"`` applies dimension 1's gate twice.
    """
    assert p.g is not None
    assert p.initial_state is not None
    q = apply_feature_map(p.q.float(), p.feature_map)
    k = apply_feature_map(p.k.float(), p.feature_map)
    v, g = p.v.float(), p.g.float()
    T = q.shape[1]
    S = p.initial_state.float().clone()  # [B, H, K, V]
    out = []
    for t in range(T):
        gt = g[:, t]  # [B, H, K]
        if defect == "dim0 gate":
            gt = gt[..., :1].expand_as(gt)
        elif defect == "gate twice":
            gt = gt.clone()
            gt[..., 1] = 2 * gt[..., 1]
        S = torch.exp(gt)[..., None] * S
        if not (defect == "dropped token" and t == 7):
            S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(p.scale * (q[:, t, :, :, None] * S).sum(-2))
    return torch.stack(out, dim=1), S


def _defect_problem(seed: int) -> Problem:
    gen = torch.Generator().manual_seed(seed)
    T, H, K, V = 32, 2, 8, 8
    g = decay_values("mild", (1, T, H, K), gen)
    return validate_problem(
        torch.randn(1, T, H, K, generator=gen),
        torch.randn(1, T, H, K, generator=gen),
        torch.rand(1, T, H, V, generator=gen) + 0.5,
        g,
        feature_map="elu1",
        initial_state=torch.randn(1, H, K, V, generator=gen),
        output_final_state=True,
    )


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("defect", ["dim0 gate", "dropped token", "gate twice"])
def test_planted_vector_gate_defect_is_flagged_and_its_twin_passes(defect: str, seed: int) -> None:
    problem = _defect_problem(seed)
    good = check_against_oracle(problem, *_recurrent_fp32(problem), recipe=RECURRENT, name="twin")
    assert good.ok, good.report()
    assert _worst(good) <= SOUND_LIMIT, good.report()
    bad = check_against_oracle(
        problem, *_recurrent_fp32(problem, defect), recipe=RECURRENT, name=defect
    )
    assert not bad.ok, bad.report()
