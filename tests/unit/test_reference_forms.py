# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Meta tests of the float64 references: the three forms against each other and closed forms."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from linattn_verify.linear_attn.feature_maps import apply_feature_map, feature_map_derivative
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.parallel import State, parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.tolerance import forward_bounds

F64 = torch.float64
FEATURE_MAPS = ("identity", "elu1", "relu")
FORMS = ("parallel", "chunk", "recurrent")
# Gate families of docs/bug-classes.md: none, exactly 0, mild, steep (down to -20 per step, so |G|
# passes 88 inside any chunk of 5 or more), a steady -12..-8 (|G| > 88 inside a chunk of 8), and
# a cliff of -60..-30 whose |G| passes 709 (where float64 exp overflows) inside a chunk of 24.
DECAYS = ("none", "zero", "mild", "steep", "steady", "cliff")

# The number of examples comes from the Hypothesis profile (dev, ci, nightly).
local_settings = settings(deadline=None)


def run_form(form: str, problem: Problem, chunk_size: int) -> tuple[torch.Tensor, State]:
    if form == "parallel":
        return parallel_reference(problem)
    if form == "chunk":
        return chunk_reference(problem, chunk_size)
    return recurrent_reference(problem)


def float64_recipe(form: str, chunk_size: int) -> PrecisionRecipe:
    scan = {"parallel": "global", "chunk": "chunk_local", "recurrent": "per_step"}[form]
    return PrecisionRecipe(
        form=form,  # type: ignore[arg-type]
        chunk_size=chunk_size,
        accumulation="float64",
        dots_on_path=0,
        decay_scan=scan,  # type: ignore[arg-type]
    )


def flat_state(state: State) -> list[torch.Tensor]:
    if state is None:
        return []
    if isinstance(state, tuple):
        return list(state)
    return [state]


@dataclass(frozen=True)
class Spec:
    """Everything drawn for one problem; `build` turns it into float64 tensors."""

    lengths: tuple[int, ...] | None  # packed sequence lengths, or None for a plain batch
    B: int
    T: int
    H: int
    K: int
    V: int
    feature_map: str
    normalize: bool
    eps: float
    decay: str
    scale: float | None
    initial_state: bool
    seed: int

    def build(self, dtype: torch.dtype = F64, requires_grad: bool = False) -> dict[str, Any]:
        gen = torch.Generator().manual_seed(self.seed)
        B, T, H, K, V = self.B, self.T, self.H, self.K, self.V

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=F64)

        def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
            return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=F64)

        g = {
            "none": None,
            "zero": torch.zeros(B, T, H, dtype=F64),
            "mild": uniform(-0.1, 0.0, B, T, H),
            "steep": uniform(-20.0, 0.0, B, T, H),
            "steady": uniform(-12.0, -8.0, B, T, H),
            "cliff": uniform(-60.0, -30.0, B, T, H),
        }[self.decay]
        N = len(self.lengths) if self.lengths is not None else B
        state: Any = None
        if self.initial_state:
            S0 = randn(N, H, K, V)
            # A key sum is a sum of features; keep it >= 0 where the features are.
            z0 = randn(N, H, K) if self.feature_map == "identity" else uniform(0, 2, N, H, K)
            state = (S0, z0) if self.normalize else S0
        cu = None
        if self.lengths is not None:
            cu = torch.tensor([0, *itertools.accumulate(self.lengths)], dtype=torch.int64)
        tensors = {"q": randn(B, T, H, K), "k": randn(B, T, H, K), "v": randn(B, T, H, V), "g": g}
        if requires_grad:
            for x in [*tensors.values(), *flat_state(state)]:
                if x is not None:
                    x.requires_grad_(True)
        if dtype != F64:
            # Round every input (the state too) so the problem holds what a kernel receives.
            tensors = {name: None if x is None else x.to(dtype) for name, x in tensors.items()}
            if isinstance(state, tuple):
                state = tuple(x.to(dtype) for x in state)
            elif state is not None:
                state = state.to(dtype)
        return {
            **tensors,
            "scale": self.scale,
            "normalize": self.normalize,
            "eps": self.eps,
            "feature_map": self.feature_map,
            "initial_state": state,
            "output_final_state": True,
            "cu_seqlens": cu,
        }

    def problem(self) -> Problem:
        return validate_problem(**self.build())


