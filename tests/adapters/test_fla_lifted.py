# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""FLA's Based and ReBased kernels through their adapters: declarations, and the oracle.

Every kernel of `linattn_verify.linear_attn.adapters.fla_lifted` runs forward and backward on small
cases (T in {1, 20, 37, 130}: one token, a partial query block, two blocks of the parallel kernels'
128; K = 5, 8, 16; fp32 and bf16), judged by the float64 oracle under the precision recipe its
adapter declares. ReBased takes only the scales K^-1/2 and 1, so it skips the case with
scale 0.3. Without CUDA the kernels run under the Triton interpreter (about a second a case).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
from linattn_properties.oracle import gradients_match_oracle, outputs_match_oracle

from linattn_verify import interpreter
from linattn_verify.compare.oracle import check_against_oracle
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.adapters import fla as fla_adapters
from linattn_verify.linear_attn.adapters import fla_lifted
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec

HAVE_FLA = importlib.util.find_spec("fla") is not None
needs_fla = pytest.mark.skipif(
    not HAVE_FLA, reason=f"flash-linear-attention is not installed ({fla_adapters.FLA_REQUIREMENT})"
)

pytestmark = pytest.mark.interpret

# Spelled out so that collection does not import FLA (importing it selects the interpreter).
KERNEL_NAMES = [
    f"fla/{op}{suffix}"
    for op in ("based.parallel", "based.fused_chunk", "rebased.parallel")
    for suffix in ("", "+normalize")
]


@dataclass(frozen=True)
class Case:
    """One small problem; the map, normalization and eps are the kernel's."""

    T: int
    K: int
    dtype: str
    scale: float | None = None
    seed: int = 0

    def spec(self, kernel: Kernel) -> ProblemSpec:
        cap = kernel.capabilities
        return ProblemSpec(
            B=1,
            T=self.T,
            H=2,
            K=self.K,
            V=8,
            dtype=self.dtype,
            feature_map=cap.feature_maps[0],
            normalize=cap.normalize[0],
            eps=cap.eps,
            scale=self.scale,
            values="normal",
            decay="none",
            initial_state=False,
            output_final_state=False,
            segments=None,
            seed=self.seed,
        )


CASES = {
    "fp32-T1": Case(T=1, K=8, dtype="float32", seed=1),
    # A scale that is not a power of two: q * scale is then a rounding (parallel_based only).
    "fp32-T20-scale": Case(T=20, K=8, dtype="float32", scale=0.3, seed=2),
    "fp32-T130-K16": Case(T=130, K=16, dtype="float32", seed=3),
    "bf16-T20": Case(T=20, K=8, dtype="bfloat16", seed=4),
    "bf16-T130-K16": Case(T=130, K=16, dtype="bfloat16", seed=5),
    # K^-1/2 is not a power of two for K = 5: q * scale is a bf16 rounding.
    "bf16-T37-K5": Case(T=37, K=5, dtype="bfloat16", seed=6),
    "bf16-T37-scale1": Case(T=37, K=16, dtype="bfloat16", scale=1.0, seed=7),
}


@pytest.fixture(scope="module")
def kernels() -> Iterator[dict[str, Kernel]]:
    before = interpreter.enabled()
    found = {k.name: k for k in fla_adapters.fla_kernels() if k.name in KERNEL_NAMES}
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("CUDA is available and TRITON_INTERPRET is unset: these cases run on a CPU")
    yield found
    interpreter.disable(patches=[p for p in interpreter.PATCHES if p not in before])


def _matrix() -> list[object]:
    return [
        pytest.param(name, case, id=f"{name.removeprefix('fla/')}-{case}")
        for name in KERNEL_NAMES
        for case, spec in CASES.items()
        if not (name.startswith("fla/rebased") and spec.scale not in (None, 1.0))
    ]


@needs_fla
@pytest.mark.parametrize(("name", "case"), _matrix())
def test_fla_lifted_outputs_match_oracle(kernels: dict[str, Kernel], name: str, case: str) -> None:
    result = outputs_match_oracle(CASES[case].spec(kernels[name]), kernels[name])
    assert result.status == "held", result.report()


@needs_fla
@pytest.mark.parametrize(("name", "case"), _matrix())
def test_fla_lifted_gradients_match_oracle(
    kernels: dict[str, Kernel], name: str, case: str
) -> None:
    result = gradients_match_oracle(CASES[case].spec(kernels[name]), kernels[name])
    assert result.status == "held", result.report()


