# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Meta tests of the high-precision oracles: double-double, mpmath, exact, and `oracle()`.

Accuracy is judged against M, the same computation on absolute values (docs/error-model.md §2.1), or
M^o = (M^N + |o| M^Z)/|Z| for normalized outputs: the scale of the rounding errors.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.oracles import api
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.double_double import (
    dd_forward,
    double_double_oracle,
    round_dd,
)
from linattn_verify.linear_attn.oracles.exact import exact_forward, exact_oracle
from linattn_verify.linear_attn.oracles.mpmath_oracle import mpmath_forward, mpmath_oracle
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.tolerance import forward_bounds

DD_TARGET = 2.0**-90  # dd oracle vs mpmath, relative to M (docs/error-model.md §6.4 tier 2)
MP50_TARGET = 2.0**-150  # dps 50 carries 166 bits


def make_problem(
    seed: int,
    *,
    B: int = 1,
    T: int = 24,
    H: int = 2,
    K: int = 5,
    V: int = 3,
    feature_map: str = "elu1",
    decay: str | None = None,
    normalize: bool = False,
    eps: float = 0.0,
    initial_state: bool = False,
    cu_seqlens: list[int] | None = None,
    dtype: torch.dtype = torch.float32,
) -> Problem:
    """A random problem with inputs rounded to ``dtype`` (as a kernel would receive them)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)

    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
    g = None
    if decay == "mild":
        g = -torch.rand(B, T, H, generator=gen, dtype=torch.float64).to(dtype) * 0.5
    elif decay == "steep":
        g = -torch.rand(B, T, H, generator=gen, dtype=torch.float64).to(dtype) * 20
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    state: Any = None
    if initial_state:
        state = randn(N, H, K, V)
        if normalize:
            state = (state, torch.rand(N, H, K, generator=gen, dtype=torch.float64).to(dtype))
    return validate_problem(
        q,
        k,
        v,
        g,
        normalize=normalize,
        eps=eps,
        feature_map=feature_map,
        initial_state=state,
        output_final_state=True,
        cu_seqlens=None if cu_seqlens is None else torch.tensor(cu_seqlens),
    )


def magnitudes(problem: Problem, o: torch.Tensor) -> dict[str, torch.Tensor]:
    """M for o, the final state and the key sum; ``o`` is a reference output (for M^o)."""
    p = problem.to(torch.float64)
    fq = apply_feature_map(p.q, p.feature_map)
    fk = apply_feature_map(p.k, p.feature_map)
    V = p.v.shape[-1]
    ones = torch.ones_like(p.v[..., :1])
    v_abs = torch.cat([p.v.abs(), ones], -1) if p.normalize else p.v.abs()
    S0 = None if p.initial_state is None else p.initial_state.abs()
    if S0 is not None and p.initial_key_sum is not None:
        S0 = torch.cat([S0, p.initial_key_sum.abs()[..., None]], -1)
    kw = {"g": p.g, "output_final_state": True, "cu_seqlens": p.cu_seqlens}
    absolute = validate_problem(
        fq.abs(), fk.abs(), v_abs, scale=abs(p.scale), initial_state=S0, **kw
    )
    m, m_state = parallel_reference(absolute)
    assert isinstance(m_state, torch.Tensor)
    if not p.normalize:
        return {"o": m, "final_state": m_state}
    z0 = None if p.initial_key_sum is None else p.initial_key_sum[..., None]
    denom = validate_problem(fq, fk, ones, scale=p.scale, initial_state=z0, **kw)
    Z = parallel_reference(denom)[0][..., 0] + p.eps
    M_o = (m[..., :V] + o.abs() * m[..., V:]) / Z.abs()[..., None]
    M_o = torch.where((Z == 0)[..., None], 0.0, M_o)
    return {"o": M_o, "final_state": m_state[..., :V], "final_key_sum": m_state[..., V]}


def dd_error(x: tuple[np.ndarray, np.ndarray], ref: np.ndarray) -> torch.Tensor:
    """|hi + lo - ref| elementwise, evaluated in mpmath and returned as float64."""
    with mpmath.workdps(80):
        err = [
            float(abs(mpmath.mpf(h) + mpmath.mpf(lo) - r))
            for h, lo, r in zip(x[0].reshape(-1), x[1].reshape(-1), ref.reshape(-1), strict=True)
        ]
    return torch.tensor(err, dtype=torch.float64).reshape(ref.shape)


def object_error(x: np.ndarray, ref: np.ndarray) -> torch.Tensor:
    """|x - ref| for object arrays of mpf or Fraction, evaluated in mpmath at 120 digits."""

    def mp(e: Any) -> Any:
        if isinstance(e, Fraction):
            return mpmath.mpf(e.numerator) / e.denominator
        return mpmath.mpf(e)

    with mpmath.workdps(120):
        err = [
            float(abs(mp(a) - mp(b))) for a, b in zip(x.reshape(-1), ref.reshape(-1), strict=True)
        ]
    return torch.tensor(err, dtype=torch.float64).reshape(ref.shape)


def assert_within(err: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    ratio = torch.where(bound > 0, err / bound, torch.where(err > 0, math.inf, 0.0))
    worst = int(ratio.reshape(-1).argmax())
    assert float(ratio.max()) <= 1.0, (
        f"{what}: error {float(err.reshape(-1)[worst]):.3e} exceeds bound "
        f"{float(bound.reshape(-1)[worst]):.3e} at flat index {worst}"
    )


def mp_to_tensor(x: np.ndarray) -> torch.Tensor:
    return torch.tensor([float(e) for e in x.reshape(-1)], dtype=torch.float64).reshape(x.shape)


CONFIGS = {
    "identity-plain": {"feature_map": "identity"},
    "elu1-decay-normalized-h0": {
        "feature_map": "elu1",
        "decay": "mild",
        "normalize": True,
        "eps": 1e-6,
        "initial_state": True,
    },
    "relu-steep-h0": {"feature_map": "relu", "decay": "steep", "initial_state": True, "H": 1},
    "elu1-varlen-eps0": {
        "feature_map": "elu1",
        "normalize": True,
        "T": 30,
        "cu_seqlens": [0, 0, 5, 17, 17, 30],
    },
    "identity-decay-varlen-h0-normalized": {
        "feature_map": "identity",
        "decay": "mild",
        "normalize": True,
        "eps": 1e-3,
        "initial_state": True,
        "T": 21,
        "cu_seqlens": [0, 9, 9, 21],
    },
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dd_oracle_matches_mpmath_within_2_pow_minus_90_of_magnitude(name: str) -> None:
    problem = make_problem(7, **CONFIGS[name])  # type: ignore[arg-type]
    mp = mpmath_forward(problem, dps=40)
    M = magnitudes(problem, mp_to_tensor(mp.o))
    for form, chunk in (("parallel", None), ("chunk", 4), ("chunk", 7)):
        dd = dd_forward(problem, form=form, chunk_size=chunk)  # type: ignore[arg-type]
        what = f"{name} dd[{form}, C={chunk}]"
        assert_within(dd_error(dd.o, mp.o), DD_TARGET * M["o"], f"{what} o")
        assert_within(
            dd_error(dd.final_state, mp.final_state), DD_TARGET * M["final_state"], f"{what} S"
        )
        if problem.normalize:
            assert dd.final_key_sum is not None
            assert mp.final_key_sum is not None
            assert_within(
                dd_error(dd.final_key_sum, mp.final_key_sum),
                DD_TARGET * M["final_key_sum"],
                f"{what} z",
            )


@settings(deadline=None)
@given(
    seed=st.integers(0, 2**16),
    T=st.integers(1, 20),
    H=st.integers(1, 2),
    K=st.integers(1, 6),
    V=st.integers(1, 5),
    feature_map=st.sampled_from(["identity", "elu1", "relu"]),
    decay=st.sampled_from([None, "mild", "steep"]),
    normalize=st.booleans(),
    initial_state=st.booleans(),
)
def test_dd_oracle_matches_mpmath_on_drawn_problems(**case: Any) -> None:
    eps = 1e-6 if case["normalize"] else 0.0
    problem = make_problem(case.pop("seed"), eps=eps, **case)
    mp = mpmath_forward(problem, dps=40)
    dd = dd_forward(problem)
    M = magnitudes(problem, mp_to_tensor(mp.o))
    assert_within(dd_error(dd.o, mp.o), DD_TARGET * M["o"], f"o {case}")
    assert_within(dd_error(dd.final_state, mp.final_state), DD_TARGET * M["final_state"], "S")


def test_dd_chunked_and_parallel_forms_agree_on_a_longer_sequence() -> None:
    problem = make_problem(
        11, T=300, H=1, K=8, V=6, decay="mild", normalize=True, eps=1e-6, initial_state=True
    )
    par = dd_forward(problem, form="parallel")
    chunk = dd_forward(problem, form="chunk", chunk_size=32)
    o_ref = torch.from_numpy(round_dd(par.o))
    M = magnitudes(problem, o_ref)
    diff = torch.from_numpy(np.abs((par.o[0] - chunk.o[0]) + (par.o[1] - chunk.o[1])))
    assert_within(diff, 2.0**-95 * M["o"], "o parallel vs chunk")
    dS = np.abs(
        (par.final_state[0] - chunk.final_state[0]) + (par.final_state[1] - chunk.final_state[1])
    )
    assert_within(torch.from_numpy(dS), 2.0**-95 * M["final_state"], "S parallel vs chunk")


@pytest.mark.parametrize("name", ["elu1-decay-normalized-h0", "relu-steep-h0"])
def test_mpmath_dps_50_agrees_with_dps_100_and_across_forms(name: str) -> None:
    problem = make_problem(5, **{**CONFIGS[name], "T": 12})  # type: ignore[arg-type]
    low = mpmath_forward(problem, dps=50, form="parallel")
    high = mpmath_forward(problem, dps=100, form="recurrent")
    M = magnitudes(problem, mp_to_tensor(high.o))
    assert_within(object_error(low.o, high.o), MP50_TARGET * M["o"], "o dps 50 vs 100")
    assert_within(
        object_error(low.final_state, high.final_state), MP50_TARGET * M["final_state"], "S"
    )
    other = mpmath_forward(problem, dps=50, form="recurrent")
    assert_within(object_error(low.o, other.o), MP50_TARGET * M["o"], "o parallel vs recurrent")


@pytest.mark.parametrize(
    "options",
    [
        {"feature_map": "identity"},
        {"feature_map": "relu", "normalize": True, "eps": 1e-6, "initial_state": True},
        {"feature_map": "identity", "normalize": True, "T": 20, "cu_seqlens": [0, 7, 7, 20]},
        {"feature_map": "relu", "initial_state": True, "T": 70, "K": 2, "V": 2, "H": 1},
    ],
)
def test_exact_oracle_matches_mpmath_and_double_double(options: dict[str, Any]) -> None:
    problem = make_problem(3, **options)
    exact = exact_forward(problem)
    mp = mpmath_forward(problem, dps=50)
    dd = dd_forward(problem)
    M = magnitudes(problem, mp_to_tensor(mp.o))
    assert_within(object_error(exact.o, mp.o), MP50_TARGET * M["o"], "o exact vs mpmath")
    assert_within(
        object_error(exact.final_state, mp.final_state), MP50_TARGET * M["final_state"], "S"
    )
    with mpmath.workdps(80):
        exact_o = np.array([mpmath.mpf(f.numerator) / f.denominator for f in exact.o.reshape(-1)])
    exact_o = exact_o.reshape(exact.o.shape)
    assert_within(dd_error(dd.o, exact_o), DD_TARGET * M["o"], "o exact vs dd")
    # Both round the (nearly) same value once, correctly: the float64 results are identical.
    o_exact, _ = exact_oracle(problem)
    o_mp, _ = mpmath_oracle(problem, dps=50)
    assert torch.equal(o_exact, o_mp)


def test_exact_oracle_rejects_irrational_problems_and_accepts_zero_decay() -> None:
    with pytest.raises(InvalidArgument, match="feature_map='elu1'"):
        exact_forward(make_problem(0, feature_map="elu1"))
    with pytest.raises(InvalidArgument, match="decay g"):
        exact_forward(make_problem(0, feature_map="identity", decay="mild"))
    base = make_problem(0, feature_map="identity")
    zero_decay = validate_problem(
        base.q, base.k, base.v, torch.zeros(base.q.shape[:3]), output_final_state=True
    )
    assert torch.equal(exact_oracle(zero_decay)[0], exact_oracle(base)[0])


def test_exact_oracle_rounds_ties_to_even_and_quotients_correctly() -> None:
    # o_2 = q·(k_1 v_1 + k_2 v_2) = 1 + v_2 with q = k = 1, v_1 = 1 and scale 1.
    q = torch.ones(1, 2, 1, 1, dtype=torch.float64)
    cases = {
        2.0**-53: 1.0,  # a tie: to even
        3 * 2.0**-53: 1 + 2.0**-51,  # a tie: to even, upwards
        2.0**-53 + 2.0**-80: 1 + 2.0**-52,  # just above the tie
    }
    for v2, expected in cases.items():
        v = torch.tensor([1.0, v2], dtype=torch.float64).reshape(1, 2, 1, 1)
        problem = validate_problem(q, q, v, scale=1.0)
        assert exact_forward(problem).o[0, 1, 0, 0] == 1 + Fraction(v2)
        assert float(exact_oracle(problem)[0][0, 1, 0, 0]) == expected
    # Normalized with Z = 3: o_2 = (1 + 1)/... use v = (0, 1), so o_2 = 1/2; and eps = 1: 1/3.
    v = torch.tensor([0.0, 1.0], dtype=torch.float64).reshape(1, 2, 1, 1)
    problem = validate_problem(q, q, v, scale=1.0, normalize=True, eps=1.0)
    assert exact_forward(problem).o[0, 1, 0, 0] == Fraction(1, 3)
    assert float(exact_oracle(problem)[0][0, 1, 0, 0]) == 1 / 3


# Closed forms.


@pytest.mark.parametrize("method", ["double-double", "mpmath"])
def test_single_token_normalized_output_is_the_value(method: str) -> None:
    # T = 1, eps = 0, φ > 0: o = s A v / (s A) = v exactly.
    problem = make_problem(4, T=1, feature_map="elu1", normalize=True, decay="mild")
    run = double_double_oracle if method == "double-double" else mpmath_oracle
    o, _ = run(problem)
    assert torch.equal(o, problem.v.double())


@pytest.mark.parametrize("method", ["double-double", "mpmath"])
def test_equal_keys_give_the_running_mean_of_values(method: str) -> None:
    # With all keys equal, no decay and eps = 0, o_t = mean(v_1..v_t) whatever q is.
    problem = make_problem(6, T=16, feature_map="elu1", normalize=True)
    k = problem.k[:, :1].expand_as(problem.k).contiguous()
    problem = validate_problem(problem.q, k, problem.v, normalize=True, feature_map="elu1")
    run = double_double_oracle if method == "double-double" else mpmath_oracle
    o, _ = run(problem)
    v = problem.v.double()
    mean = [
        [
            [
                [
                    float(sum(Fraction(float(v[0, j, h, i])) for j in range(t + 1)) / (t + 1))
                    for i in range(v.shape[3])
                ]
                for h in range(v.shape[2])
            ]
            for t in range(16)
        ]
    ]
    expected = torch.tensor(mean, dtype=torch.float64)
    # M^o <= 2 max|v|; the oracles round once from a value within 2^-90 M^o.
    tolerance = 2.0**-53 * expected.abs() + 2.0**-88 * v.abs().max()
    assert ((o - expected).abs() <= tolerance).all()


@pytest.mark.parametrize("method", ["double-double", "mpmath", "exact"])
def test_zero_values_and_zero_denominators_give_exact_zeros(method: str) -> None:
    fmap = "elu1" if method != "exact" else "relu"
    decay = "mild" if method != "exact" else None
    problem = make_problem(8, T=9, feature_map=fmap, decay=decay)
    zero_v = validate_problem(
        problem.q,
        problem.k,
        torch.zeros_like(problem.v),
        problem.g,
        feature_map=fmap,
        output_final_state=True,
    )
    run = {"double-double": double_double_oracle, "mpmath": mpmath_oracle, "exact": exact_oracle}
    o, S = run[method](zero_v)
    assert isinstance(S, torch.Tensor)
    assert (o == 0).all()
    assert (S == 0).all()
    # relu of a negative query is 0: with eps = 0 every denominator is exactly 0 -> o = 0.
    neg_q = validate_problem(
        -problem.q.abs() - 1, problem.k, problem.v, problem.g, normalize=True, feature_map="relu"
    )
    o, _ = run[method](neg_q)
    assert (o == 0).all()


# The float64 reference meets its own bound.


@pytest.mark.parametrize(
    "options",
    [
        {"feature_map": "elu1", "decay": "mild", "normalize": True, "eps": 1e-6},
        {"feature_map": "identity", "initial_state": True},
        {"feature_map": "relu", "decay": "steep", "T": 40, "cu_seqlens": [0, 15, 15, 40]},
    ],
)
def test_float64_reference_is_within_its_bound_of_double_double(options: dict[str, Any]) -> None:
    from linattn_verify.linear_attn.recipe import PrecisionRecipe

    problem = make_problem(9, **{"T": 128, "K": 16, "V": 16, **options})
    recipe = PrecisionRecipe(
        form="parallel", accumulation="float64", dots_on_path=0, decay_scan="global"
    )
    bounds = forward_bounds(problem.to(torch.float64), recipe)
    o64, S64 = parallel_reference(problem.to(torch.float64))
    dd = dd_forward(problem)
    exact_ish = torch.from_numpy(dd.o[0]) + torch.from_numpy(dd.o[1])
    assert_within((o64 - exact_ish).abs(), bounds.o, "o float64 vs dd")
    S = S64[0] if isinstance(S64, tuple) else S64
    assert S is not None
    S_dd = torch.from_numpy(dd.final_state[0]) + torch.from_numpy(dd.final_state[1])
    assert bounds.final_state is not None
    assert_within((S - S_dd).abs(), bounds.final_state, "S float64 vs dd")
    # The check has teeth: the same reference evaluated in float32 is far outside the bound.
    o32, _ = parallel_reference(problem.to(torch.float32))
    with pytest.raises(AssertionError):
        assert_within((o32.double() - exact_ish).abs(), bounds.o, "float32 reference")


# The public oracle().


def test_oracle_dispatches_to_each_method() -> None:
    problem = make_problem(12, T=10, feature_map="elu1", decay="mild", normalize=True, eps=1e-6)
    args = (problem.q, problem.k, problem.v, problem.g)
    kw: dict[str, Any] = {"normalize": True, "eps": 1e-6, "feature_map": "elu1"}
    o64, _ = api.oracle(*args, **kw, method="float64")
    assert torch.equal(o64, parallel_reference(problem.to(torch.float64))[0])
    o_dd, _ = api.oracle(*args, **kw, method="double-double")
    assert torch.equal(o_dd, double_double_oracle(problem)[0])
    o_mp, _ = api.oracle(*args, **kw, method="mpmath")
    assert torch.equal(o_mp, mpmath_oracle(problem)[0])
    o_auto, state = api.oracle(*args, **kw)
    assert torch.equal(o_auto, o_dd)
    assert state is None
    assert o_auto.dtype == torch.float64
    assert o_auto.shape == problem.v.shape
    # Both round once from values far closer than an ulp: they agree bitwise.
    assert torch.equal(o_dd, o_mp)


def test_oracle_returns_the_final_state_in_the_documented_structure() -> None:
    problem = make_problem(13, T=6, feature_map="relu", initial_state=True)
    _, S = api.oracle(
        problem.q,
        problem.k,
        problem.v,
        feature_map="relu",
        initial_state=problem.initial_state,
        output_final_state=True,
    )
    assert isinstance(S, torch.Tensor)
    assert S.shape == problem.initial_state.shape  # type: ignore[union-attr]
    _, pair = api.oracle(
        problem.q,
        problem.k,
        problem.v,
        normalize=True,
        output_final_state=True,
        cu_seqlens=torch.tensor([0, 2, 6]),
    )
    assert isinstance(pair, tuple)
    assert pair[0].shape == (2, 2, 5, 3)
    assert pair[1].shape == (2, 2, 5)


def test_oracle_converts_low_precision_inputs_exactly() -> None:
    problem = make_problem(14, T=8, feature_map="elu1", dtype=torch.bfloat16)
    low, _ = api.oracle(problem.q, problem.k, problem.v, feature_map="elu1")
    high, _ = api.oracle(
        problem.q.double(), problem.k.double(), problem.v.double(), feature_map="elu1"
    )
    assert torch.equal(low, high)


def test_oracle_auto_rule_switches_to_float64_for_large_problems() -> None:
    small = make_problem(0, T=4)
    assert api.resolve_method(small, "auto") == "double-double"
    long = validate_problem(*(torch.zeros(1, 4097, 1, 1) for _ in range(3)))
    assert api.resolve_method(long, "auto") == "float64"
    wide = validate_problem(*(torch.zeros(1, 2048, 1, 64) for _ in range(3)))
    assert api.dd_operation_count(wide) > api.AUTO_MAX_DD_OPERATIONS
    assert api.resolve_method(wide, "auto") == "float64"
    assert api.resolve_method(wide, "mpmath") == "mpmath"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "quad"}, "method='quad'"),
        ({"method": None}, "method=None"),
        ({"feature_map": "cosformer"}, "feature_map='cosformer'"),
        ({"eps": -1.0, "normalize": True}, "eps"),
        ({"scale": "big"}, "scale"),
    ],
)
def test_oracle_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    q = torch.randn(1, 3, 1, 2)
    with pytest.raises(InvalidArgument, match=match):
        api.oracle(q, q, q, **kwargs)


def test_oracle_rejects_malformed_tensors_naming_them() -> None:
    q = torch.randn(1, 3, 1, 2)
    with pytest.raises(InvalidArgument, match="Expected q"):
        api.oracle(q.numpy(), q, q)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="Expected v"):
        api.oracle(q, q, q[:, :2])
    with pytest.raises(InvalidArgument, match="dps"):
        mpmath_forward(make_problem(0, T=2), dps=5)
    with pytest.raises(InvalidArgument, match="form"):
        dd_forward(make_problem(0, T=2), form="recurrent")  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk_size", [0, -3, 2.0, True, "64"])
def test_chunk_size_is_validated(chunk_size: Any) -> None:
    problem = make_problem(0, T=4, K=2, V=2)
    with pytest.raises(InvalidArgument, match="chunk_size"):
        chunk_reference(problem, chunk_size)


@pytest.mark.parametrize("reference", [chunk_reference, recurrent_reference])
def test_references_reject_a_non_problem(reference: Any) -> None:
    with pytest.raises(InvalidArgument, match="validate_problem"):
        reference(torch.zeros(1, 2, 1, 2))
