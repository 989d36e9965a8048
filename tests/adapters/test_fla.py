# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""FLA's kernels through their adapters: declarations, and agreement with the oracle.

Every FLA kernel runs forward and backward on small cases (T in {1, 17, 65}, H = 2,
K = V = 16, fp32 and bf16, with and without initial state, varlen; mild gates, per key
dimension for gla), judged by the oracle under the precision recipe its adapter declares.
Without CUDA the kernels run under the Triton interpreter; the whole module takes about two
minutes on one core.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from linattn_properties.oracle import (
    gradients_match_oracle,
)

from linattn_verify import interpreter
from linattn_verify.cli import EXIT_FAILED, main
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.linear_attn.adapters import fla as fla_adapters
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.running import check_property

HAVE_FLA = importlib.util.find_spec("fla") is not None
needs_fla = pytest.mark.skipif(
    not HAVE_FLA, reason=f"flash-linear-attention is not installed ({fla_adapters.FLA_REQUIREMENT})"
)

pytestmark = pytest.mark.interpret

# Spelled out so that collection does not import FLA (importing it selects the interpreter).
KERNEL_NAMES = (
    [
        f"fla/linear_attn.{form}{suffix}"
        for form in ("chunk", "fused_chunk", "fused_recurrent")
        for suffix in ("", "+normalize")
    ]
    + [
        f"fla/{op}.{form}"
        for op in ("simple_gla", "retention")
        for form in ("chunk", "fused_recurrent", "parallel")
    ]
    + [
        f"fla/{op}.{form}"
        for op in ("gla", "lightning_attn")
        for form in ("chunk", "fused_recurrent")
    ]
)

LIGHTNING_NAN = (
    "FLA 0.6.0 bug: chunk_lightning_attn's final state is NaN when the last chunk is partial and "
    "|γ_h| (64 - L) > 88.7 (steep heads): common/chunk_h.py scales the padded rows of v by "
    "exp2(γ (L - i - 1)/ln 2) = inf, and 0 * inf = NaN enters the state"
)
""""Why `fla/lightning_attn.chunk` fails every case of the matrix (all have a partial last chunk
and, with H = 2, head 1 decays by γ = -4 per token); see `test_lightning_chunk_nan_final_state`."""


@dataclass(frozen=True)
class Case:
    """One small problem; options a kernel does not support are left out for it."""

    T: int
    dtype: str
    initial_state: bool
    segments: tuple[int, ...] | None = None
    scale: float | None = None
    seed: int = 0

    def spec(self, kernel: Kernel) -> ProblemSpec:
        cap = kernel.capabilities
        return ProblemSpec(
            B=1,
            T=self.T,
            H=2,
            K=16,
            V=16,
            dtype=self.dtype,
            feature_map="identity",
            normalize=cap.normalize[0],
            eps=cap.eps,
            scale=self.scale,
            values="normal",
            decay="mild" if cap.decay else "none",
            gate="vector" if cap.decay and "scalar" not in cap.gates else "scalar",
            initial_state=self.initial_state and cap.initial_state,
            output_final_state=cap.final_state,
            segments=self.segments if cap.varlen else None,
            seed=self.seed,
        )


CASES = {
    "fp32-T1-h0": Case(T=1, dtype="float32", initial_state=True, seed=1),
    "fp32-T17": Case(T=17, dtype="float32", initial_state=False, seed=2),
    "fp32-T65-h0": Case(T=65, dtype="float32", initial_state=True, seed=3),
    "bf16-T17-h0": Case(T=17, dtype="bfloat16", initial_state=True, seed=4),
    # A scale that is not a power of two: q * scale is then a rounding in bf16.
    "bf16-T65-scale": Case(T=65, dtype="bfloat16", initial_state=False, scale=0.3, seed=5),
    "fp32-varlen-h0": Case(T=65, dtype="float32", initial_state=True, segments=(1, 17, 47), seed=6),
    "bf16-varlen-h0": Case(T=40, dtype="bfloat16", initial_state=True, segments=(23, 17), seed=7),
}


@pytest.fixture(scope="module")
def kernels() -> Iterator[dict[str, Kernel]]:
    before = interpreter.enabled()
    # The linear-family kernels; the lifted feature maps' (based, rebased) are tested in
    # test_fla_lifted.py.
    found = {k.name: k for k in fla_adapters.fla_kernels() if k.name in KERNEL_NAMES}
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("CUDA is available and TRITON_INTERPRET is unset: these cases run on a CPU")
    yield found
    interpreter.disable(patches=[p for p in interpreter.PATCHES if p not in before])