@st.composite
def specs(
    draw: st.DrawFn,
    *,
    max_len: int = 40,
    feature_maps: tuple[str, ...] = FEATURE_MAPS,
    positive_when_normalized: bool = False,
) -> Spec:
    """Generate problem specs: batches or packings (with empty and length-1 segments), K != V."""
    packed = draw(st.booleans(), label="packed")
    if packed:
        lengths = tuple(
            draw(
                st.lists(st.sampled_from([0, 1, 2, 3, 7, 13]), min_size=1, max_size=5),
                label="lengths",
            )
        )
        if sum(lengths) == 0:
            lengths = (*lengths, 1)
        B, T = 1, sum(lengths)
    else:
        lengths = None
        B = draw(st.integers(1, 2), label="B")
        T = draw(st.integers(1, max_len), label="T")
    normalize = draw(st.booleans(), label="normalize")
    fmaps = feature_maps
    if normalize and positive_when_normalized:
        fmaps = tuple(f for f in feature_maps if f != "identity")
    return Spec(
        lengths=lengths,
        B=B,
        T=T,
        H=draw(st.integers(1, 3), label="H"),
        K=draw(st.integers(1, 7), label="K"),
        V=draw(st.integers(1, 6), label="V"),
        feature_map=draw(st.sampled_from(fmaps), label="feature_map"),
        normalize=normalize,
        eps=draw(st.sampled_from([0.0, 1e-6, 1.0]), label="eps") if normalize else 0.0,
        decay=draw(st.sampled_from(DECAYS), label="decay"),
        scale=draw(st.sampled_from([None, 0.37, -1.5]), label="scale"),
        initial_state=draw(st.booleans(), label="initial_state"),
        seed=draw(st.integers(0, 2**32 - 1), label="seed"),
    )


def assert_within(what: str, a: torch.Tensor, b: torch.Tensor, allowed: torch.Tensor) -> None:
    """Assert |a - b| <= allowed elementwise (NaN anywhere fails), naming the worst element."""
    __tracebackhide__ = True
    diff = (a - b).abs()
    ok = diff <= allowed
    if bool(ok.all()):
        return
    score = torch.where(ok, 0.0, diff / allowed)
    score = torch.where(torch.isnan(diff), torch.inf, score)
    worst = tuple(int(i) for i in torch.unravel_index(score.argmax(), score.shape))
    raise AssertionError(
        f"{what}: {int((~ok).sum())} / {ok.numel()} elements differ by more than allowed; "
        f"worst at {worst}: |a - b| = {float(diff[worst]):.3e} > {float(allowed[worst]):.3e} "
        f"(a = {float(a[worst])!r}, b = {float(b[worst])!r})"
    )


def check_forms_agree(spec: Spec, chunk_size: int) -> None:
    """Assert the three float64 forms agree within the sum of their bounds on ``spec``."""
    __tracebackhide__ = True
    problem = spec.problem()
    results, bounds = {}, {}
    for form in FORMS:
        results[form] = run_form(form, problem, chunk_size)
        bounds[form] = forward_bounds(problem, float64_recipe(form, chunk_size))
    for a, b in itertools.combinations(FORMS, 2):
        (o_a, state_a), (o_b, state_b) = results[a], results[b]
        assert o_a.shape == o_b.shape == problem.v.shape
        # Unverifiable elements (B^Z >= |Z|/2, identity maps only) carry an infinite bound, so
        # they pass here; the residual test judges them, and the closed forms pin them down.
        assert_within(f"o, {a} vs {b}", o_a, o_b, bounds[a].o + bounds[b].o)
        S_a, S_b = flat_state(state_a), flat_state(state_b)
        assert_within(
            f"final_state, {a} vs {b}",
            S_a[0],
            S_b[0],
            bounds[a].final_state + bounds[b].final_state,
        )
        if problem.normalize:
            assert_within(
                f"final_key_sum, {a} vs {b}",
                S_a[1],
                S_b[1],
                bounds[a].final_key_sum + bounds[b].final_key_sum,
            )


