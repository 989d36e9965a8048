# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Vector gates (issue #13): g ``[B, T, H, K]``, one log decay per key dimension.

S_t = diag(exp(g_t)) S_{t-1} + φ(k_t) v_t^T and z_t = exp(g_t) ⊙ z_{t-1} + φ(k_t). These tests
pin the validation, the scalar gate as the vector gate repeated over K, the agreement of the
float64 forms with each other and with the double-double and mpmath oracles, the chunk form's
range (no factored exp(G_i)/exp(G_j)), the gradients, and the guards of the parts (bounds,
kernels) that do not take vector gates yet.

Accuracy is judged relative to M, the same computation on absolute values
(docs/error-model.md §2.1), and for normalized outputs M^o = (M^N + |o| M^Z) / |Z|.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis.errors import NoSuchExample

from linattn_verify import oracle
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.double_double import double_double_oracle
from linattn_verify.linear_attn.oracles.mpmath_oracle import mpmath_oracle
from linattn_verify.linear_attn.oracles.parallel import State, parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.strategies import (
    DECAY_FAMILIES,
    VECTOR_DECAY_FAMILIES,
    ProblemSpec,
    kernel_specs,
)
from linattn_verify.linear_attn.strategies._tensors import LOGSIGMOID_NORMALIZERS, decay_values
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds
from linattn_verify.registry import reference_kernels
from linattn_verify.typing import Gate

F64 = torch.float64
# Float64 forms against each other and against mpmath, relative to M. Each output is a sum of
# at most L products of float64 values (error <= ~L·u·M), and each decay weight exp(G_t - G_j)
# carries the rounding of the cumulative sums, an absolute error of ~L·u·max|G| in the exponent,
# so a relative error of ~u·L·max|G| (global sums; chunk-local ones are smaller). The steepest
# cases here have L <= 64 and max|G| <= 2000: (64 + 64·2000)·2^-53 ≈ 1.4e-11. 1e-10 leaves a
# margin of ~7 while catching any error in the formulas (those are O(1) relative).
F64_TOL = 1e-10
# Scalar gate ≡ vector gate repeated: the same quantities by a different association of the
# products (Σ_m q_m k_m W vs W Σ_m q_m k_m) in a form whose cumulative sums are the same, so
# only a few roundings per term differ: L·u·M-sized, 1e-12 ≫ 64·2^-53 ≈ 7e-15.
REPEAT_TOL = 1e-12
# Double-double against mpmath at 50 digits (166 bits): dd carries ~2^-100 per operation,
# 2^-90·M leaves a margin for the sums (~27 significant digits agreed on).
DD_TOL = 2.0**-90


