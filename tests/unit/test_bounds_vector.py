# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The error bounds for vector gates (g ``[B, T, H, K]``): forward (docs/error-model.md §2.7)
and gradients (§5.1).

Soundness: the three float64 reference forms evaluated in float32 (inputs upcast exactly from
their storage dtype, output rounded back), each with the recipe that describes it (as in
test_bounds_sound.py), and their autograd gradients, never score r or η above 1 on problems
from every vector-gate family. Consistency: a scalar gate and the same gate repeated over K
have the same bounds (dg summed over K). Sharpness: planted defects of the per-dimension decay
and its gradients fail, their correct twins pass.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, note, settings, target
from hypothesis import strategies as st

from linattn_verify.compare import check_against_oracle
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.strategies import VECTOR_DECAY_FAMILIES, random_cotangents
from linattn_verify.linear_attn.strategies._tensors import decay_values, family_values
from linattn_verify.linear_attn.tolerance import backward_bounds, cotangent_loss, forward_bounds

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
def vector_problems(draw: st.DrawFn, max_T: int = 24, max_dim: int = 6) -> dict[str, Any]:
    """Keyword arguments of `build`: small vector-gate problems of every family."""
    return {
        "family": draw(st.sampled_from(VECTOR_DECAY_FAMILIES), label="family"),
        "dtype": draw(st.sampled_from(sorted(DTYPES)), label="dtype"),
        "normalize": draw(st.booleans(), label="normalize"),
        "feature_map": draw(st.sampled_from(("elu1", "relu", "identity")), label="feature_map"),
        "values": draw(st.sampled_from(VALUES), label="values"),
        "T": draw(st.integers(1, max_T), label="T"),
        "H": draw(st.integers(1, 2), label="H"),
        "K": draw(st.integers(1, max_dim), label="K"),
        "V": draw(st.integers(1, max_dim), label="V"),
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


def _scalar_and_repeated(family: str, normalize: bool, T: int) -> tuple[Problem, Problem]:
    """A scalar-gate problem (H = 2, K = 4, V = 3) and the same with its gate repeated over K."""
    gen = torch.Generator().manual_seed(5)
    H, K, V = 2, 4, 3
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
    return scalar, replace(scalar, g=g[..., None].expand(1, T, H, K).contiguous())


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("family", ["mild", "steep", "overflowing"])
@pytest.mark.parametrize("normalize", [False, True])
def test_scalar_gate_bound_equals_repeated_vector_gate_bound(
    form: str, family: str, normalize: bool
) -> None:
    scalar, vector = _scalar_and_repeated(family, normalize, T=20)
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


# The gradient bound (docs/error-model.md §5.1).


def _float32_gradients(
    form: str, problem: Problem, seed: int
) -> tuple[torch.Tensor, Any, dict[str, torch.Tensor], torch.Tensor, Any]:
    """Autograd of ``form`` evaluated in float32: o (input dtype), the final state, gradients
    (of q, k, v in the input dtype) and the cotangents."""
    fn, _ = FORMS[form]
    p32, leaves = replace(problem.to(torch.float32), output_final_state=True).with_grad_leaves()
    do, d_final = random_cotangents(problem, seed)
    o, state = fn(p32)
    loss = cotangent_loss(o, state, do, d_final)
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
    grads = {n: gr.to(problem.q.dtype) if n in "qkv" else gr for n, gr in grads.items()}
    final = tuple(x.detach() for x in state) if isinstance(state, tuple) else state.detach()
    return o.detach().to(problem.q.dtype), final, grads, do, d_final


def _tiny_denominator(problem: Problem, form: str) -> bool:
    """A denominator below fp32's normal range: 1/Z overflows in any fp32 backward (a range
    failure of the subject, not a rounding error; test_bounds_sound.py leaves these out too)."""
    if not problem.normalize:
        return False
    residual = forward_bounds(problem, FORMS[form][1]).tensors["o"].residual
    assert residual is not None
    Z = residual.denominator
    return bool(((Z != 0) & (Z.abs() < torch.finfo(torch.float32).tiny)).any())


STEEP = {**STEEP_NORMALIZED, "T": 16, "K": 5}


@pytest.mark.parametrize("form", sorted(FORMS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kwargs=vector_problems(max_T=16, max_dim=5))
@example(kwargs=STEEP)
@example(kwargs={**STEEP, "family": "logsigmoid", "dtype": "bfloat16", "seed": 3})
@example(kwargs={**STEEP, "family": "mixed", "dtype": "float16", "normalize": False})
def test_float32_gradients_satisfy_the_vector_gate_gradient_bound(
    form: str, kwargs: dict[str, Any]
) -> None:
    problem = build(**kwargs)
    note(problem.describe())
    assume(not _tiny_denominator(problem, form))
    o, _, grads, do, d_final = _float32_gradients(form, problem, kwargs["seed"] + 1)
    verdict = check_against_oracle(
        problem,
        o,
        None,
        recipe=FORMS[form][1],
        grads=grads,
        do=do,
        d_final_state=d_final,
        name=f"torch/{form}",
    )
    worst = _worst(verdict)
    target(worst, label=f"worst gradient score {form}")
    assert all(c.counts.nonfinite == 0 for c in verdict.comparisons), verdict.report()
    assert worst <= SOUND_LIMIT, verdict.report()


# -- a scalar gate is the vector gate repeated ------------------------------------------------

# With g repeated over K every per-dimension quantity equals the scalar one (w_tjm = w_tj,
# ε_w(t, j, m) = ε_w(t, j)), so dq, dk, dv, dS_0, dz_0 have the scalar bound term for term, and
# dg_sm is the share of dimension m: Σ_m dg_sm = dg_s (G_t enters every w_tjm), Σ_m M_sm = M_s
# and Σ_m B_sm = B_s up to the absolute underflow charges, which the vector path takes per
# dimension and unweighted (λ(K + 2) per term instead of w_tj λ(K + 2): at most ~1e-34 here) and
# the output rounding (u_out |dg_sm| per element: 0 for float32 g, as here). The sums differ in
# association only: float64 roundings of relative size ~(K + L)·2^-53.


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("family", ["mild", "steep", "overflowing"])
@pytest.mark.parametrize("normalize", [False, True])
def test_scalar_gate_gradient_bound_equals_repeated_vector_gate_bound(
    form: str, family: str, normalize: bool
) -> None:
    scalar, vector = _scalar_and_repeated(family, normalize, T=12)
    do, d_final = random_cotangents(scalar, 11)
    recipe = FORMS[form][1]
    a = backward_bounds(scalar, recipe, do=do, d_final_state=d_final)
    b = backward_bounds(vector, recipe, do=do, d_final_state=d_final)
    assert a.keys() == b.keys()
    assert vector.g is not None
    assert b["g"].reference.shape == vector.g.shape
    for name, x in a.items():
        y = b[name]

        def summed(t: torch.Tensor, name: str = name) -> torch.Tensor:
            return t.sum(-1) if name == "g" else t  # dimension m's share of the scalar dg

        # The float64 references are sums with cancellation, rounded in a different order by
        # the two autograd graphs: they agree relative to the magnitude, not to the value.
        gap = (summed(y.reference) - x.reference).abs()
        assert bool((gap <= REPEAT_RTOL * x.magnitude + REPEAT_ATOL).all()), (name, gap.max())
        for what in ("bound", "magnitude"):
            torch.testing.assert_close(
                summed(getattr(y, what)),
                getattr(x, what),
                rtol=REPEAT_RTOL,
                atol=REPEAT_ATOL,
                msg=lambda m, name=name, what=what: f"d{name}.{what}: {m}",
            )
        assert bool((y.verifiable.all(-1) if name == "g" else y.verifiable).eq(x.verifiable).all())
    # The vector path never charges less than the scalar one (its underflow charges are larger).
    assert bool((b["g"].bound.sum(-1) >= a["g"].bound * (1 - REPEAT_RTOL)).all())


# -- sharpness: planted gradient defects -------------------------------------------------------


def _gradient_defect_problem(seed: int) -> Problem:
    return build(
        family="mild",
        dtype="float32",
        normalize=False,
        feature_map="elu1",
        values="normal",
        T=16,
        H=2,
        K=5,
        V=5,
        seed=seed,
    )


def _defective(problem: Problem, defect: str | None, seed: int) -> dict[str, Any]:
    """Float32 recurrent gradients, with an optional planted ``defect``.

    ``"dg from dimension 1"`` returns dimension 1's dg for dimension 0; ``"dk without final
    state"`` drops the term w_Tjm (dS_T v_j)_m of dk; ``"dg averaged over K"`` gives every
    dimension the mean dg (a kernel that treats the gate as a scalar).
    """
    o, final, grads, do, d_final = _float32_gradients("recurrent", problem, seed)
    grads = dict(grads)
    if defect == "dg from dimension 1":
        grads["g"] = grads["g"].clone()
        grads["g"][..., 0] = grads["g"][..., 1]
    elif defect == "dg averaged over K":
        grads["g"] = grads["g"].mean(-1, keepdim=True).expand_as(grads["g"]).contiguous()
    elif defect == "dk without final state":
        p32, leaves = replace(problem.to(torch.float32), output_final_state=True).with_grad_leaves()
        o32, state = FORMS["recurrent"][0](p32)
        loss = cotangent_loss(o32, state, do, None)
        (dk,) = torch.autograd.grad(loss, [leaves["k"]])
        grads["k"] = dk.to(problem.q.dtype)
    return {"o": o, "final": final, "grads": grads, "do": do, "d_final_state": d_final}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "defect", ["dg from dimension 1", "dg averaged over K", "dk without final state"]
)
def test_planted_vector_gradient_defect_is_flagged_and_its_twin_passes(
    defect: str, seed: int
) -> None:
    problem = _gradient_defect_problem(seed)
    twin = _defective(problem, None, seed + 1)
    good = check_against_oracle(
        problem, twin.pop("o"), twin.pop("final"), recipe=RECURRENT, name="twin", **twin
    )
    assert good.ok, good.report()
    assert _worst(good) <= SOUND_LIMIT, good.report()
    planted = _defective(problem, defect, seed + 1)
    bad = check_against_oracle(
        problem, planted.pop("o"), planted.pop("final"), recipe=RECURRENT, name=defect, **planted
    )
    assert not bad.ok, bad.report()
