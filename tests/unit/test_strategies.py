# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Meta-tests of the strategies: each generates only what it says, and reaches what it promises."""

from __future__ import annotations

import math
from dataclasses import replace
from random import Random
from typing import Any

import pytest
import torch
from hypothesis import find, given
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import OMITTABLE
from linattn_verify.linear_attn.strategies import (
    DTYPES,
    LAYOUTS,
    ProblemSpec,
    batch_sizes,
    decay_families,
    float_dtypes,
    head_counts,
    head_dims,
    kernel_specs,
    layouts,
    problem_specs,
    scales,
    seq_lens,
    seq_packings,
    value_families,
)
from linattn_verify.registry import FULL


def _find(strategy: st.SearchStrategy[Any], condition: Any) -> Any:
    """Return a minimal example satisfying ``condition`` (fixed seed: no flaky reachability)."""
    return find(strategy, condition, random=Random(0))


def _whole_storage(x: torch.Tensor) -> torch.Tensor:
    """Return every element of the memory ``x`` views, as a flat tensor."""
    return torch.as_strided(x, (x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % p for p in range(2, math.isqrt(n) + 1))


@given(data=st.data())
def test_int_strategies_stay_within_their_bounds(data: st.DataObject) -> None:
    lo = data.draw(st.integers(1, 300), label="min_value")
    hi = data.draw(st.integers(lo, 400), label="max_value")
    for strategy in (seq_lens, head_dims, batch_sizes, head_counts):
        value = data.draw(strategy(min_value=lo, max_value=hi), label=strategy.__name__)
        assert isinstance(value, int)
        assert lo <= value <= hi, (strategy.__name__, value)


@given(data=st.data())
def test_scales_are_none_or_within_bounds(data: st.DataObject) -> None:
    lo = data.draw(st.floats(1e-3, 4.0), label="min_value")
    hi = data.draw(st.floats(lo, 8.0), label="max_value")
    scale = data.draw(scales(min_value=lo, max_value=hi), label="scale")
    assert scale is None or lo <= scale <= hi
    assert data.draw(scales(allow_none=False), label="no None") is not None


@given(data=st.data())
def test_seq_packings_sum_to_total(data: st.DataObject) -> None:
    total = data.draw(st.integers(0, 100), label="total")
    lo = data.draw(st.integers(1, 5), label="min_size")
    hi = data.draw(st.integers(lo, 7), label="max_size")
    segments = data.draw(seq_packings(total, min_size=lo, max_size=hi), label="segments")
    assert sum(segments) == total
    assert lo <= len(segments) <= hi
    assert all(s >= 0 for s in segments)


@given(
    dtype=float_dtypes(),
    values=value_families(),
    decay=decay_families(),
    layout=layouts(),
    named=float_dtypes(names=("float64",)),
)
def test_categorical_strategies_draw_their_names(
    dtype: str, values: str, decay: str, layout: str, named: str
) -> None:
    # float64 only when asked for: few kernels take it.
    assert dtype in ("float32", "float16", "bfloat16")
    assert named == "float64"
    spec = ProblemSpec(1, 2, 1, 2, 2, dtype, "identity", False, 0.0, None, values, decay, False,
                       False, None, 0, layout)  # fmt: skip
    assert spec.values == values
    assert layout in LAYOUTS


@given(
    spec=problem_specs(
        max_seq_len=20,
        dtypes=("float16",),
        values=("large", "normal", "underflowing_features", "positive"),
        feature_maps=("identity", "relu"),
        layouts=("sliced",),
        max_batch_size=3,
        max_heads=3,
    )
)
def test_problem_specs_respect_arguments_and_exclusions(spec: ProblemSpec) -> None:
    assert spec.dtype == "float16"
    assert spec.layout == "sliced"
    assert spec.feature_map in ("identity", "relu")
    # ``large`` overflows fp16 and ``underflowing_features`` needs elu1: both excluded here.
    assert spec.values in ("normal", "positive")
    assert 1 <= spec.T <= 20
    assert spec.B <= 3
    assert spec.H <= 3
    assert spec.normalize or spec.eps == 0.0
    if spec.segments is not None:
        assert spec.B == 1
        assert sum(spec.segments) == spec.T


@given(spec=problem_specs(values=("underflowing_features", "normal")))
def test_underflowing_features_only_with_elu1(spec: ProblemSpec) -> None:
    assert spec.values == "normal" or spec.feature_map == "elu1"


RESTRICTED = Kernel(
    name="test/restricted",
    fn=lambda *args, **kwargs: None,
    capabilities=Capabilities(
        normalize=(True,),
        eps=1e-3,
        feature_maps=("elu1",),
        decay=False,
        varlen=False,
        initial_state=False,
        final_state=False,
        dtypes=("bfloat16", "float64"),
        min_head_dim=2,
        max_head_dim=6,
        chunk_sizes=(24,),
    ),
    recipe=PrecisionRecipe(form="recurrent"),
)


@given(spec=kernel_specs(RESTRICTED, max_head_dim=100))
def test_kernel_specs_never_draw_unsupported_options(spec: ProblemSpec) -> None:
    problem = spec.build()
    assert RESTRICTED.supports(problem) is None
    assert spec.dtype in ("bfloat16", "float64")
    assert (spec.normalize, spec.eps, spec.feature_map) == (True, 1e-3, "elu1")
    assert spec.decay == "none"
    assert spec.segments is None
    assert not spec.initial_state
    assert not spec.output_final_state
    assert min(spec.K, spec.V) >= 2
    assert max(spec.K, spec.V) <= 6
    # The call passes this kernel only the scale and output_final_state: nothing else to omit.
    assert set(spec.omit) <= {"scale", "output_final_state"}


@given(spec=problem_specs(max_seq_len=16))
def test_calling_styles_omit_only_arguments_at_their_default(spec: ProblemSpec) -> None:
    problem = spec.build()
    assert problem.omit == frozenset(spec.omit)
    assert problem.omit <= problem.at_default()


@given(spec=problem_specs(max_seq_len=16, omittable=()))
def test_no_omittable_arguments_pass_every_argument(spec: ProblemSpec) -> None:
    assert spec.omit == ()


# Hypothesis finds and shrinks one case per option (11 to 18 s): with `-m slow`.
@pytest.mark.slow
def test_calling_styles_shrink_to_explicit_and_reach_every_omission() -> None:
    assert _find(problem_specs(), lambda s: True).omit == ()
    full = Kernel("test/full", lambda *args, **kwargs: None, FULL, PrecisionRecipe(form="chunk"))
    for name in OMITTABLE:
        # A failure that needs one omission shrinks to that omission alone.
        found = _find(kernel_specs(full), lambda s, n=name: n in s.omit)
        assert found.omit == (name,)
    assert _find(problem_specs(), lambda s: "scale" in s.omit).scale is None


@given(spec=problem_specs(max_seq_len=24, layouts=("contiguous",)))
def test_layouts_keep_values_and_change_strides(spec: ProblemSpec) -> None:
    base = spec.build()
    for layout in ("transposed", "sliced"):
        problem = replace(spec, layout=layout).build()
        for name, expected in base.inputs().items():
            actual = problem.inputs()[name]
            assert actual.dtype == expected.dtype
            assert torch.equal(actual, expected), (layout, name)
        for x in (problem.q, problem.k, problem.v):
            if layout == "transposed":
                # Stored head-first: [B, H, T, D] is the contiguous view.
                assert x.transpose(1, 2).is_contiguous()
            else:
                # Offset always; non-contiguous once there is more than one row (torch calls
                # any tensor of one row contiguous, whatever its outer strides).
                assert x.storage_offset() > 0
                assert not x.is_contiguous() or x.numel() == x.shape[-1]
                # The memory around the window is NaN, so a kernel reading it is caught.
                assert bool(torch.isnan(_whole_storage(x)).any())


@given(spec=problem_specs(max_seq_len=16))
def test_repro_rebuilds_the_case(spec: ProblemSpec) -> None:
    namespace: dict[str, Any] = {}
    exec(spec.repro(), namespace)
    rebuilt = namespace["problem"]
    assert "\n" not in spec.repro()
    for name, expected in spec.build().inputs().items():
        assert torch.equal(rebuilt.inputs()[name], expected), name
    assert rebuilt.omit == frozenset(spec.omit)


@given(
    spec=problem_specs(
        max_seq_len=32,
        values=("near_max",),
        decays=("none",),
        # near_max is calibrated for elementwise maps; lifted maps never draw it.
        feature_maps=("identity", "elu1", "relu"),
    )
)
def test_near_max_values_are_large_but_outputs_stay_finite(spec: ProblemSpec) -> None:
    problem = spec.build()
    limit = torch.finfo(DTYPES[spec.dtype]).max
    o, _ = parallel_reference(problem.to(torch.float64))
    # The output rounded to the input dtype is finite, with a margin of 16 below its max.
    assert float(o.abs().max()) <= limit / 16
    assert bool(torch.isfinite(o.to(problem.q.dtype)).all())
    # ... and the values are not small: one product q·k reaches far up the range.
    largest_product = float(problem.q.double().abs().amax() * problem.k.double().abs().amax())
    assert largest_product >= limit / (256 * spec.T**2 * spec.K * spec.V * 4)


@given(spec=problem_specs(max_seq_len=16, values=("positive",)))
def test_positive_family_has_nonnegative_features(spec: ProblemSpec) -> None:
    problem = spec.build()
    assert bool((problem.q >= 0).all())
    assert bool((problem.k >= 0).all())


def test_seq_lens_shrink_to_one_and_reach_primes() -> None:
    assert _find(seq_lens(), lambda t: True) == 1
    assert _find(seq_lens(min_value=5), lambda t: True) == 5
    assert _is_prime(_find(seq_lens(), lambda t: t > 100 and _is_prime(t)))


@pytest.mark.parametrize(("modulus", "chunk_sizes"), [(64, (16, 32, 64)), (24, (24,))])
def test_seq_lens_reach_every_residue(modulus: int, chunk_sizes: tuple[int, ...]) -> None:
    seen: set[int] = set()

    def record(t: int) -> bool:
        # Past one whole block, so the residue is a true tail and not just a short sequence.
        if t > modulus:
            seen.add(t % modulus)
        return False

    # Nothing satisfies ``record``, so find() runs its whole budget of draws, recording each.
    with pytest.raises(NoSuchExample):
        _find(seq_lens(max_value=300, chunk_sizes=chunk_sizes), record)
    # Every residue mod 64 also covers those mod 16 and 32.
    assert seen == set(range(modulus))


def test_head_dims_reach_non_powers_of_two_and_the_limits() -> None:
    for d in (1, 3, 100, 129, 255, 256):
        assert _find(head_dims(), lambda x, d=d: x == d) == d


def test_seq_packings_reach_empty_and_length_one_segments() -> None:
    segments = _find(seq_packings(20), lambda s: 0 in s and 1 in s and len(s) == 4)
    assert sum(segments) == 20


def test_scales_reach_none_powers_of_two_and_awkward_values() -> None:
    assert _find(scales(), lambda s: True) is None
    assert _find(scales(), lambda s: s is not None and s != 1.0 and math.log2(s).is_integer())
    awkward = _find(scales(), lambda s: s is not None and not (s * 2**20).is_integer())
    assert awkward is not None


def test_problem_specs_reach_every_layout_and_family() -> None:
    for layout in LAYOUTS:
        assert _find(problem_specs(), lambda s, x=layout: s.layout == x).layout == layout
    for family in ("positive", "near_max"):
        assert _find(problem_specs(), lambda s, f=family: s.values == f).values == family


BAD_ARGUMENTS: list[tuple[Any, dict[str, Any], str]] = [
    (seq_lens, {"min_value": 0}, "min_value=0"),
    (seq_lens, {"min_value": "1"}, "min_value='1'"),
    (seq_lens, {"min_value": 9, "max_value": 3}, "max_value=3"),
    (seq_lens, {"chunk_sizes": (16, 0)}, "chunk_sizes=(16, 0)"),
    (head_dims, {"max_value": 2.5}, "max_value=2.5"),
    (batch_sizes, {"min_value": True}, "min_value=True"),
    (head_counts, {"min_value": 0}, "min_value=0"),
    (scales, {"min_value": 0.0}, "min_value=0.0"),
    (scales, {"max_value": math.inf}, "max_value=inf"),
    (seq_packings, {"total": -1}, "total=-1"),
    (seq_packings, {"total": 4, "min_size": 0}, "min_size=0"),
    (float_dtypes, {"names": ("float8",)}, "names=('float8',)"),
    (value_families, {"names": "normal"}, "'normal'"),
    (layouts, {"names": ()}, "names=()"),
    (decay_families, {"names": ("fast",)}, "'fast'"),
    (problem_specs, {"max_seq_len": 0}, "max_seq_len=0"),
    (problem_specs, {"dtypes": ("float8",)}, "dtypes=('float8',)"),
    (problem_specs, {"layouts": ("strided",)}, "layouts=('strided',)"),
    (problem_specs, {"eps_values": (-1.0,)}, "eps_values=(-1.0,)"),
    (problem_specs, {"varlen": 1}, "varlen=1"),
    (problem_specs, {"omittable": ("sclae",)}, "omittable=('sclae',)"),
    (kernel_specs, {"kernel": "torch/chunk"}, "kernel='torch/chunk'"),
]


@pytest.mark.parametrize(
    ("strategy", "kwargs", "quoted"),
    BAD_ARGUMENTS,
    ids=[f"{s.__name__}-{'-'.join(k)}" for s, k, _ in BAD_ARGUMENTS],
)
def test_bad_arguments_raise_invalid_argument_quoting_them(
    strategy: Any, kwargs: dict[str, Any], quoted: str
) -> None:
    # Validated when the strategy is built, not when it is first drawn from.
    with pytest.raises(InvalidArgument) as info:
        strategy(**kwargs)
    assert quoted in str(info.value)


def test_problem_spec_rejects_unknown_names() -> None:
    base = ProblemSpec(1, 4, 1, 2, 3, "float32", "identity", False, 0.0, None, "normal", "none",
                       False, False, None, 0)  # fmt: skip
    assert base.layout == "contiguous"
    fields: dict[str, Any] = {f: getattr(base, f) for f in base.__dataclass_fields__}
    with pytest.raises(InvalidArgument, match="layout='strided'"):
        ProblemSpec(**{**fields, "layout": "strided"})
    with pytest.raises(InvalidArgument, match="T=0"):
        ProblemSpec(**{**fields, "T": 0})
    with pytest.raises(InvalidArgument, match="values='gaussian'"):
        ProblemSpec(**{**fields, "values": "gaussian"})
    assert base.omit == ()
    # Distinct names of OMITTABLE, in its order, as a tuple (so the repr is canonical).
    for omit in (("sclae",), ("scale", "g"), ("scale", "scale"), ["scale"]):
        with pytest.raises(InvalidArgument, match="omit="):
            ProblemSpec(**{**fields, "omit": omit})
    assert ProblemSpec(**{**fields, "omit": ("g", "scale")}).omit == ("g", "scale")