def gates(gen: torch.Generator, B: int, T: int, H: int, K: int, family: str) -> torch.Tensor:
    """A vector gate ``[B, T, H, K]`` of one family.

    ``steep``: per dimension a random steepness up to -20 per step, dimension 1 exactly 0 (no
    decay), the last dimension far steeper (-30 per step: |G| passes 709 within 24 tokens).
    ``cliff``: dimension 0 falls by -60 per step for the first quarter of tokens (|G| > 800)
    and is then exactly 0, so the later weights of that dimension are exactly 1 while
    exp(G_t) / exp(G_j) would be 0 / 0; the other dimensions are mild.
    """
    u = torch.rand(B, T, H, K, generator=gen, dtype=F64)
    if family == "mild":
        return -0.5 * u
    if family == "steep":
        steepness = 20 * torch.rand(1, 1, H, K, generator=gen, dtype=F64)
        g = -steepness * u
        g[..., 1 % K] = 0.0
        g[..., -1] = -30 * (0.5 + 0.5 * u[..., -1])
        return g
    if family == "cliff":
        g = -0.3 * u
        g[:, : max(1, T // 4), :, 0] = -60.0
        g[:, max(1, T // 4) :, :, 0] = 0.0
        return g
    raise AssertionError(family)


def make_problem(
    seed: int,
    *,
    T: int = 24,
    H: int = 2,
    K: int = 5,
    V: int = 3,
    family: str = "steep",
    feature_map: str = "elu1",
    normalize: bool = False,
    initial_state: bool = True,
    cu_seqlens: list[int] | None = None,
    dtype: torch.dtype = F64,
) -> Problem:
    gen = torch.Generator().manual_seed(seed)
    B = 1 if cu_seqlens is not None else 2
    N = B if cu_seqlens is None else len(cu_seqlens) - 1

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=F64)

    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
    g = gates(gen, B, T, H, K, family)
    state: Any = None
    if initial_state:
        state = randn(N, H, K, V)
        if normalize:
            state = (state, torch.rand(N, H, K, generator=gen, dtype=F64))
    return validate_problem(
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        g.to(dtype),
        feature_map=feature_map,
        normalize=normalize,
        initial_state=state if dtype == F64 or state is None else _cast(state, dtype),
        output_final_state=True,
        cu_seqlens=None if cu_seqlens is None else torch.tensor(cu_seqlens),
    )


def _cast(state: Any, dtype: torch.dtype) -> Any:
    if isinstance(state, tuple):
        return tuple(x.to(dtype) for x in state)
    return state.to(dtype)


def tensors(result: tuple[torch.Tensor, State]) -> list[torch.Tensor]:
    o, state = result
    if state is None:
        return [o]
    return [o, *(state if isinstance(state, tuple) else (state,))]


def magnitudes(problem: Problem) -> list[torch.Tensor]:
    """M for o, S_T and (normalized) z_T: the float64 parallel form on absolute values."""
    p = problem.to(F64)
    fq = apply_feature_map(p.q, p.feature_map)
    fk = apply_feature_map(p.k, p.feature_map)
    common = {"output_final_state": True, "cu_seqlens": p.cu_seqlens}

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, S0: Any, s: float) -> Any:
        return parallel_reference(
            validate_problem(q, k, v, p.g, scale=s, initial_state=S0, **common)
        )

    S0 = None if p.initial_state is None else p.initial_state.abs()
    M_N, M_S = run(fq.abs(), fk.abs(), p.v.abs(), S0, abs(p.scale))
    if not p.normalize:
        return [M_N, M_S]
    ones = torch.ones_like(p.v[..., :1])
    z0 = None if p.initial_key_sum is None else p.initial_key_sum[..., None]
    M_Z, M_z = run(fq.abs(), fk.abs(), ones, None if z0 is None else z0.abs(), abs(p.scale))
    Z, _ = run(fq, fk, ones, z0, p.scale)
    Z = Z + p.eps
    o, _ = parallel_reference(p)
    M_o = (M_N + o.abs() * (M_Z + p.eps)) / Z.abs()
    return [M_o, M_S, M_z[..., 0]]


def assert_close(
    actual: tuple[torch.Tensor, State],
    expected: tuple[torch.Tensor, State],
    problem: Problem,
    tol: float,
) -> None:
    __tracebackhide__ = True
    names = ["o", "S_T", "z_T"]
    for name, a, b, M in zip(
        names, tensors(actual), tensors(expected), magnitudes(problem), strict=False
    ):
        assert a.shape == b.shape, name
        assert bool(torch.isfinite(a).all()), f"{name} holds non-finite values"
        err = (a.to(F64) - b.to(F64)).abs()
        # The smallest normal float64 absorbs values that underflow in one form only.
        allowed = tol * M + 2.0**-1000
        worst = float((err / allowed).max()) if err.numel() else 0.0
        assert worst <= 1.0, f"{name}: max err/allowed = {worst:.3g} (tol {tol:.1e}·M)"


def repeated(problem: Problem) -> Problem:
    """The same problem with its scalar gate g ``[B, T, H]`` repeated over K."""
    assert problem.g is not None
    assert problem.g.ndim == 3
    K = problem.q.shape[-1]
    return problem.with_tensors(g=problem.g[..., None].expand(*problem.g.shape, K))


# -- validation -------------------------------------------------------------------------------

B, T, H, K, V = 2, 5, 3, 4, 6


def _validate(g: Any) -> Problem:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, T, H, K, generator=gen)
    return validate_problem(q, q.clone(), torch.randn(B, T, H, V, generator=gen), g)


@pytest.mark.parametrize("shape", [(B, T, H), (B, T, H, K)], ids=["scalar", "vector"])
def test_validate_accepts_scalar_and_vector_gates(shape: tuple[int, ...]) -> None:
    g = -torch.rand(*shape)
    problem = _validate(g)
    assert problem.g is g
    assert problem.vector_gate == (len(shape) == 4)
    assert not _validate(None).vector_gate


@pytest.mark.parametrize(
    ("g", "match"),
    [
        (-torch.rand(B, T, H, K + 1), r"g of shape \[B, T, H\] or \[B, T, H, K\]"),
        (-torch.rand(B, T, H + 1, K), r"g of shape"),
        (torch.rand(B, T, H, K), r"g <= 0"),
        (torch.full((B, T, H, K), float("nan")), r"every element of g to be finite"),
        (torch.full((B, T, H, K), -float("inf")), r"every element of g to be finite"),
        (-torch.rand(B, T, H, K, 1), r"g of shape \[B, T, H\] or \[B, T, H, K\]"),
        (-torch.rand(B, T), r"g of shape \[B, T, H\] or \[B, T, H, K\]"),
        (-torch.randint(0, 3, (B, T, H, K)), r"g to be float16"),
    ],
    ids=["last-dim", "heads", "positive", "nan", "-inf", "5d", "2d", "int"],
)
def test_validate_rejects_malformed_vector_gates(g: torch.Tensor, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        _validate(g)


def test_problem_methods_keep_the_vector_gate() -> None:
    problem = make_problem(0, T=6, dtype=torch.float32)
    assert problem.g is not None
    assert problem.vector_gate
    as64 = problem.to(F64)
    assert as64.vector_gate
    assert as64.g is not None
    assert as64.g.dtype == F64
    assert torch.equal(as64.g, problem.g.to(F64))
    assert "vector decay g[B,T,H,K]" in problem.describe()
    assert problem.inputs()["g"] is problem.g
    leafy, leaves = problem.with_grad_leaves()
    assert leafy.vector_gate
    assert leaves["g"].shape == problem.g.shape
    assert not problem.with_tensors(g=problem.g[..., 0]).vector_gate


# -- scalar gate ≡ vector gate repeated -------------------------------------------------------

FORMS = [("parallel", None), ("chunk", 1), ("chunk", 4), ("chunk", 16), ("recurrent", None)]


def run_form(form: str, chunk_size: int | None, problem: Problem) -> tuple[torch.Tensor, State]:
    if form == "parallel":
        return parallel_reference(problem)
    if form == "chunk":
        assert chunk_size is not None
        return chunk_reference(problem, chunk_size=chunk_size)
    return recurrent_reference(problem)


def _scalar_problem(seed: int, normalize: bool) -> Problem:
    base = make_problem(seed, T=21, normalize=normalize)
    assert base.g is not None
    # A steep scalar gate (|G| up to ~200) with some steps exactly 0.
    g = base.g[..., 0].clone()
    g[:, ::5] = 0.0
    return base.with_tensors(g=g)


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalized"])
@pytest.mark.parametrize(("form", "chunk_size"), FORMS, ids=[f"{f}-{c}" for f, c in FORMS])
def test_scalar_gate_equals_vector_gate_repeated(
    form: str, chunk_size: int | None, normalize: bool
) -> None:
    scalar = _scalar_problem(3, normalize)
    vector = repeated(scalar)
    got = run_form(form, chunk_size, vector)
    want = run_form(form, chunk_size, scalar)
    if form == "recurrent":
        # The same arithmetic: exp(g_t) per dimension is the scalar factor, multiplied into the
        # same state elements in the same order, so the results are bit-identical.
        for a, b in zip(tensors(got), tensors(want), strict=True):
            assert torch.equal(a, b)
    else:
        assert_close(got, want, scalar, REPEAT_TOL)


# -- the float64 forms agree on vector gates --------------------------------------------------

CASES = [
    pytest.param({"family": "mild"}, id="mild"),
    pytest.param({"family": "steep"}, id="steep"),
    pytest.param({"family": "cliff", "T": 40}, id="cliff"),
    pytest.param({"family": "steep", "normalize": True}, id="steep-normalized"),
    pytest.param({"family": "cliff", "normalize": True, "T": 40}, id="cliff-normalized"),
    pytest.param({"family": "steep", "feature_map": "identity"}, id="steep-identity"),
    pytest.param({"family": "steep", "initial_state": False}, id="steep-no-state"),
    pytest.param({"family": "steep", "cu_seqlens": [0, 7, 7, 20, 24]}, id="steep-varlen"),
    pytest.param(
        {"family": "cliff", "T": 40, "cu_seqlens": [0, 1, 33, 40], "normalize": True},
        id="cliff-varlen-normalized",
    ),
]


@pytest.mark.parametrize("options", CASES)
def test_float64_forms_agree_on_vector_gates(options: dict[str, Any]) -> None:
    problem = make_problem(11, **options)
    reference = recurrent_reference(problem)
    assert_close(parallel_reference(problem), reference, problem, F64_TOL)
    for chunk_size in (1, 3, 8, 64):
        assert_close(chunk_reference(problem, chunk_size=chunk_size), reference, problem, F64_TOL)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"family": "steep", "T": 12}, id="steep"),
        pytest.param({"family": "cliff", "T": 16, "normalize": True}, id="cliff-normalized"),
        pytest.param(
            {"family": "steep", "T": 12, "cu_seqlens": [0, 5, 5, 12], "feature_map": "relu"},
            id="steep-varlen-relu",
        ),
    ],
)
def test_high_precision_oracles_agree_on_vector_gates(options: dict[str, Any]) -> None:
    problem = make_problem(5, H=2, K=4, V=2, **options)
    # mpmath at 50 digits (166 bits) in both of its forms: the ground truth.
    truth = mpmath_oracle(problem, form="parallel")
    assert_close(mpmath_oracle(problem, form="recurrent"), truth, problem, DD_TOL)
    for form, chunk_size in (("parallel", None), ("chunk", 3), ("chunk", 5)):
        dd = double_double_oracle(problem, form=form, chunk_size=chunk_size)  # type: ignore[arg-type]
        assert_close(dd, truth, problem, DD_TOL)
    for form, C in (("parallel", None), ("chunk", 4), ("recurrent", None)):
        assert_close(run_form(form, C, problem), truth, problem, F64_TOL)


