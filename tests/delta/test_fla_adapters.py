# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""FLA's delta-rule kernels through their adapters (`linattn_verify.delta.fla`): wiring only.

Each kernel runs once per dtype on a tiny problem (B = 1, T = 20, H = 1, K = V = 16, initial and
final state, beta in [0, 1], log-sigmoid gates, unit keys or the in-kernel L2 norm) and must
agree with the float64 recurrence to a loose sanity tolerance: this checks the calling
convention, the gate keywords and the declarations, not accuracy. Judging the kernels against
their error bounds (the declared recipes) is the property tests' job. Without CUDA the kernels
run under the Triton interpreter; the module takes about 15 s on one core.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch

from linattn_verify import interpreter
from linattn_verify.delta import DeltaProblem, delta_recurrent, validate_delta
from linattn_verify.delta import fla as fla_delta
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.errors import InvalidArgument

pytestmark = [
    pytest.mark.interpret,
    pytest.mark.skipif(
        importlib.util.find_spec("fla") is None,
        reason="flash-linear-attention is not installed (fla-core==0.6.0)",
    ),
]

NAMES = fla_delta.FLA_DELTA_KERNEL_NAMES

# Loose on purpose (see the module docstring): a wrong wiring (gate keyword, state layout,
# scale, l2norm flag) is off by O(1); bf16 rounding is about 1e-2 here.
SANITY_RTOL = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@pytest.fixture(scope="module")
def kernels() -> Iterator[dict[str, DeltaKernel]]:
    before = interpreter.enabled()
    found = {k.name: k for k in fla_delta.fla_delta_kernels()}
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("CUDA is available and TRITON_INTERPRET is unset: these cases run on a CPU")
    yield found
    interpreter.disable(patches=[p for p in interpreter.PATCHES if p not in before])


