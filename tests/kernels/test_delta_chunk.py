# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Our chunked WY / UT delta-rule kernel (``triton/delta.chunk``) through the delta catalogue.

Three parts, under the Triton interpreter on a CPU (tiny cases, the whole file well under a
minute in one process):

* every catalogue property of `linattn_properties.delta` on cases `delta_cases_for` draws for the
  kernel (C = 16, declared chunk sizes 16, 32, 64; every gate, dtype, l2norm, varlen and state
  option the kernel declares);
* a fixed matrix that makes sure each gate meets each dtype, forward and backward, against the
  float64 oracle and its bound (`check_property`: a failure saves its replay file);
* the accuracy claim made concrete: near-parallel keys with beta near 2 in fp16, where the
  per-chunk system has off-diagonal norm ||L - I||_2 ~ 40-60 and T = L^-1 is far from |T|:
  our kernel stays finite and within its fp32-inverse bound, and (where FLA is importable) at
  least as accurate as FLA's chunk kernel on the same inputs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linattn_verify.compare import compare
from linattn_verify.delta import delta_recurrent
from linattn_verify.delta.bounds import forward_bounds
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import pair_weights
from linattn_verify.delta.strategies import DeltaCase, delta_cases_for
from linattn_verify.delta.triton_kernels import delta_chunk_kernel
from linattn_verify.running import check_property
from tests.kernels.delta_support import (
    CATALOGUE,
    assert_property_holds,
    relative_error,
    with_interpreter_patches,
)

pytestmark = pytest.mark.interpret


EXAMPLES = 2
"""Examples per catalogue property: 24 kernel checks, about 20 s under the interpreter."""

SMALL: dict[str, Any] = {"max_seq_len": 40, "max_head_dim": 8}


@pytest.fixture(scope="module")
def kernel() -> Iterator[DeltaKernel]:
    """``triton/delta.chunk`` at C = 16, with the interpreter's patches (bf16) switched on."""
    yield from with_interpreter_patches(
        delta_chunk_kernel().with_options("triton/delta.chunk16", chunk_size=16)
    )


def base_case(**changes: Any) -> DeltaCase:
    """A small in-contract case (two rows of 37 tokens: three chunks of 16), then ``changes``."""
    case = DeltaCase(
        B=2,
        T=37,
        H=1,
        K=8,
        V=6,
        dtype="float32",
        gate="scalar",
        gate_family="logsigmoid",
        beta_family="sigmoid",
        key_family="unit",
        value_family="unit",
        l2norm_qk=False,
        negative_eigenvalues=True,
        initial_state=True,
        output_final_state=True,
        seq_lens=None,
        scale=None,
        seed=11,
    )
    return dataclasses.replace(case, **changes)


@pytest.mark.parametrize("name", list(CATALOGUE))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_catalogue_property_holds(
    name: str, kernel: DeltaKernel, data: st.DataObject, tmp_path_factory: Any
) -> None:
    case = data.draw(delta_cases_for(kernel, **SMALL), label="case")
    assert_property_holds(name, case, kernel, tmp_path_factory.mktemp("f"))


GATE_CASES = {
    "none": {"gate": "none", "gate_family": "none"},
    "scalar": {"gate": "scalar", "l2norm_qk": True, "key_family": "raw"},
    "vector": {"gate": "vector", "B": 1, "T": 45, "seq_lens": (6, 0, 39)},
}
"""One case per gate: the scalar one normalises raw keys in the kernel, the vector one is
varlen with an empty sequence."""


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("gate", list(GATE_CASES))
def test_gate_and_dtype_match_oracle(
    kernel: DeltaKernel, gate: str, dtype: str, tmp_path: Any
) -> None:
    case = base_case(dtype=dtype, **GATE_CASES[gate])
    result = check_property(CATALOGUE["outputs_match_oracle"], case, kernel, directory=tmp_path)
    assert result.status == "held", result.report()
    # The gradient bound is blunt for dk, dbeta and dg (docs/error-model.md §8.5): a case may be
    # ill_conditioned (no digit certified for one tensor), but no comparison may fail.
    result = check_property(CATALOGUE["gradients_match_oracle"], case, kernel, directory=tmp_path)
    assert result.status in ("held", "ill_conditioned"), result.report()
    assert all(c.ok for c in result.comparisons), result.report()


GRADIENT_SANITY = 1e-4
"""Relative agreement of fp32 gradients with float64 autograd on a well-conditioned case: a
wiring check (a wrong term is off by O(1)); the bound judges accuracy above."""


@pytest.mark.parametrize("gate", list(GATE_CASES))
def test_gradients_match_float64_autograd(kernel: DeltaKernel, gate: str) -> None:
    problem = base_case(**GATE_CASES[gate]).build()
    results = {}
    for name, call, p in (
        ("exact", lambda x: delta_recurrent(x), problem.to(torch.float64)),
        ("ours", kernel.call, problem),
    ):
        leaves = {n: t.detach().clone().requires_grad_(True) for n, t in p.inputs().items()}
        o, S = call(dataclasses.replace(p, **leaves))
        gen = torch.Generator().manual_seed(7)
        loss = (o.double() * torch.randn(o.shape, generator=gen, dtype=torch.float64)).sum()
        loss = loss + (S.double() * torch.randn(S.shape, generator=gen, dtype=torch.float64)).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        results[name] = dict(zip(leaves, grads, strict=True))
    assert set(results["ours"]) >= {"q", "k", "v", "beta", "initial_state"}
    assert ("g" in results["ours"]) == (gate != "none")
    errors = {n: relative_error(results["ours"][n], x) for n, x in results["exact"].items()}
    assert max(errors.values()) < GRADIENT_SANITY, errors