def test_oracle_entry_point_takes_vector_gates() -> None:
    problem = make_problem(2, T=10, K=3, V=2, normalize=True, dtype=torch.float32)
    args = (problem.q, problem.k, problem.v, problem.g)
    options = {
        "normalize": True,
        "feature_map": "elu1",
        "initial_state": problem.state_arg,
        "output_final_state": True,
    }
    truth = mpmath_oracle(problem)
    for method in ("float64", "double-double", "mpmath", "auto"):
        tol = F64_TOL if method == "float64" else DD_TOL
        assert_close(oracle(*args, method=method, **options), truth, problem, tol)


# -- the chunk form's range -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
def test_chunk_form_stays_finite_when_decay_accumulates_in_some_dims(dtype: torch.dtype) -> None:
    # Dimension 0 falls by -60 per step over the first 16 tokens (G = -960 < -800, across
    # chunks for C = 4, 8 and inside one for C = 32), then stays flat; the last dimension falls
    # by -30 per step throughout (G < -800 after 27 tokens); the others are mild.
    problem = make_problem(7, T=64, K=6, V=4, family="cliff", normalize=True, dtype=dtype)
    g = problem.g
    assert g is not None
    g = g.clone()
    g[..., -1] = -30.0
    problem = problem.with_tensors(g=g)
    G = torch.cumsum(g.to(F64), dim=1)
    assert float(G[..., 0].min()) < -800
    assert float(G[..., -1].min()) < -800
    # The factored weights exp(G_t) / exp(G_j) would overflow (float64 past |G| = 709, float32
    # past 88) and give 0/0 where dimension 0 is flat: the case exercises what it claims to.
    assert bool(torch.isinf(torch.exp(-G)).any())
    assert bool(torch.isnan(torch.exp(G[:, 20:, :, 0]) / torch.exp(G[:, 16:17, :, 0])).any())
    reference = recurrent_reference(problem.to(F64))
    # float32 (u32 = 2^-24 ≈ 6e-8): sums of <= C = 32 products cost ~C·u32 ≈ 2e-6 of M; the
    # steep gates are integers, so their float32 cumulative sums are exact, and the mild ones
    # reach |Gl| <= 0.3·32 ≈ 10 in a chunk, an exponent error of <= C·u32·|Gl| ≈ 2e-5. 1e-4
    # leaves a margin of ~5 over that worst case (a factored exp(G_i)/exp(G_j) gives inf/NaN).
    tol = F64_TOL if dtype == F64 else 1e-4
    for chunk_size in (4, 8, 32):
        actual = chunk_reference(problem, chunk_size=chunk_size)
        for x in tensors(actual):
            assert x.dtype == dtype
            assert bool(torch.isfinite(x).all())
        assert_close(actual, reference, problem, tol)