def make_problem(
    gate: str,
    dtype: torch.dtype,
    *,
    l2norm: bool = False,
    T: int = 20,
    K: int = 16,
    V: int = 16,
    cu_seqlens: list[int] | None = None,
    scale: float | None = None,
    seed: int = 0,
) -> DeltaProblem:
    """Return a problem in ``dtype``: unit keys (unless ``l2norm``), beta in [0, 1), S_0."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, 1, K, generator=gen)
    k = torch.randn(1, T, 1, K, generator=gen)
    if not l2norm:
        k = k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(1, T, 1, V, generator=gen)
    beta = torch.rand(1, T, 1, generator=gen)
    gates = {
        "none": None,
        "scalar": torch.nn.functional.logsigmoid(torch.randn(1, T, 1, generator=gen) + 2),
        "vector": torch.nn.functional.logsigmoid(torch.randn(1, T, 1, K, generator=gen) + 2),
    }
    N = 1 if cu_seqlens is None else len(cu_seqlens) - 1
    s0 = torch.randn(N, 1, K, V, generator=gen)
    g = gates[gate]
    return validate_delta(
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        beta.to(dtype),
        None if g is None else g.to(dtype),
        scale=scale,
        l2norm_qk=l2norm,
        initial_state=s0.to(dtype),
        output_final_state=True,
        cu_seqlens=None if cu_seqlens is None else torch.tensor(cu_seqlens),
    )


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected).norm() / expected.norm())


def assert_sane(kernel: DeltaKernel, problem: DeltaProblem) -> None:
    o, final = kernel.call(problem)
    expected_o, expected_final = delta_recurrent(problem.to(torch.float64))
    assert expected_final is not None
    rtol = SANITY_RTOL[problem.q.dtype]
    assert o.dtype == problem.q.dtype
    assert final.dtype == torch.float32
    assert relative_error(o, expected_o) < rtol, (kernel.name, relative_error(o, expected_o))
    error = relative_error(final, expected_final)
    assert error < rtol, (kernel.name, error)


def _gate(kernel: DeltaKernel) -> str:
    return kernel.capabilities.gates[-1]


def _cases() -> list[object]:
    params: list[object] = []
    for i, name in enumerate(NAMES):
        for dtype in (torch.float32, torch.bfloat16):
            # delta_rule.chunk takes no fp32 (FLA asserts); run it in fp16 instead.
            if name == "fla/delta_rule.chunk" and dtype == torch.float32:
                dtype = torch.float16
            l2norm = (i + (dtype == torch.bfloat16)) % 2 == 1
            short = name.removeprefix("fla/")
            label = f"{short}-{str(dtype).removeprefix('torch.')}{'-l2norm' if l2norm else ''}"
            params.append(pytest.param(name, dtype, l2norm, id=label))
    return params


@pytest.mark.parametrize(("name", "dtype", "l2norm"), _cases())
def test_kernel_agrees_with_recurrence(
    kernels: dict[str, DeltaKernel], name: str, dtype: torch.dtype, l2norm: bool
) -> None:
    kernel = kernels[name]
    problem = make_problem(_gate(kernel), dtype, l2norm=l2norm)
    assert kernel.supports(problem) is None
    assert_sane(kernel, problem)


def test_declarations(kernels: dict[str, DeltaKernel]) -> None:
    assert tuple(kernels) == NAMES
    gates = {
        "fla/delta_rule.chunk": ("none",),
        "fla/delta_rule.fused_recurrent": ("none",),
        "fla/gated_delta_rule.chunk": ("scalar",),
        "fla/gated_delta_rule.fused_recurrent": ("none", "scalar", "vector"),
        "fla/kda.chunk": ("vector",),
        "fla/kda.fused_recurrent": ("vector",),
    }
    for name, kernel in kernels.items():
        cap = kernel.capabilities
        assert cap.gates == gates[name], name
        assert cap.l2norm_qk == (False, True), name
        assert (cap.negative_eigenvalues, cap.varlen, cap.deterministic) == (True,) * 3, name
        assert (cap.initial_state, cap.final_state) == (True, True), name
        assert cap.backward == (name.endswith(".chunk") or name == "fla/delta_rule.fused_recurrent")
        chunked = name.endswith(".chunk")
        assert bool(cap.chunk_sizes) == chunked, name
        fp32 = kernel.precision_recipe(torch.float32)
        bf16 = kernel.precision_recipe(torch.bfloat16)
        assert fp32.form == bf16.form == ("chunk" if chunked else "recurrent"), name
        # Under the interpreter every dot is IEEE fp32, and nothing is rounded below fp32.
        assert (fp32.accumulation, fp32.tf32, fp32.casts_on_path) == ("ieee", False, 0), name
        if chunked:
            assert bf16.inverse_dtype == bf16.intermediate_dtype == bf16.state_dtype == "input"
            assert bf16.casts_on_path >= 2, name
        else:
            assert (bf16.state_dtype, bf16.casts_on_path) == (None, 0), name
    assert kernels["fla/delta_rule.chunk"].capabilities.dtypes == ("float16", "bfloat16")
    assert kernels["fla/kda.chunk"].capabilities.chunk_sizes == (32, 64)
    # Only fused_recurrent_delta_rule stores the L2-normalised q, k (l2norm_fwd, input dtype).
    stored = kernels["fla/delta_rule.fused_recurrent"].precision_recipe(torch.bfloat16)
    assert stored.intermediate_dtype == "input"


def test_no_backend_can_take_over(kernels: dict[str, DeltaKernel]) -> None:
    assert fla_delta.active_backends() == []


def test_varlen_with_an_empty_sequence(kernels: dict[str, DeltaKernel]) -> None:
    kernel = kernels["fla/gated_delta_rule.chunk"]
    problem = make_problem("scalar", torch.float32, T=30, cu_seqlens=[0, 7, 7, 30], seed=1)
    assert_sane(kernel, problem)
    # The empty sequence returns its S_0.
    _, final = kernel.call(problem)
    assert torch.equal(final[1], problem.initial_state[1])  # type: ignore[index]


def test_gated_fused_recurrent_takes_every_gate(kernels: dict[str, DeltaKernel]) -> None:
    kernel = kernels["fla/gated_delta_rule.fused_recurrent"]
    for gate in ("none", "vector"):
        assert_sane(kernel, make_problem(gate, torch.float32, T=12, seed=2))


def test_nonpositive_scale_of_fused_recurrent_delta_rule(kernels: dict[str, DeltaKernel]) -> None:
    kernel = kernels["fla/delta_rule.fused_recurrent"]
    assert_sane(kernel, make_problem("none", torch.float32, T=12, scale=-0.3, seed=3))
    o, _ = kernel.call(make_problem("none", torch.float32, T=12, scale=0.0, seed=3))
    assert not bool(o.any())


@pytest.mark.parametrize("name", [n for n in NAMES if n.endswith(".chunk")] + [NAMES[1]])
def test_backward_runs_where_declared(kernels: dict[str, DeltaKernel], name: str) -> None:
    kernel = kernels[name]
    dtype = torch.bfloat16 if name == "fla/delta_rule.chunk" else torch.float32
    problem = make_problem(_gate(kernel), dtype, T=12, l2norm=True, seed=4)
    leaves: dict[str, Any] = {
        n: t.detach().requires_grad_(True) for n, t in problem.inputs().items()
    }
    o, final = kernel.call(replace(problem, **leaves))
    (o.float().sum() + final.sum()).backward()
    exact: dict[str, Any] = {
        n: t.detach().double().requires_grad_(True) for n, t in problem.inputs().items()
    }
    expected_o, expected_final = delta_recurrent(replace(problem.to(torch.float64), **exact))
    assert expected_final is not None
    (expected_o.sum() + expected_final.sum()).backward()  # type: ignore[no-untyped-call]
    for n, leaf in leaves.items():
        assert leaf.grad is not None, (name, n)
        error = relative_error(leaf.grad, exact[n].grad)
        assert error < SANITY_RTOL[dtype], (name, n, error)


def test_forward_only_kernels_have_no_backward(kernels: dict[str, DeltaKernel]) -> None:
    gated = kernels["fla/gated_delta_rule.fused_recurrent"]
    problem = make_problem("scalar", torch.float32, T=4, seed=5)
    q = problem.q.detach().requires_grad_(True)
    o, _ = gated.call(replace(problem, q=q))
    with pytest.raises(NotImplementedError):
        o.sum().backward()
    kda = kernels["fla/kda.fused_recurrent"]
    problem = make_problem("vector", torch.float32, T=4, seed=5)
    o, _ = kda.call(replace(problem, q=problem.q.detach().requires_grad_(True)))
    assert o.grad_fn is None


def test_adapters_reject_gates_fla_cannot_take(kernels: dict[str, DeltaKernel]) -> None:
    q = k = v = torch.zeros(1, 4, 1, 16)
    beta = torch.zeros(1, 4, 1)
    vector = torch.zeros(1, 4, 1, 16)
    # chunk_gated_delta_rule fails on g=None and silently misreads a vector gate.
    for g in (None, vector):
        with pytest.raises(InvalidArgument, match="chunk_gated_delta_rule"):
            kernels["fla/gated_delta_rule.chunk"].fn(q, k, v, g, beta)
    with pytest.raises(InvalidArgument, match="fused_recurrent_kda"):
        kernels["fla/kda.fused_recurrent"].fn(q, k, v, torch.zeros(1, 4, 1), beta)
    with pytest.raises(InvalidArgument, match="chunk_size"):
        kernels["fla/kda.chunk"].fn(q, k, v, vector, beta, chunk_size=16)
    with pytest.raises(InvalidArgument, match="takes none"):
        kernels["fla/kda.fused_recurrent"].fn(q, k, v, vector, beta, chunk_size=64)


def test_lookup_by_name(kernels: dict[str, DeltaKernel]) -> None:
    assert fla_delta.fla_delta_kernel("fla/kda.chunk").name == "fla/kda.chunk"


def test_unknown_name_raises_naming_the_kernels() -> None:
    with pytest.raises(InvalidArgument, match=r"nope.*fla/delta_rule\.chunk"):
        fla_delta.fla_delta_kernel("nope")