def near_parallel_case(gate: str) -> DeltaCase:
    """fp16, one chunk of 48 near-parallel unit keys with beta in [2 - 2^-10, 2)."""
    return base_case(
        B=1,
        T=48,
        K=16,
        V=16,
        dtype="float16",
        gate=gate,
        gate_family="none" if gate == "none" else "mild",
        beta_family="near_two",
        key_family="near_parallel",
        seed=3,
    )


VALUE_SCALE = 3000.0
"""Values and S_0 times this in the fp16 comparison: |o| and |S_T| stay below 65504 (up to
5.1e4 and 4.8e4 here), but U = T diag(beta) V does not once it is rounded to fp16."""


def chunk_system_norm(problem: DeltaProblem) -> float:
    """||L - I||_2 of the first 48-token chunk (float64, first head; the gate left out)."""
    p = problem.to(torch.float64)
    k, beta = p.k[0, :, 0], p.beta[0, :, 0]
    G = torch.zeros(k.shape[0], dtype=torch.float64)
    A = beta[:, None] * (k @ k.T) * pair_weights(G, strict=True, vector=False)
    return float(torch.linalg.matrix_norm(A, ord=2))


def test_near_parallel_keys_fp16_gradients(kernel: DeltaKernel, tmp_path: Any) -> None:
    # C = 64: the whole case is one chunk, one triangular system with ||L - I|| about 60.
    case = near_parallel_case("none")
    assert 30 < chunk_system_norm(case.build()) < 80
    for name in ("outputs_match_oracle", "gradients_match_oracle"):
        result = check_property(CATALOGUE[name], case, delta_chunk_kernel(), directory=tmp_path)
        assert result.status in ("held", "ill_conditioned"), result.report()
        assert all(c.ok for c in result.comparisons), result.report()


FLA_NAMES = {
    "none": "fla/delta_rule.chunk",
    "scalar": "fla/gated_delta_rule.chunk",
    "vector": "fla/kda.chunk",
}


@pytest.mark.parametrize("gate", list(FLA_NAMES))
def test_near_parallel_keys_fp16_finite_and_within_bound(kernel: DeltaKernel, gate: str) -> None:
    # `kernel` (C = 16) only switches the interpreter's patches on; the case is one chunk of 64.
    ours = delta_chunk_kernel()
    problem = near_parallel_case(gate).build()
    problem = dataclasses.replace(
        problem,
        v=(problem.v.float() * VALUE_SCALE).half(),
        initial_state=None
        if problem.initial_state is None
        else problem.initial_state * VALUE_SCALE,
    )
    o, S = ours.call(problem)
    assert S is not None
    bounds = forward_bounds(problem, ours.precision_recipe(torch.float16))
    for name, x in {"o": o, "final_state": S}.items():
        comparison = compare(x, bounds[name], subject=ours.name)
        assert comparison.ok, comparison
    if importlib.util.find_spec("fla") is None:
        return
    from linattn_verify.delta import fla as fla_delta

    exact_o = bounds["o"].reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fla_o, _ = fla_delta.fla_delta_kernel(FLA_NAMES[gate]).call(problem)
    # Measured (fla-core 0.6.0, interpreter): FLA's o has 576 of 768 entries non-finite (U
    # overflows fp16), ours 2e-4..3e-4 relative (the fp16 rounding of o).
    assert relative_error(o, exact_o) <= relative_error(fla_o, exact_o)


def test_rejects_bad_arguments() -> None:
    from linattn_kernels.delta_rule.chunk import chunk_delta_rule

    q = torch.randn(1, 4, 1, 4)
    beta = torch.rand(1, 4, 1)
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_delta_rule(q, q, q, None, beta, chunk_size=48)
    with pytest.raises(ValueError, match="beta"):
        chunk_delta_rule(q, q, q, None, beta[..., 0])
    with pytest.raises(ValueError, match="cu_seqlens"):
        chunk_delta_rule(
            q.expand(2, 4, 1, 4),
            q.expand(2, 4, 1, 4),
            q.expand(2, 4, 1, 4),
            None,
            beta.expand(2, 4, 1),
            cu_seqlens=torch.tensor([0, 4, 8]),
        )


def test_bf16_results_are_rounded_to_nearest_not_truncated() -> None:
    # Under the interpreter a bf16 store truncates; the kernel must round as a GPU store does.
    # One token, K = V = 1: dv = β k s q do exactly in fp32, so its bf16 value is the nearest.
    from linattn_kernels.delta_rule.chunk import chunk_delta_rule

    q, k, v = (torch.tensor([[[[x]]]], dtype=torch.bfloat16) for x in (-0.29296875, 1.0, -2.171875))
    beta = torch.tensor([[[0.63671875]]], dtype=torch.bfloat16)
    do = torch.tensor([[[[1.5390625]]]], dtype=torch.bfloat16)
    v.requires_grad_()
    o, _ = chunk_delta_rule(q, k, v, None, beta, scale=1.0)
    o.backward(do)
    exact = beta.double() * k.double() * q.double() * do.double()
    assert v.grad is not None
    assert v.grad.item() == exact.to(torch.bfloat16).item() == -0.287109375
    assert (
        o.item() == (beta.double() * v.double() * k.double() * q.double()).to(torch.bfloat16).item()
    )