@needs_fla
def test_fla_lifted_declarations(kernels: dict[str, Kernel]) -> None:
    assert sorted(kernels) == sorted(KERNEL_NAMES)
    for name, kernel in kernels.items():
        cap = kernel.capabilities
        normalized = name.endswith("+normalize")
        rebased = name.startswith("fla/rebased")
        fused = ".fused_chunk" in name
        assert cap.feature_maps == (("rebased",) if rebased else ("taylor2",)), name
        assert cap.normalize == (normalized,), name
        eps = fla_lifted.REBASED_EPS if rebased else fla_lifted.BASED_EPS
        assert cap.eps == (eps if normalized else 0.0), name
        # torch divides, unguarded: NaN for 0/0, ±inf for x/0.
        assert cap.zero_denominator == ("ieee" if normalized else "any"), name
        assert not cap.decay, name
        assert not cap.initial_state, name
        assert not cap.final_state, name
        assert not cap.varlen, name
        assert cap.scales == (("default", "one") if rebased else ()), name
        assert kernel.form == ("chunk" if fused else "parallel"), name
        fp32, bf16 = kernel.precision_recipe(torch.float32), kernel.precision_recipe(torch.bfloat16)
        assert (fp32.dot_precision, fp32.accumulation, fp32.casts_on_path) == ("ieee", "ieee", 0)
        assert bf16.intermediate_dtype == "input", name
        casts = {(False, False): 3, (False, True): 6, (True, False): 5, (True, True): 6}
        assert bf16.casts_on_path == casts[fused, normalized], name
        assert bf16.chunk_size == (fla_lifted.FUSED_CHUNK_SIZE if fused else 128), name
        # parallel: z rounded to the input dtype, eps added there; fused_chunk returns z in fp32.
        assert bf16.eps_dtype == ("float32" if fused else "bfloat16"), name
        assert fp32.eps_dtype == "float32", name
        assert bf16.division == "rn", name


@needs_fla
def test_bf16_eps_is_what_fla_adds(kernels: dict[str, Kernel]) -> None:
    recipe = kernels["fla/based.parallel+normalize"].precision_recipe(torch.bfloat16)
    added = torch.tensor(fla_lifted.BASED_EPS, dtype=torch.bfloat16).item()
    added_by_recipe = recipe.effective_eps(fla_lifted.BASED_EPS, torch.bfloat16)
    assert added_by_recipe == added == 2.0**-20 * 134 / 128


@needs_fla
def test_rebased_declines_other_scales(kernels: dict[str, Kernel]) -> None:
    kernel = kernels["fla/rebased.parallel+normalize"]
    q = k = v = torch.ones(1, 3, 1, 4)
    for scale, supported in ((None, True), (0.5, True), (1.0, True), (0.3, False)):
        problem = validate_problem(
            q, k, v, None, scale=scale, normalize=True, eps=1e-5, feature_map="rebased"
        )
        reason = kernel.supports(problem)
        assert (reason is None) == supported, (scale, reason)
    assert "scale=0.3 is not one of ('default', 'one') (0.5, 1.0)" in str(reason)
    with pytest.raises(InvalidArgument, match="only K"):
        kernel.fn(q, k, v, scale=0.3)


@needs_fla
def test_fused_chunk_takes_key_dims_up_to_16(kernels: dict[str, Kernel]) -> None:
    kernel = kernels["fla/based.fused_chunk"]

    def reason(K: int, V: int) -> str | None:
        x, v = torch.ones(1, 2, 1, K), torch.ones(1, 2, 1, V)
        return kernel.supports(validate_problem(x, x, v, None, feature_map="taylor2"))

    assert reason(16, 40) is None
    assert "feature dim F=307" in str(reason(17, 8))


@needs_fla
def test_adapters_reject_what_fla_cannot_take(kernels: dict[str, Kernel]) -> None:
    q = k = v = torch.zeros(1, 4, 2, 8)
    fn = kernels["fla/based.parallel"].fn
    with pytest.raises(InvalidArgument, match="take no decay"):
        fn(q, k, v, torch.zeros(1, 4, 2))
    with pytest.raises(InvalidArgument, match="no initial state"):
        fn(q, k, v, output_final_state=True)
    with pytest.raises(InvalidArgument, match="cu_seqlens"):
        fn(q, k, v, cu_seqlens=torch.tensor([0, 4]))