# -- gradients --------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalized"])
@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunk"])
def test_float64_forms_gradcheck_vector_gates(form: str, normalize: bool) -> None:
    problem = make_problem(13, T=5, H=1, K=3, V=2, family="mild", normalize=normalize)
    assert problem.g is not None
    # gradcheck perturbs by 1e-6; keep g away from 0 so the perturbed gate stays a decay.
    leaves = {
        "q": problem.q.clone(),
        "k": problem.k.clone(),
        "v": problem.v.clone(),
        "g": (problem.g - 0.1).clone(),
    }
    if normalize:
        assert problem.initial_key_sum is not None
        leaves["initial_key_sum"] = problem.initial_key_sum.clone()
    leaves["initial_state"] = problem.initial_state.clone()  # type: ignore[union-attr]
    names = list(leaves)

    def f(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = problem.with_tensors(**dict(zip(names, xs, strict=True)))
        return tuple(tensors(run_form(form, 2 if form == "chunk" else None, p)))

    inputs = tuple(x.requires_grad_(True) for x in leaves.values())
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


# -- guards -----------------------------------------------------------------------------------


def test_forward_and_backward_bounds_take_vector_gates() -> None:
    # Both bounds cover vector gates (tests/unit/test_bounds_vector.py judges them); dg has
    # g's shape [B, T, H, K].
    problem = make_problem(1, T=4, dtype=torch.float32)
    recipe = PrecisionRecipe(form="parallel", dots_on_path=0, decay_scan="global")
    bounds = forward_bounds(problem, recipe)
    assert bounds.o.shape == problem.v.shape
    assert bool(torch.isfinite(bounds.o).all())
    grads = backward_bounds(problem, recipe, do=torch.ones_like(problem.v))
    assert problem.g is not None
    for what in ("reference", "bound", "magnitude", "count"):
        assert getattr(grads["g"], what).shape == problem.g.shape
    assert bool(torch.isfinite(grads["g"].bound).all())


@pytest.mark.parametrize("gates", [("scalar",), ("vector",), ("scalar", "vector")])
def test_kernels_are_given_only_the_gate_shapes_they_declare(gates: tuple[Gate, ...]) -> None:
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a kernel must not be called on a problem it does not support")

    caps = Capabilities(
        decay=True,
        gates=gates,
        varlen=True,
        normalize=(False, True),
        configurable=True,
        feature_maps=("identity", "elu1", "relu"),
    )
    kernel = Kernel("test/gated", fn, caps, PrecisionRecipe(form="chunk"))
    vector = make_problem(1, T=4, dtype=torch.float32)
    assert vector.g is not None
    scalar = vector.with_tensors(g=vector.g[..., 0])
    ungated = vector.with_tensors(g=None)
    expected_vector = (
        None
        if "vector" in gates
        else (f"test/gated: vector gates (g [B, T, H, K]) not declared (gates={gates})")
    )
    expected_scalar = (
        None
        if "scalar" in gates
        else (f"test/gated: scalar gates (g [B, T, H]) not declared (gates={gates})")
    )
    assert kernel.supports(vector) == expected_vector
    assert kernel.supports(scalar) == expected_scalar
    assert kernel.supports(ungated) is None


def test_capabilities_reject_unknown_gate_shapes() -> None:
    with pytest.raises(InvalidArgument, match="gates"):
        Capabilities(decay=True, gates=("matrix",))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="gates"):
        Capabilities(decay=True, gates=())