@local_settings
@given(spec=specs(), chunk_size=st.sampled_from([1, 2, 3, 4, 8, 16, 64]))
def test_forms_agree_within_the_sum_of_their_bounds(spec: Spec, chunk_size: int) -> None:
    # Two float64 computations of the same exact value x, with |x_A - x| <= B_A and
    # |x_B - x| <= B_B, differ by at most B_A + B_B: a form outside that has a bug (or the
    # bound model does).
    note(repr(spec))
    check_forms_agree(spec, chunk_size)


@pytest.mark.parametrize("decay", ["steady", "cliff"])
def test_forms_agree_where_factored_decay_would_overflow(decay: str) -> None:
    # A deterministic instance of the gate-overflow class: T = 64 in one chunk of 64, so |G|
    # inside the chunk reaches 500 (steady) or 2000 (cliff); exp(G_i) exp(-G_j) would give
    # inf * 0 there, in float32 and in float64 respectively.
    spec = Spec(None, 1, 64, 2, 4, 3, "elu1", True, 1e-6, decay, None, True, 5)
    check_forms_agree(spec, 64)
    problem32 = validate_problem(**spec.build(dtype=torch.float32))
    for form in ("chunk", "recurrent"):
        o, state = run_form(form, problem32, 64)
        assert all(bool(x.isfinite().all()) for x in (o, *flat_state(state)))


@local_settings
@given(spec=specs(max_len=24), chunk_size=st.sampled_from([1, 3, 8, 16]))
def test_float32_runs_stay_within_their_float32_bounds(spec: Spec, chunk_size: int) -> None:
    # The lead uses float32 runs of the chunk and recurrent forms as sound test subjects: their
    # error against the float64 value must sit inside the bound of a float32 recipe (IEEE adds,
    # correctly rounded division, eps rounded to float32 as the kernel adds it).
    note(repr(spec))
    inputs = spec.build(dtype=torch.float32)
    # The fp32 computation adds eps in fp32, so the function it computes has eps = fl32(eps).
    inputs["eps"] = float(torch.tensor(spec.eps, dtype=torch.float32))
    problem32 = validate_problem(**inputs)
    for form in ("chunk", "recurrent"):
        recipe = PrecisionRecipe(
            form=form,  # type: ignore[arg-type]
            chunk_size=chunk_size,
            accumulation="ieee",
            dots_on_path=0,
            decay_scan="chunk_local" if form == "chunk" else "per_step",
            division="rn",
        )
        o32, state32 = run_form(form, problem32, chunk_size)
        assert o32.dtype == torch.float32
        bounds = forward_bounds(problem32, recipe)
        exact = bounds.tensors["o"].reference
        assert_within(f"float32 {form} o", o32.double(), exact, bounds.o)
        ref = bounds.tensors["final_state"].reference
        assert_within(
            f"float32 {form} final_state", flat_state(state32)[0].double(), ref, bounds.final_state
        )


def integer_inputs(gen: torch.Generator, shape: tuple[int, ...], lo: int, hi: int) -> torch.Tensor:
    """Small integers as float64: every sum and product of a few of them is exact."""
    return torch.randint(lo, hi + 1, shape, generator=gen).to(F64)


@local_settings
@given(
    spec=specs(max_len=1),
    form=st.sampled_from(FORMS),
    chunk_size=st.sampled_from([1, 4]),
)
def test_single_token_is_the_closed_form(spec: Spec, form: str, chunk_size: int) -> None:
    # T = 1 and no initial state: o = s φ(q)·φ(k) v, and normalized with eps = 0, o = v (or 0
    # where the denominator is exactly 0). Integer inputs and a power-of-two scale make every
    # intermediate exact, so the comparison is bit-for-bit.
    gen = torch.Generator().manual_seed(spec.seed)
    H, K, V = spec.H, spec.K, spec.V
    # elu1 of a negative integer is an inexact exp; x >= 0 keeps φ(x) = x + 1 (or exp(0) = 1).
    lo = 0 if spec.feature_map == "elu1" else -3
    q = integer_inputs(gen, (1, 1, H, K), lo, 3)
    k = integer_inputs(gen, (1, 1, H, K), lo, 3)
    v = integer_inputs(gen, (1, 1, H, V), -5, 5)
    g = None if spec.decay == "none" else -torch.rand(1, 1, H, generator=gen, dtype=F64) * 20
    problem = validate_problem(
        q, k, v, g, scale=0.5, normalize=spec.normalize, feature_map=spec.feature_map
    )
    o, _ = run_form(form, problem, chunk_size)
    dot = (apply_feature_map(q, spec.feature_map) * apply_feature_map(k, spec.feature_map)).sum(-1)
    if spec.normalize:
        expected = torch.where(dot[..., None] == 0, torch.zeros_like(v), v)
    else:
        expected = 0.5 * dot[..., None] * v
    assert torch.equal(o, expected), (o, expected)