NEW_KERNEL_CASES = ("fp32-T65-h0", "bf16-varlen-h0")
"""The cases gla and lightning_attn run (fp32 and bf16, a partial chunk, varlen with states): the
whole matrix for them would add a minute to CI (`test_lightning_chunk_nan_final_state` and the
`run` and soak searches do the rest)."""


def _matrix() -> list[object]:
    params: list[object] = []
    for name in KERNEL_NAMES:
        short = name.removeprefix("fla/")
        new = short.startswith(("gla.", "lightning_attn."))
        for case in NEW_KERNEL_CASES if new else CASES:
            marks = []
            if name == "fla/lightning_attn.chunk":
                marks.append(pytest.mark.xfail(strict=True, reason=LIGHTNING_NAN))
            params.append(pytest.param(name, case, id=f"{short}-{case}", marks=marks))
    return params


@needs_fla
@pytest.mark.parametrize(("name", "case"), _matrix())
def test_fla_kernel_matches_oracle(kernels: dict[str, Kernel], name: str, case: str) -> None:
    kernel = kernels[name]
    spec = CASES[case].spec(kernel)
    # The property the CLI and the plugin run; for retention it judges the decay the kernel
    # applies (`Kernel.prepare`) and expects no gradient for g, which is not an input.
    result = gradients_match_oracle(spec, kernel)
    assert result.status == "held", result.report()


@needs_fla
def test_fla_kernels_declarations(kernels: dict[str, Kernel]) -> None:
    assert sorted(kernels) == sorted(KERNEL_NAMES)
    others = {k.name for k in fla_adapters.fla_kernels()} - set(KERNEL_NAMES)
    assert all(n.startswith(("fla/based.", "fla/rebased.")) for n in others), others
    for name, kernel in kernels.items():
        cap = kernel.capabilities
        assert cap.feature_maps == ("identity",), name
        assert cap.varlen, name
        assert cap.normalize == ((True,) if name.endswith("+normalize") else (False,)), name
        assert cap.eps == (fla_adapters.FLA_EPS if name.endswith("+normalize") else 0.0), name
        if name.endswith("+normalize"):
            # torch divides, unguarded: NaN for 0/0, ±inf for x/0 (fla/ops/linear_attn/utils.py).
            assert cap.zero_denominator == "ieee", name
        assert cap.decay == name.startswith(("fla/simple_gla", "fla/gla")), name
        assert cap.gates == (("vector",) if name.startswith("fla/gla") else ("scalar",)), name
        assert cap.decay_required == (name == "fla/gla.chunk"), name
        fixed = name.startswith(("fla/retention", "fla/lightning_attn"))
        assert (kernel.implied_decay is not None) == fixed, name
        assert cap.initial_state == cap.final_state == (kernel.form != "parallel"), name
        fp32, bf16 = kernel.precision_recipe(torch.float32), kernel.precision_recipe(torch.bfloat16)
        assert fp32.form == bf16.form == kernel.form
        # Under the interpreter fp32 dots are IEEE and nothing is rounded below fp32.
        assert (fp32.dot_precision, fp32.accumulation, fp32.casts_on_path) == ("ieee", "ieee", 0)
        assert bf16.intermediate_dtype == ("input" if bf16.casts_on_path else None)
        recurrent = kernel.form == "recurrent"
        assert bf16.casts_on_path > 0 or (recurrent and not cap.normalize[0]), name
        assert fp32.decay_scan == ("per_step" if recurrent else "chunk_local"), name


@needs_fla
def test_retention_decay_is_fla_gamma(kernels: dict[str, Kernel]) -> None:
    problem = CASES["fp32-T17"].spec(kernels["fla/retention.chunk"]).build()
    g = fla_adapters.retention_log_decay(problem)
    assert g.shape == (1, 17, 2)
    assert g.dtype == torch.float32
    gamma = 1 - 2.0 ** (-5.0 - torch.arange(2, dtype=torch.float64))
    torch.testing.assert_close(g.double().exp()[0, 0], gamma, rtol=1e-7, atol=0)