OVERFLOW = (
    "FLA 0.6.0: in fp16 the normalized based and rebased kernels round the unnormalized "
    "output (and the parallel ones z) to fp16 before dividing, so κ(s q·k) > 65504 (s > 361 "
    "for based, |s| > 255 for rebased) gives inf/inf = NaN or inf/z = inf where the exact "
    "output is a weighted mean of the values"
)


@needs_fla
@pytest.mark.parametrize(
    ("name", "x", "expected"),
    [
        ("fla/based.parallel+normalize", 20.0, "nan"),
        ("fla/based.fused_chunk+normalize", 20.0, "inf"),
        ("fla/rebased.parallel+normalize", 16.0, "nan"),
    ],
    ids=["based.parallel", "based.fused_chunk", "rebased.parallel"],
)
def test_fp16_normalized_output_overflows(
    kernels: dict[str, Kernel], name: str, x: float, expected: str
) -> None:
    """The FLA finding (`OVERFLOW`), one token, one feature: q = k = x, v = 1, scale 1.

    The exact output is κ/(κ + eps) ≈ 1; FLA's κ = 80401 (based, s = 400) or 65536 (rebased,
    s = 256) overflows fp16 in the cast before its dot with v. bf16 keeps fp32's range: 1.
    """
    kernel = kernels[name]
    q = torch.full((1, 1, 1, 1), x, dtype=torch.float16)
    v = torch.ones(1, 1, 1, 1, dtype=torch.float16)
    o, _ = kernel.fn(q, q, v, scale=1.0)
    assert str(o.item()) == expected
    bf16, _ = kernel.fn(q.bfloat16(), q.bfloat16(), v.bfloat16(), scale=1.0)
    assert bf16.item() == 1.0
    # Judged by the harness: a finite/non-finite mismatch where the exact value is 1.
    fmap = kernel.capabilities.feature_maps[0]
    problem = validate_problem(
        q, q, v, None, scale=1.0, normalize=True, eps=kernel.capabilities.eps, feature_map=fmap
    )
    result = check_against_oracle(
        problem,
        o,
        recipe=kernel.precision_recipe(torch.float16),
        name=name,
        zero_denominator=kernel.capabilities.zero_denominator,
    )
    assert not result.ok, result.report()
    assert "non-finite" in result.report()


ZERO_ROW_NAN = (
    "FLA 0.6.0: parallel_rebased's normalized backward in fp16 divides do by z + eps = "
    "fl16(1e-5) on a row whose scores are all 0; do / 1e-5 overflows fp16 and 0 · inf = NaN "
    "reaches dq, dk and dv, whose exact values are finite"
)


@needs_fla
def test_rebased_fp16_backward_is_nan_on_a_zero_score_row(kernels: dict[str, Kernel]) -> None:
    """The FLA finding (`ZERO_ROW_NAN`), one token, one feature: q = 0, k = v = 1, do = 1.

    o = s² v / (s² + eps) = 0 with exact gradients dq = 0, dk = 0, dv = 0; FLA returns NaN in
    fp16 and the exact zeros in bf16 and fp32.
    """
    kernel = kernels["fla/rebased.parallel+normalize"]
    for dtype, finite in ((torch.float16, False), (torch.bfloat16, True), (torch.float32, True)):
        q = torch.zeros(1, 1, 1, 1, dtype=dtype, requires_grad=True)
        k = torch.ones(1, 1, 1, 1, dtype=dtype, requires_grad=True)
        v = torch.ones(1, 1, 1, 1, dtype=dtype, requires_grad=True)
        o, _ = kernel.fn(q, k, v, scale=1.0)
        o.backward(torch.ones_like(o))
        assert o.item() == 0.0
        grads = [x.grad for x in (q, k, v)]
        assert all(g is not None and bool(g.isfinite().all()) == finite for g in grads), dtype
    # The case the harness's search found (T = 1, a zero query row, fp16): a failure.
    spec = ProblemSpec(
        B=2,
        T=1,
        H=2,
        K=8,
        V=1,
        dtype="float16",
        feature_map="rebased",
        normalize=True,
        eps=fla_lifted.REBASED_EPS,
        scale=None,
        values="zero_rows",
        decay="none",
        initial_state=False,
        output_final_state=False,
        segments=None,
        seed=1068,
    )
    result = gradients_match_oracle(spec, kernel)
    assert not result.ok
    assert "dq is not close" in result.report()