@local_settings
@given(spec=specs(), form=st.sampled_from(FORMS), chunk_size=st.sampled_from([1, 3, 16]))
def test_equal_keys_give_the_running_mean_of_values(spec: Spec, form: str, chunk_size: int) -> None:
    # Every key equal and no decay: P_tj = c_t for all j <= t, so o_t = c_t Σ v_j / (t c_t), the
    # running mean. Integers keep N and Z exact, so fl(N / Z) is the correctly rounded mean.
    gen = torch.Generator().manual_seed(spec.seed)
    B, T, H, K, V = spec.B, spec.T, spec.H, spec.K, spec.V
    # Positive integer features make c_t = φ(q_t)·φ(k) nonzero for every map.
    q = integer_inputs(gen, (B, T, H, K), 1, 3)
    k = integer_inputs(gen, (B, 1, H, K), 1, 3).expand(B, T, H, K)
    v = integer_inputs(gen, (B, T, H, V), -7, 7)
    problem = validate_problem(q, k, v, normalize=True, feature_map=spec.feature_map, scale=0.25)
    o, _ = run_form(form, problem, chunk_size)
    counts = torch.arange(1, T + 1, dtype=F64)[None, :, None, None]
    assert torch.equal(o, torch.cumsum(v, dim=1) / counts)


@local_settings
@given(
    spec=specs(max_len=12),
    form=st.sampled_from(FORMS),
    chunk_size=st.sampled_from([1, 2, 5, 64]),
)
def test_one_hot_features_pick_values_by_index(spec: Spec, form: str, chunk_size: int) -> None:
    # Identity map, scale 1, distinct one-hot keys e_{π(j)} and one-hot queries e_{i_t}: exactly
    # one term survives, o_t = v_j with π(j) = i_t if that j <= t, else 0 (normalized: Z = 1 or
    # the exactly-zero denominator). Every product is by 1 or 0 and every sum adds zeros: exact.
    gen = torch.Generator().manual_seed(spec.seed)
    B, T, H, V = spec.B, spec.T, spec.H, spec.V
    K = T + spec.K
    eye = torch.eye(K, dtype=F64)
    perm = torch.stack([torch.randperm(K, generator=gen)[:T] for _ in range(B * H)])
    perm = perm.reshape(B, H, T).transpose(1, 2)  # [B, T, H]: key slot of token j
    picks = torch.randint(0, K, (B, T, H), generator=gen)  # [B, T, H]: slot each query asks for
    q, k = eye[picks], eye[perm]
    v = torch.randn(B, T, H, V, generator=gen, dtype=F64)
    problem = validate_problem(q, k, v, normalize=spec.normalize, scale=1.0)
    o, _ = run_form(form, problem, chunk_size)
    expected = torch.zeros_like(v)
    for b, t, h in itertools.product(range(B), range(T), range(H)):
        hits = (perm[b, : t + 1, h] == picks[b, t, h]).nonzero()
        if hits.numel():
            expected[b, t, h] = v[b, int(hits[0, 0]), h]
    assert torch.equal(o, expected)