@given(spec=kernel_specs(reference_kernels()[0], max_seq_len=12, max_head_dim=6))
@settings(max_examples=40, deadline=None)
def test_kernel_specs_draw_both_gate_shapes_for_a_kernel_declaring_both(spec: ProblemSpec) -> None:
    problem = spec.build()
    assert problem.vector_gate == (spec.gate == "vector")
    if spec.gate == "vector":
        assert spec.decay in VECTOR_DECAY_FAMILIES
        assert spec.decay != "none"
    else:
        assert spec.decay in DECAY_FAMILIES


# Hypothesis finds and shrinks one case per option (11 to 18 s): with `-m slow`.
@pytest.mark.slow
def test_kernel_specs_reach_vector_gates_and_their_own_families() -> None:
    strategy = kernel_specs(reference_kernels()[0], max_seq_len=12, max_head_dim=6)
    for family in ("mixed", "overflowing_some"):
        found = find(strategy, lambda s, f=family: s.decay == f)
        assert found.gate == "vector"
    # A scalar-only kernel is never drawn a vector gate.
    scalar_only = replace(
        reference_kernels()[0],
        capabilities=replace(reference_kernels()[0].capabilities, gates=("scalar",)),
    )
    with pytest.raises(NoSuchExample):
        find(kernel_specs(scalar_only, max_seq_len=12), lambda s: s.gate == "vector")


