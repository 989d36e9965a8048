# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The float64 oracles and bounds on a CUDA device equal the CPU's (``pytest -m gpu``).

Issue #27 moves the judging onto the kernel's device: a problem built there is judged there.
Every forward and gradient bound of both families, for each recipe and gate shape, is computed
from the same case built on the CPU and on CUDA; the references, bounds and magnitudes must
agree to 1e-9 relative (the two devices sum in different orders: float64 reassociation moves a
sum of n terms by about n·2^-53 of its magnitude, far below 1e-9 at these sizes). Skipped
without CUDA; `benchmarks/gpu/run.sh` runs it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from linattn_properties._testing import example_spec

from linattn_verify.core.bound import TensorBound
from linattn_verify.core.judging import judging_on
from linattn_verify.delta.bounds import forward_bounds as delta_forward
from linattn_verify.delta.gradient_bounds import backward_bounds as delta_backward
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.strategies import DeltaCase
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

RELATIVE = 1e-9

LINEAR = {
    f"{form}-{gate}-{'norm' if normalize else 'plain'}": (
        example_spec(
            B=2, T=70, H=2, K=8, V=6, gate=gate, decay="mild", normalize=normalize,
            feature_map="elu1" if normalize else "identity", eps=1e-6 if normalize else 0.0,
            initial_state=True, output_final_state=True,
        ),
        PrecisionRecipe(form=form, chunk_size=16),
    )
    for form in ("parallel", "chunk", "recurrent")
    for gate in ("scalar", "vector")
    for normalize in (False, True)
}  # fmt: skip

DELTA_CASE = DeltaCase(
    B=2, T=70, H=2, K=8, V=6, dtype="float32", gate="scalar", gate_family="logsigmoid",
    beta_family="sigmoid", key_family="unit", value_family="unit", l2norm_qk=True,
    negative_eigenvalues=False, initial_state=True, output_final_state=True, seq_lens=None,
    scale=None, seed=7,
)  # fmt: skip
DELTA = {
    f"{form}-{gate}": (
        replace(DELTA_CASE, gate=gate, gate_family="none" if gate == "none" else "logsigmoid"),
        DeltaRecipe(form=form, chunk_size=16),
    )
    for form in ("recurrent", "chunk")
    for gate in ("none", "scalar", "vector")
}


def _same(cpu: dict[str, TensorBound], other: dict[str, TensorBound], where: str = "cuda") -> None:
    assert set(cpu) == set(other)
    for name, a in cpu.items():
        b = other[name]
        assert b.reference.device.type == where, f"{name} came back on {b.reference.device}"
        for field in ("reference", "bound", "magnitude"):
            x, y = getattr(a, field), getattr(b, field).cpu()
            finite = torch.isfinite(x)
            assert torch.equal(finite, torch.isfinite(y)), f"{name}.{field}: infinities differ"
            scale = x[finite].abs().max() if finite.any() else torch.tensor(0.0)
            error = (x[finite] - y[finite]).abs().max() if finite.any() else torch.tensor(0.0)
            assert error <= RELATIVE * scale, f"{name}.{field}: {error:.3g} against {scale:.3g}"


def _linear(problem: Any, recipe: PrecisionRecipe) -> dict[str, TensorBound]:
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(problem.v.shape, generator=gen, dtype=torch.float64).to(problem.q.device)
    forward = forward_bounds(problem, recipe)
    return forward.tensors | backward_bounds(problem, recipe, do=do, forward=forward)


def _delta(problem: Any, recipe: DeltaRecipe) -> dict[str, TensorBound]:
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(problem.v.shape, generator=gen, dtype=torch.float64).to(problem.q.device)
    dS = torch.randn(problem.initial_state.shape, generator=gen, dtype=torch.float64)
    out = delta_forward(problem, recipe)
    return out | delta_backward(problem, recipe, do=do, d_final_state=dS.to(problem.q.device))


@pytest.mark.parametrize("name", list(LINEAR))
def test_linear_bounds_on_cuda_equal_the_cpus(name: str) -> None:
    spec, recipe = LINEAR[name]
    _same(_linear(spec.build(), recipe), _linear(spec.build("cuda"), recipe))


@pytest.mark.parametrize("name", list(DELTA))
def test_delta_bounds_on_cuda_equal_the_cpus(name: str) -> None:
    case, recipe = DELTA[name]
    _same(_delta(case.build(), recipe), _delta(case.build("cuda"), recipe))


@pytest.mark.parametrize("name", ["chunk-vector-norm", "recurrent-scalar-plain"])
def test_cpu_problems_judged_on_cuda_come_back_home_equal(name: str) -> None:
    spec, recipe = LINEAR[name]
    home = _linear(spec.build(), recipe)
    with judging_on("cuda"):
        judged = _linear(spec.build(), recipe)
    _same(home, judged, where="cpu")
    case, delta_recipe = DELTA["chunk-vector"]
    home = _delta(case.build(), delta_recipe)
    with judging_on("cuda"):
        judged = _delta(case.build(), delta_recipe)
    _same(home, judged, where="cpu")