@local_settings
@given(spec=specs(), form=st.sampled_from(FORMS), chunk_size=st.sampled_from([1, 3, 16]))
def test_zero_values_give_exactly_zero_output(spec: Spec, form: str, chunk_size: int) -> None:
    # v = 0 and S_0 = 0 make every numerator term exactly zero, whatever q, k, g and scale are.
    inputs = spec.build()
    inputs["v"] = torch.zeros_like(inputs["v"])
    if spec.normalize and spec.initial_state:
        S0, z0 = inputs["initial_state"]
        inputs["initial_state"] = (torch.zeros_like(S0), z0)
    elif spec.initial_state:
        inputs["initial_state"] = torch.zeros_like(inputs["initial_state"])
    problem = validate_problem(**inputs)
    o, state = run_form(form, problem, chunk_size)
    assert not bool(o.isnan().any())
    assert bool((o == 0).all())
    assert bool((flat_state(state)[0] == 0).all())


@pytest.mark.parametrize("decay", ["none", "steep"])
@pytest.mark.parametrize("form", FORMS)
def test_zero_feature_rows_return_exactly_zero(form: str, decay: str) -> None:
    # relu with eps = 0: a row whose query features are all zero, or before any key with a
    # nonzero feature, has Z = 0 exactly and must return 0, and gradients through it stay finite.
    gen = torch.Generator().manual_seed(7)
    B, T, H, K, V = 1, 9, 2, 4, 3
    q = torch.randn(B, T, H, K, generator=gen, dtype=F64).abs()
    k = torch.randn(B, T, H, K, generator=gen, dtype=F64).abs()
    q[:, 2::3] = -q[:, 2::3]  # rows 2, 5, 8: φ(q) = 0
    k[:, :2] = -k[:, :2]  # tokens 0, 1: φ(k) = 0, so rows 0 and 1 see no key
    v = torch.randn(B, T, H, V, generator=gen, dtype=F64)
    g = None if decay == "none" else -20 * torch.rand(B, T, H, generator=gen, dtype=F64)
    leaves = [x.requires_grad_(True) for x in (q, k, v) + (() if g is None else (g,))]
    problem = validate_problem(q, k, v, g, normalize=True, feature_map="relu")
    o, _ = run_form(form, problem, 4)
    zero_rows = [0, 1, 2, 5, 8]
    assert bool((o[:, zero_rows] == 0).all())
    assert bool((o[:, [3, 4, 6, 7]] != 0).all())
    grads = torch.autograd.grad(o.sum(), leaves)
    assert all(bool(x.isfinite().all()) for x in grads)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("form", FORMS)
def test_zero_gates_equal_no_decay_bit_for_bit(form: str, normalize: bool) -> None:
    # exp(0) = 1 exactly and multiplying by 1 is exact, so g = 0 must not change a single bit.
    spec = Spec(
        None, 2, 13, 2, 5, 3, "elu1", normalize, 1e-6 if normalize else 0.0, "zero", 0.37, True, 11
    )
    with_gates = spec.build()
    without = dict(with_gates, g=None)
    o_a, state_a = run_form(form, validate_problem(**with_gates), 4)
    o_b, state_b = run_form(form, validate_problem(**without), 4)
    assert torch.equal(o_a, o_b)
    assert all(
        torch.equal(x, y) for x, y in zip(flat_state(state_a), flat_state(state_b), strict=True)
    )


