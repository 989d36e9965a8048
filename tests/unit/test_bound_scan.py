# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The block scan of the linear family's bounds equals their dense evaluation.

`linattn_verify.linear_attn._bounds.pairwise` evaluates every pair sum of the forward and gradient
bounds in O(T) time and O(T·P) memory; the dense [L, L+1] evaluation (what sequences up to
`DENSE_TOKENS` use) is its test oracle. Small sequences with small scan blocks exercise every
path: pairs within a block, across blocks, partial blocks, decays per head and per key dimension.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.linear_attn._bounds.pairwise import Factor, Pairs, Separable
from linattn_verify.linear_attn._bounds.terms import SequenceTerms
from linattn_verify.linear_attn._bounds.units import Units
from linattn_verify.linear_attn._bounds.vector_weights import VectorWeights
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds

F64 = torch.float64
RELATIVE = 1e-9


def _problem(
    T: int,
    *,
    dtype: torch.dtype = torch.float32,
    gate: str = "scalar",
    normalize: bool = False,
    initial: bool = False,
    feature_map: str = "identity",
    steep: bool = False,
    varlen: bool = False,
    seed: int = 0,
) -> object:
    gen = torch.Generator().manual_seed(seed)
    B = 1 if varlen else 2
    q, k = torch.randn(2, B, T, 2, 6, generator=gen)
    if normalize:
        q, k = q.abs(), k.abs()
    v = torch.randn(B, T, 2, 5, generator=gen)
    g = None
    if gate != "none":
        shape = (B, T, 2, 6) if gate == "vector" else (B, T, 2)
        # steep: decays whose float64 weights underflow to 0 within the sequence.
        g = torch.nn.functional.logsigmoid(torch.randn(*shape, generator=gen) + 2)
        g = g * (400.0 if steep else 1.0)
    options: dict[str, Any] = {
        "scale": 0.4,
        "normalize": normalize,
        "eps": 1e-3 if normalize else 0.0,
        "feature_map": feature_map,
        "output_final_state": True,
    }
    if varlen:
        options["cu_seqlens"] = torch.tensor([0, T // 3, T // 3, T])
    inputs = (q.to(dtype), k.to(dtype), v.to(dtype), None if g is None else g.to(dtype))
    if initial:
        F = validate_problem(*inputs, **options).feature_dim  # the state's rows: φ's dimension
        S0 = torch.randn(B if not varlen else 3, 2, F, 5, generator=gen).abs().to(dtype)
        options["initial_state"] = (
            (S0, torch.rand(S0.shape[0], 2, F, generator=gen).to(dtype)) if normalize else S0
        )
    return validate_problem(*inputs, **options)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.dtype == torch.bool:
        assert torch.equal(a, b)
        return 0.0
    a, b = a.double(), b.double()
    assert torch.equal(torch.isfinite(a), torch.isfinite(b))
    finite = torch.isfinite(a)
    diff = (a[finite] - b[finite]).abs()
    scale = torch.maximum(a[finite].abs(), b[finite].abs())
    return float((diff / scale.clamp(min=1e-300)).max()) if diff.numel() else 0.0


def _assert_equal_bounds(dense: dict, scanned: dict) -> None:
    assert dense.keys() == scanned.keys()
    for name, bound in dense.items():
        other = scanned[name]
        for field in ("reference", "bound", "magnitude", "count", "verifiable"):
            a, b = getattr(bound, field), getattr(other, field)
            if a is None:
                assert b is None
                continue
            # The exact (signed) reference cancels: compare it relative to the magnitude.
            if field == "reference":
                scale = bound.magnitude.double().clamp(min=1e-300)
                err = ((a.double() - b.double()).abs() / scale).max()
                assert float(err) <= RELATIVE, (name, field)
                continue
            assert _relative(a, b) <= RELATIVE, (name, field)


def _both(problem: object, recipe: PrecisionRecipe, *, causal_exact: bool, block: int) -> None:
    dense = forward_bounds(problem, recipe, causal_exact=causal_exact)  # type: ignore[arg-type]
    scanned = forward_bounds(
        problem,  # type: ignore[arg-type]
        recipe,
        causal_exact=causal_exact,
        scan_block=block,
    )
    _assert_equal_bounds(dense.tensors, scanned.tensors)
    gen = torch.Generator().manual_seed(7)
    do = torch.randn(problem.v.shape, generator=gen)  # type: ignore[attr-defined]
    p: Any = problem
    N, H, F, V = p.num_sequences, p.q.shape[2], p.feature_dim, p.v.shape[-1]
    dS = torch.randn(N, H, F, V, generator=gen)
    final = (dS, torch.randn(N, H, F, generator=gen)) if p.normalize else dS
    grads = [
        backward_bounds(
            problem,  # type: ignore[arg-type]
            recipe,
            do=do,
            d_final_state=final,
            forward=fb,
            causal_exact=causal_exact,
        )
        for fb in (dense, scanned)
    ]
    _assert_equal_bounds(*grads)


RECIPES = st.builds(
    PrecisionRecipe,
    form=st.sampled_from(("chunk", "recurrent", "parallel", None)),
    decay_scan=st.sampled_from(("chunk_local", "per_step", "global")),
    chunk_size=st.sampled_from((2, 4, 8)),
    dots_on_path=st.integers(1, 2),
)


@settings(max_examples=12, deadline=None)
@given(
    recipe=RECIPES,
    gate=st.sampled_from(("none", "scalar", "vector")),
    normalize=st.booleans(),
    initial=st.booleans(),
    causal_exact=st.booleans(),
    dtype=st.sampled_from((torch.float32, torch.bfloat16, torch.float16)),
    T=st.integers(1, 29),
    block=st.sampled_from((2, 4, 8)),
    varlen=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_scan_equals_the_dense_bounds(
    recipe: PrecisionRecipe,
    gate: str,
    normalize: bool,
    initial: bool,
    causal_exact: bool,
    dtype: torch.dtype,
    T: int,
    block: int,
    varlen: bool,
    seed: int,
) -> None:
    feature_map = "elu1" if normalize else "identity"
    problem = _problem(
        T,
        dtype=dtype,
        gate=gate,
        normalize=normalize,
        initial=initial,
        feature_map=feature_map,
        varlen=varlen,
        seed=seed,
    )
    _both(problem, recipe, causal_exact=causal_exact, block=block)


@pytest.mark.parametrize("feature_map", ["taylor2", "rebased", "relu"])
def test_the_scan_equals_the_dense_bounds_for_every_feature_map(feature_map: str) -> None:
    problem = _problem(19, gate="scalar", normalize=True, initial=True, feature_map=feature_map)
    _both(problem, PrecisionRecipe(form="chunk", chunk_size=4), causal_exact=True, block=4)


@pytest.mark.parametrize("gate", ["scalar", "vector"])
@pytest.mark.parametrize("block", [4, 16])
def test_the_scan_equals_the_dense_bounds_under_steep_decays(gate: str, block: int) -> None:
    # Decays of ~50 per token: a block's span passes FACTORED_SPAN at 16 tokens (the masked
    # exp per pair), not at 4 (the factored weights); weights underflow to 0 across blocks.
    problem = _problem(33, gate=gate, steep=True, normalize=True, feature_map="elu1")
    for scan in ("chunk_local", "per_step", "global"):
        recipe = PrecisionRecipe(form="chunk", decay_scan=scan, chunk_size=4)  # type: ignore[arg-type]
        _both(problem, recipe, causal_exact=False, block=block)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("form", "scan", "gate"),
    list(
        itertools.product(
            ("chunk", "recurrent", "parallel", None),
            ("chunk_local", "per_step", "global"),
            ("none", "scalar", "vector"),
        )
    ),
)
def test_the_scan_equals_the_dense_bounds_over_the_recipe_space(
    form: str | None, scan: str, gate: str
) -> None:
    for normalize, initial, causal_exact in itertools.product((False, True), repeat=3):
        problem = _problem(37, gate=gate, normalize=normalize, initial=initial)
        recipe = PrecisionRecipe(form=form, decay_scan=scan, chunk_size=4, dots_on_path=2)  # type: ignore[arg-type]
        _both(problem, recipe, causal_exact=causal_exact, block=8)


@pytest.mark.parametrize("gate", ["scalar", "vector"])
def test_weights_that_underflow_mark_the_same_keys(gate: str) -> None:
    # Steep decays: exp(G_t - G_j) is exactly 0 in float64 for distant pairs, so a bad row
    # makes only the keys it still sees unverifiable: the scan finds the last nonzero weight
    # by bisection on the same exp.
    problem = _problem(40, gate=gate, steep=True, normalize=True, feature_map="elu1")
    p64 = problem.to(F64)  # type: ignore[attr-defined]
    recipe = PrecisionRecipe(form="chunk", chunk_size=4)
    units = Units.of(recipe, torch.float32)
    dense = SequenceTerms(p64, recipe, units, 0, 0, 0, 40)
    scanned = SequenceTerms(p64, recipe, units, 0, 0, 0, 40, scan_block=8)
    assert bool((dense.W[..., 1:] == 0).any()), "the decay must underflow for this test"
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        rows = torch.rand(2, 40, generator=gen) < 0.1
        assert torch.equal(dense.keys_seen_by(rows), scanned.keys_seen_by(rows))
    # No row marked: the scan skips its bisection; same (all-False) mask, same shape.
    none = torch.zeros(2, 40, dtype=torch.bool)
    assert torch.equal(dense.keys_seen_by(none), scanned.keys_seen_by(none))


def _factor(H: int, L: int, R: int, gen: torch.Generator, decay: str) -> Factor:
    a = torch.rand(H, L, R, generator=gen, dtype=F64)
    b = torch.rand(H, L + 1, R, generator=gen, dtype=F64)
    G = None
    if decay != "none":
        channels = R if decay == "channel" else 1
        g = -torch.rand(H, L, channels, generator=gen, dtype=F64)
        G = torch.cat([torch.zeros(H, 1, channels, dtype=F64), g.cumsum(1)], 1)
    return Factor(Separable(a, b, G))


@pytest.mark.parametrize("decay", ["none", "head", "channel"])
@pytest.mark.parametrize("block", [1, 3, 8, 64])
def test_pair_contractions_equal_their_dense_matrices(decay: str, block: int) -> None:
    H, L = 2, 23
    gen = torch.Generator().manual_seed(block)
    X = Pairs.of(_factor(H, L, 3, gen, decay), L, block)
    Y = Pairs.of(_factor(H, L, 2, gen, "none"), L, block)
    row = torch.rand(H, L, 1, generator=gen, dtype=F64)
    col = torch.rand(H, 1, L, generator=gen, dtype=F64)
    expr = X * (Y + row) * 0.5 + col - X
    full = expr.dense()[..., 1:]  # [H, L, L]
    Z = torch.rand(H, L, 4, generator=gen, dtype=F64)
    # Equal to 1e-12 of the terms' magnitude, elementwise: expr cancels (its "- X"), so a
    # result can be far smaller than its terms, and two summation orders (the scan's blocks,
    # BLAS's own) differ by a few ulps of the terms, not of the result.
    A = full.abs()
    _close(expr @ Z, full @ Z, A @ Z)
    _close(expr.transpose(-1, -2) @ Z, full.transpose(-1, -2) @ Z, A.transpose(-1, -2) @ Z)
    _close(expr.sum(-1), full.sum(-1), A.sum(-1))
    _close(expr.sum(-2), full.sum(-2), A.sum(-2))
    _close(expr[..., 0], expr.dense()[..., 0], expr.dense()[..., 0].abs())


def _close(actual: torch.Tensor, expected: torch.Tensor, magnitude: torch.Tensor) -> None:
    """|actual - expected| <= 1e-12 magnitude at every element."""
    excess = (actual - expected).abs() - 1e-12 * magnitude
    assert bool((excess <= 0).all()), f"largest excess {float(excess.max()):.3g}"


@pytest.mark.parametrize("block", [1, 4, 8])
def test_a_per_channel_decay_tiles_channels_as_its_written_out_copy(block: int) -> None:
    # A factor with 2R channels decaying with R channels of G (channel r with r mod R) is the
    # factor whose G is written out twice; two factors sharing G merge without that copy, and
    # a column decay of R channels tiles Y's 2R columns the same way.
    H, L, R = 2, 19, 3
    gen = torch.Generator().manual_seed(block)
    one, two = _factor(H, L, R, gen, "channel"), _factor(H, L, R, gen, "channel")
    G = one.far.G
    assert G is not None
    two = Factor(Separable(two.far.a, two.far.b, G))
    merged = (Pairs.of(one, L, block) * 0.5 + Pairs.of(two, L, block) * 2.0).terms
    assert len(merged) == 1, "merged into one factor"
    assert merged[0][1][0].far.G is G, "G kept once, not written out"
    written = Factor(
        Separable(
            torch.cat([0.5 * one.far.a, 2.0 * two.far.a], -1),
            torch.cat([one.far.b, two.far.b], -1),
            torch.cat([G, G], -1),
        )
    )
    tiled, full = Pairs(merged, L, block), Pairs.of(written, L, block)
    torch.testing.assert_close(tiled.dense(), full.dense(), rtol=1e-13, atol=0)
    Y = torch.rand(H, L, 2 * R, generator=gen, dtype=F64)
    for reverse in (False, True):
        torch.testing.assert_close(
            tiled.across_blocks(Y, G, reverse=reverse),
            full.across_blocks(Y, torch.cat([G, G], -1), reverse=reverse),
            rtol=1e-13,
            atol=0,
        )
    with pytest.raises(ValueError, match="cannot tile"):
        tiled.across_blocks(Y[..., :4], G, reverse=False)


def test_pairs_refuse_what_they_cannot_represent() -> None:
    gen = torch.Generator().manual_seed(0)
    X = Pairs.of(_factor(2, 5, 2, gen, "none"), 5, 2)
    with pytest.raises(TypeError, match="cannot combine"):
        X + torch.ones(2, 3, 3)
    with pytest.raises(IndexError):
        X[..., 2]
    with pytest.raises(ValueError, match="last two"):
        X.transpose(0, 1)


@pytest.mark.parametrize(
    ("gate", "normalize", "varlen", "block"),
    [("scalar", False, True, None), ("vector", True, False, 4), ("none", True, True, 4)],
)
def test_heads_in_groups_equal_all_heads_at_once(
    gate: str, normalize: bool, varlen: bool, block: int | None
) -> None:
    """`_bounds.heads`: each head alone (or the scan) gives the bounds of all heads together.

    Only the batched arithmetic over heads differs, so the references agree to rounding
    relative to their magnitudes and the non-negative bounds to rounding elementwise.
    """
    p: Any = _problem(13, gate=gate, normalize=normalize, initial=True, varlen=varlen)
    recipe = PrecisionRecipe(form="chunk", chunk_size=4)
    whole = forward_bounds(p, recipe, scan_block=block)
    single = forward_bounds(p, recipe, scan_block=block, head_group=1)
    assert len(single.groups) == 2
    assert len(whole.groups) == 1
    _assert_equal_bounds(whole.tensors, single.tensors)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(p.v.shape, generator=gen)
    dS = torch.randn(p.num_sequences, 2, p.feature_dim, 5, generator=gen)
    final = (dS, torch.randn(p.num_sequences, 2, p.feature_dim, generator=gen)) if normalize else dS
    _assert_equal_bounds(
        *(
            backward_bounds(p, recipe, do=do, d_final_state=final, forward=fb)
            for fb in (whole, single)
        )
    )


@pytest.mark.parametrize("scan", ["chunk_local", "global"])
def test_vector_sums_with_their_errors_equal_the_separate_sums(scan: str) -> None:
    # `rows_with_errors` / `cols_with_errors` scan the pair matrix once for both sums: they must
    # give what `rows` / `cols` without and with ``error`` give, block diagonals and far parts.
    problem = _problem(40, gate="vector", normalize=True)
    p64 = problem.to(F64)  # type: ignore[attr-defined]
    recipe = PrecisionRecipe(form="chunk", decay_scan=scan, chunk_size=4)  # type: ignore[arg-type]
    units = Units.of(recipe, torch.float32)
    for block in (None, 8):  # dense weights, then the block scan
        seq = SequenceTerms(p64, recipe, units, 0, 0, 0, 40, scan_block=block)
        gen = torch.Generator().manual_seed(5)
        a, b = (torch.rand(seq.H, seq.L, seq.K, generator=gen, dtype=F64) for _ in range(2))
        row = torch.rand(seq.H, seq.L, 1, generator=gen, dtype=F64)
        P = seq.outer(a, b) + row
        vw = VectorWeights(seq)
        for merged, single in ((vw.rows_with_errors, vw.rows), (vw.cols_with_errors, vw.cols)):
            plain, err = merged(P, b)
            torch.testing.assert_close(plain, single(P, b), rtol=1e-13, atol=0)
            torch.testing.assert_close(err, single(P, b, error=True), rtol=1e-13, atol=0)