def test_problem_spec_rejects_a_vector_gate_without_decay() -> None:
    with pytest.raises(InvalidArgument, match="gate='vector' with decay='none'"):
        ProblemSpec(1, 2, 1, 2, 2, "float32", "identity", False, 0.0, None, "normal", "none",
                    False, False, None, 0, gate="vector")  # fmt: skip
    with pytest.raises(InvalidArgument, match="decay"):
        ProblemSpec(1, 2, 1, 2, 2, "float32", "identity", False, 0.0, None, "normal", "mixed",
                    False, False, None, 0)  # fmt: skip


# The vector-gate families of the strategies (`VECTOR_DECAY_FAMILIES`).


@pytest.mark.parametrize("family", VECTOR_DECAY_FAMILIES[1:])
def test_vector_gate_families_are_valid_gates(family: str) -> None:
    shape = (2, 40, 3, 6)
    g = decay_values(family, shape, torch.Generator().manual_seed(5))
    assert g is not None
    assert g.shape == shape
    assert bool(torch.isfinite(g).all())
    assert bool((g <= 0).all())
    gen = torch.Generator().manual_seed(5)
    assert torch.equal(g, decay_values(family, shape, gen)), "the same seed draws the same gate"


def test_vector_gate_families_have_their_character() -> None:
    shape = (1, 64, 4, 8)

    def draw(family: str, seed: int = 1) -> torch.Tensor:
        g = decay_values(family, shape, torch.Generator().manual_seed(seed))
        assert g is not None
        return g.double()

    # mixed: per head, dimensions that never decay next to ones that decay steeply.
    mixed = draw("mixed")
    per_dim = mixed.min(dim=1).values[0]  # [H, K]: each dimension's steepest step
    assert bool((per_dim == 0).any())
    assert bool((per_dim < -1).any())
    # one_steep: exactly one dimension per head steeper than -10 on every token.
    steep_dims = (draw("one_steep") <= -10).all(dim=1)[0]  # [H, K]
    assert steep_dims.sum(-1).tolist() == [1] * shape[2]
    # overflowing_some: |G| > 88 within 16 tokens in some dimensions of each head, not all.
    G16 = draw("overflowing_some")[:, :16].sum(1)[0]  # [H, K]
    over = G16 < -88
    assert bool(over.any(-1).all())
    assert not bool(over.all(-1).any())
    # logsigmoid: FLA's gates, logsigmoid(x) / c for one c of the normalizers per draw.
    steps = {round(float(draw("logsigmoid", seed).min()), 6) for seed in range(12)}
    assert min(steps) < -1.0 / LOGSIGMOID_NORMALIZERS[0], "some draws use c = 0.01"


def test_vector_only_families_need_a_vector_shape() -> None:
    with pytest.raises(InvalidArgument, match="vector-gate family"):
        decay_values("mixed", (1, 4, 2), torch.Generator())
    with pytest.raises(InvalidArgument, match="must be one of"):
        decay_values("spiky", (1, 4, 2, 3), torch.Generator())


@pytest.mark.parametrize("family", VECTOR_DECAY_FAMILIES[1:])
def test_chunk_form_follows_every_vector_gate_family(family: str) -> None:
    # The float64 chunked form against the recurrent one on each family: finite where the gate
    # overflows exp within a chunk in some dimensions (overflowing_some, logsigmoid with c = 0.01).
    gen = torch.Generator().manual_seed(9)
    B, T, H, K, V = 1, 40, 2, 4, 3
    q, k, v = (torch.randn(B, T, H, D, generator=gen, dtype=F64) for D in (K, K, V))
    g = decay_values(family, (B, T, H, K), gen)
    assert g is not None
    problem = validate_problem(q, k, v, g.double(), output_final_state=True)
    reference = recurrent_reference(problem)
    for chunk_size in (4, 16):
        assert_close(chunk_reference(problem, chunk_size=chunk_size), reference, problem, F64_TOL)