def gradient_inputs(spec: Spec) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Build the inputs of ``spec`` as leaves that require grad, and name those leaves."""
    inputs = spec.build(requires_grad=True)
    leaves = {"q": inputs["q"], "k": inputs["k"], "v": inputs["v"]}
    if inputs["g"] is not None:
        leaves["g"] = inputs["g"]
    state = flat_state(inputs["initial_state"])
    # Unnormalized problems have S_0 only.
    leaves.update(zip(("S0", "z0"), state, strict=False))
    return inputs, leaves


def rebuild(inputs: dict[str, Any], leaves: dict[str, torch.Tensor], values: tuple[Any, ...]):
    """Return ``inputs`` with the leaves replaced by ``values`` (in the order of ``leaves``)."""
    new = dict(
        inputs, **{name: x for name, x in zip(leaves, values, strict=True) if name in inputs}
    )
    by_name = dict(zip(leaves, values, strict=True))
    if "S0" in by_name:
        new["initial_state"] = (by_name["S0"], by_name["z0"]) if "z0" in by_name else by_name["S0"]
    return new


GRADCHECK_SPECS = {
    # Packed, with an empty sequence and a tail chunk (C = 2 below), decay, initial state.
    "unnormalized": Spec((2, 0, 3), 1, 5, 2, 3, 2, "identity", False, 0.0, "mild", -0.7, True, 3),
    "normalized": Spec((2, 0, 3), 1, 5, 2, 3, 2, "elu1", True, 0.1, "mild", None, True, 4),
}


@pytest.mark.parametrize("case", sorted(GRADCHECK_SPECS))
@pytest.mark.parametrize("form", FORMS)
def test_gradcheck(form: str, case: str) -> None:
    # Finite differences against autograd through every output (o, S_T, z_T) and every
    # differentiable input (q, k, v, g, S_0, z_0); gates start in [-0.1, -0.0] minus a margin so
    # the perturbed g stays <= 0.
    spec = GRADCHECK_SPECS[case]
    inputs, leaves = gradient_inputs(spec)
    with torch.no_grad():
        inputs["g"].sub_(1e-3)

    def fn(*values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        o, state = run_form(form, validate_problem(**rebuild(inputs, leaves, values)), 2)
        return (o, *flat_state(state))

    assert torch.autograd.gradcheck(fn, tuple(leaves.values()), eps=1e-6, atol=1e-8, rtol=1e-6)


def gradient_magnitudes(
    problem: Problem, do: torch.Tensor, d_state: list[torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Return the gradient magnitudes M: each gradient with every term replaced by its |term|.

    The loss Σ do·o + Σ dS·S_T (+ Σ dz·z_T) is re-evaluated in the parallel form on |φ(q)|, |φ(k)|,
    |v|, |S_0|, |z_0|, |cotangents| and with the normalized quotient linearised as |do|·N/|Z| +
    (|do|·|o|) Z/|Z| (docs/error-model.md §5: R = |do|·|v| + |do|·|o|); every term is then >= 0, so
    autograd sums |terms|. The decay enters through exp(G1_t - G2_j) with two separate copies of the
    cumulative sum G, so that the row sums (G1) and column sums (G2) of dG add up instead of
    cancelling: dg_s's magnitude is Σ_{t>=s} (|dG1_t| + |dG2_t|), which bounds every form's way of
    computing it.
    """
    fmap, s = problem.feature_map, abs(problem.scale)
    o_exact, _ = parallel_reference(problem)
    qa = apply_feature_map(problem.q, fmap).abs().detach().requires_grad_(True)
    ka = apply_feature_map(problem.k, fmap).abs().detach().requires_grad_(True)
    va = problem.v.abs().detach().requires_grad_(True)
    B, T, H, K = problem.q.shape
    V = problem.v.shape[-1]
    N = problem.num_sequences
    S0a = (
        (
            problem.initial_state.abs()
            if problem.initial_state is not None
            else problem.q.new_zeros(N, H, K, V)
        )
        .detach()
        .requires_grad_(True)
    )
    z0a = (
        (
            problem.initial_key_sum.abs()
            if problem.initial_key_sum is not None
            else problem.q.new_zeros(N, H, K)
        )
        .detach()
        .requires_grad_(True)
    )
    G = torch.zeros(B, T, H, dtype=F64)
    if problem.g is not None:
        for _, b, start, end in problem.sequences():
            G[b, start:end] = torch.cumsum(problem.g[b, start:end].detach(), dim=0)
    G1, G2 = G.clone().requires_grad_(True), G.clone().requires_grad_(True)
    loss = torch.zeros((), dtype=F64)
    for n, b, start, end in problem.sequences():
        L = end - start
        if L == 0:
            continue
        q, k, v = (x[b, start:end].transpose(0, 1) for x in (qa, ka, va))  # [H, L, ·]
        g1, g2 = G1[b, start:end].transpose(0, 1), G2[b, start:end].transpose(0, 1)  # [H, L]
        mask = torch.ones(L, L, dtype=torch.bool).tril()
        W = torch.exp((g1[:, :, None] - g2[:, None, :]).masked_fill(~mask, float("-inf")))
        P = s * (q @ k.transpose(-1, -2)) * W
        w0 = torch.exp(g1)  # weight of the initial state in row t
        num = P @ v + s * w0[..., None] * (q @ S0a[n])
        dox = do[b, start:end].transpose(0, 1).abs()  # [H, L, V]
        if problem.normalize:
            den = P.sum(-1) + s * w0 * (q @ z0a[n][..., None])[..., 0]
            Z = den.detach() + problem.eps
            ox = o_exact[b, start:end].transpose(0, 1).detach().abs()
            # Rows with Z = 0 return the constant 0: no gradient flows through them.
            inv = torch.where(Z == 0, 0.0, 1 / torch.where(Z == 0, 1.0, Z.abs()))
            loss = loss + ((dox * num).sum(-1) * inv).sum() + ((dox * ox).sum(-1) * den * inv).sum()
        else:
            loss = loss + (dox * num).sum()
        w_end = torch.exp(g1[:, -1:] - g2)  # [H, L]: weight of key j in the final state
        S_T = (k * w_end[..., None]).transpose(-1, -2) @ v + torch.exp(g1[:, -1])[
            :, None, None
        ] * S0a[n]
        loss = loss + (d_state[0][n].abs() * S_T).sum()
        if problem.normalize:
            z_T = (k * w_end[..., None]).sum(1) + torch.exp(g1[:, -1])[:, None] * z0a[n]
            loss = loss + (d_state[1][n].abs() * z_T).sum()
    grads = torch.autograd.grad(loss, [qa, ka, va, S0a, z0a, G1, G2], allow_unused=True)
    d_qa, d_ka, d_va, d_S0a, d_z0a, dG1, dG2 = (torch.zeros(()) if x is None else x for x in grads)
    dG = dG1.abs() + dG2.abs()
    Mg = torch.zeros_like(G)
    for _, b, start, end in problem.sequences():
        Mg[b, start:end] = dG[b, start:end].flip(0).cumsum(0).flip(0)
    out = {
        "q": d_qa * feature_map_derivative(problem.q, fmap).abs(),
        "k": d_ka * feature_map_derivative(problem.k, fmap).abs(),
        "v": d_va,
        "g": Mg,
        "S0": d_S0a,
        "z0": d_z0a,
    }
    return {name: x.detach() for name, x in out.items()}