@needs_fla
def test_lightning_decay_is_fla_gamma(kernels: dict[str, Kernel]) -> None:
    problem = CASES["fp32-T17"].spec(kernels["fla/lightning_attn.chunk"]).build()
    g = fla_adapters.lightning_log_decay(problem)
    assert g.shape == (1, 17, 2)
    assert g.dtype == torch.float32
    # Layer 0: g_h = -(8 / H) h, exact in float32 for H = 2.
    assert g[0, 0].tolist() == [0.0, -4.0]


@needs_fla
def test_lightning_chunk_nan_final_state(kernels: dict[str, Kernel]) -> None:
    """The FLA finding, on FLA's own function: one token, one feature, a steep head.

    The recurrent form and the exact state are finite; the chunked form returns NaN for head 1
    (γ = -4): the harness's failure on `fla/lightning_attn.chunk` is FLA's, not ours.
    """
    from fla.ops.lightning_attn import chunk_lightning_attn, fused_recurrent_lightning_attn

    q = k = v = torch.ones(1, 1, 2, 1)
    layer, layers = fla_adapters.LIGHTNING_LAYER
    options = {"layer_idx": layer, "num_layers": layers, "output_final_state": True}
    _, chunked = chunk_lightning_attn(q, k, v, **options)
    _, stepped = fused_recurrent_lightning_attn(q, k, v, **options)
    assert bool(torch.isfinite(stepped).all())
    assert stepped.flatten().tolist() == [1.0, 1.0]  # S_1 = k v^T: the decay acts on S_0 = 0
    assert bool(chunked[0, 0].isfinite().all())
    assert bool(chunked[0, 1].isnan().all())
    # Judged by the harness: the final state is the failure.
    spec = replace(
        CASES["fp32-T1-h0"].spec(kernels["fla/lightning_attn.chunk"]), initial_state=False
    )
    result = gradients_match_oracle(spec, kernels["fla/lightning_attn.chunk"])
    assert not result.ok
    assert "final_state" in result.report()


@needs_fla
def test_a_saved_fla_failure_replays_from_the_command_line(
    kernels: dict[str, Kernel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` prints ``linattn-verify replay FILE`` for FLA's failures: FLA's kernels are not
    registered, so replay must load them the way `run` does."""
    kernel = kernels["fla/lightning_attn.chunk"]
    spec = replace(CASES["fp32-T1-h0"].spec(kernel), initial_state=False)
    with pytest.raises(PropertyViolation) as info:
        check_property(gradients_match_oracle, spec, kernel, directory=tmp_path, steer=False)
    assert info.value.failure_file is not None
    capsys.readouterr()
    assert main(["replay", str(info.value.failure_file)]) == EXIT_FAILED
    assert "Reproduces: gradients_match_oracle still fails for fla/lightning_attn.chunk" in (
        capsys.readouterr().out
    )


@needs_fla
def test_retention_judged_without_its_decay_fails(kernels: dict[str, Kernel]) -> None:
    """The implied decay is what the oracle must use: without it the kernel is far off."""
    kernel = replace(kernels["fla/retention.parallel"], implied_decay=None)
    spec = CASES["fp32-T17"].spec(kernel)
    result = gradients_match_oracle(spec, kernel)
    assert not result.ok, result.report()


@needs_fla
def test_adapters_reject_what_fla_cannot_take(kernels: dict[str, Kernel]) -> None:
    q = k = v = torch.zeros(1, 4, 2, 16)
    g = torch.zeros(1, 4, 2)
    with pytest.raises(InvalidArgument, match="take no decay"):
        kernels["fla/linear_attn.chunk"].fn(q, k, v, g)
    with pytest.raises(InvalidArgument, match="takes no g"):
        kernels["fla/retention.chunk"].fn(q, k, v, g)
    with pytest.raises(InvalidArgument, match="no initial state"):
        kernels["fla/simple_gla.parallel"].fn(q, k, v, output_final_state=True)
    with pytest.raises(InvalidArgument, match=r"pair \(S_0, z_0\)"):
        kernels["fla/linear_attn.chunk+normalize"].fn(
            q, k, v, initial_state=torch.zeros(1, 2, 16, 16)
        )


def test_missing_fla_raises_import_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "fla" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ImportError, match=r"fla-core==0\.6\.0"):
        fla_adapters.fla_kernels()