@local_settings
@given(
    spec=specs(max_len=12, positive_when_normalized=True),
    chunk_size=st.sampled_from([1, 3, 5]),
)
def test_gradients_of_the_forms_agree(spec: Spec, chunk_size: int) -> None:
    # Each form's float64 gradient element is Σ τ (1 + θ_τ) over the same terms τ, with |θ_τ|
    # at most a few hundred roundings (T <= 65, K, V <= 7, plus exp errors u |G| with |G| <= 800)
    # times u = 2^-53, i.e. below 1e-13; two forms then differ by < 2e-13 M, where M = Σ |τ|
    # (measured: at most 450 u M over 200 examples). A relative 1e-10 of M is therefore safe by
    # a factor of ~500, while a missing or wrong term shows up at the scale of |τ|. Normalized
    # identity maps are left out: there κ_Z is unbounded and the error is not a multiple of M.
    note(repr(spec))
    inputs, leaves = gradient_inputs(spec)
    problem = validate_problem(**inputs)
    gen = torch.Generator().manual_seed(spec.seed + 1)
    do = torch.randn(problem.v.shape, generator=gen, dtype=F64)
    _, state = parallel_reference(problem)
    d_state = [torch.randn(x.shape, generator=gen, dtype=F64) for x in flat_state(state)]
    grads = {}
    for form in FORMS:
        o, state = run_form(form, problem, chunk_size)
        loss = (o * do).sum() + sum(
            (x * d).sum() for x, d in zip(flat_state(state), d_state, strict=True)
        )
        grads[form] = dict(
            zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True)
        )
    magnitudes = gradient_magnitudes(problem, do, d_state)
    for a, b in itertools.combinations(FORMS, 2):
        for name in leaves:
            assert_within(
                f"d{name}, {a} vs {b}", grads[a][name], grads[b][name], 1e-10 * magnitudes[name]
            )
