# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The fp32 delta-rule references (`linattn_verify.delta.reference_kernels`) and the delta zoo.

A sanity and wiring test, not a judgement against error bounds: the references must agree with
the float64 oracle `delta_recurrent` to a float32-level figure (1e-4 of max |o| forward, 1e-3 of
the largest gradient entry backward) on small well-conditioned problems; judging them against
the recipe's bounds comes with the bound model (#14). The zoo's broken kernels must each be
observably wrong: on a case picked for its bug (the table `EXPOSING`) the broken kernel differs
from the float64 oracle by more than 10x what its twin does, and every twin agrees.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from linattn_verify.core.loading import import_file
from linattn_verify.delta import DeltaProblem, delta_recurrent
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.reference_kernels import (
    delta_chunk_torch,
    delta_recurrent_torch,
    delta_reference_kernels,
)
from linattn_verify.errors import InvalidArgument

zoo = import_file(Path(__file__).parents[1] / "zoo" / "delta_bugs.py", "_linattn_zoo_delta_bugs")

RECURRENT, CHUNK = delta_reference_kernels()
REFERENCES = (RECURRENT, CHUNK, CHUNK.with_options("torch/delta.chunk4", chunk_size=4))
REFERENCE_IDS = ("recurrent", "chunk16", "chunk4")
FORWARD_SANITY = 1e-4
GRADIENT_SANITY = 1e-3
ZOO_CLASSES = {
    "precision",
    "decay",
    "wy system",
    "beta",
    "state",
    "causality",
    "gradients",
    "conventions",
}


def relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected|; inf when ``actual`` is not finite."""
    if actual.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(actual).all()):
        return float("inf")
    diff = (actual.double() - expected.double()).abs().max()
    return float(diff) / (float(expected.abs().max()) or 1.0)


def evaluate(call, problem: DeltaProblem, *, backward: bool) -> dict[str, torch.Tensor]:
    """o, S_T and (with ``backward``) the gradient of a fixed random functional of both."""
    leaves = {}
    if backward:
        leaves = {n: t.detach().clone().requires_grad_(True) for n, t in problem.inputs().items()}
        problem = dataclasses.replace(problem, **leaves)
    o, S = call(problem)
    results = {"o": o.detach()}
    if S is not None:
        results["S"] = S.detach()
    if backward:
        gen = torch.Generator().manual_seed(1234)
        loss = (o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)).sum()
        if S is not None:
            cotangent = torch.randn(S.shape, generator=gen, dtype=torch.float64)
            loss = loss + (S * cotangent.to(S.dtype)).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        results.update({f"d{n}": g for n, g in zip(leaves, grads, strict=True)})
    return results


def errors(kernel: DeltaKernel, problem: DeltaProblem, *, backward: bool) -> dict[str, float]:
    """Relative error of each result of ``kernel`` on the fp32 ``problem`` vs float64 autograd."""
    expected = evaluate(delta_recurrent, problem.to(torch.float64), backward=backward)
    actual = evaluate(kernel.call, problem, backward=backward)
    assert actual.keys() == expected.keys()
    return {name: relative(actual[name], expected[name]) for name in expected}


def fp32(problem: DeltaProblem) -> DeltaProblem:
    return problem.to(torch.float32)


# The references against the float64 oracle.


@pytest.mark.parametrize("l2norm", [False, True], ids=["raw", "l2norm"])
@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
@pytest.mark.parametrize("kernel", REFERENCES, ids=REFERENCE_IDS)
def test_reference_forward_matches_oracle(problem_factory, kernel, gate, l2norm):
    problem = fp32(problem_factory(gate=gate, l2norm=l2norm, beta="near2" if l2norm else "random"))
    assert kernel.supports(problem) is None
    errs = errors(kernel, problem, backward=False)
    assert max(errs.values()) < FORWARD_SANITY, errs


@pytest.mark.parametrize("h0", [True, False], ids=["h0", "no_h0"])
@pytest.mark.parametrize("gate", ["none", "vector"])
@pytest.mark.parametrize("kernel", REFERENCES, ids=REFERENCE_IDS)
def test_reference_varlen_with_empty_sequence(problem_factory, kernel, gate, h0):
    problem = fp32(problem_factory(gate=gate, B=1, T=21, h0=h0, cu_seqlens=[0, 6, 6, 21, 21]))
    errs = errors(kernel, problem, backward=False)
    assert max(errs.values()) < FORWARD_SANITY, errs
    _, S = kernel.call(problem)
    # An empty sequence returns its own S_0 (zeros without one), untouched.
    S0 = torch.zeros_like(S) if problem.initial_state is None else problem.initial_state
    assert torch.equal(S[1], S0[1])
    assert torch.equal(S[3], S0[3])


@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
@pytest.mark.parametrize("kernel", REFERENCES[:2], ids=REFERENCE_IDS[:2])
def test_reference_gradients_match_float64_autograd(problem_factory, kernel, gate):
    problem = fp32(problem_factory(gate=gate, l2norm=gate == "scalar", B=1, T=19, seed=3))
    errs = errors(kernel, problem, backward=True)
    assert {"dq", "dk", "dv", "dbeta", "dinitial_state"} <= errs.keys()
    assert (gate == "none") != ("dg" in errs)
    assert max(errs.values()) < GRADIENT_SANITY, errs


def test_reference_varlen_gradients(problem_factory):
    problem = fp32(problem_factory(gate="vector", B=1, T=14, cu_seqlens=[0, 5, 5, 14], seed=5))
    for kernel in REFERENCES:
        errs = errors(kernel, problem, backward=True)
        assert max(errs.values()) < GRADIENT_SANITY, (kernel.name, errs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_are_upcast_exactly(problem_factory, dtype):
    low = problem_factory(gate="vector", T=11).to(dtype)
    upcast = low.to(torch.float32)
    for kernel in REFERENCES:
        o, S = kernel.call(low)
        o32, S32 = kernel.call(upcast)
        assert o.dtype == dtype
        assert S.dtype == torch.float32
        # Every op in fp32 on the exact upcast; o rounded to the input dtype once at the end.
        assert torch.equal(o, o32.to(dtype))
        assert torch.equal(S, S32)


def test_reference_kernels_declarations(problem_factory):
    assert [k.name for k in delta_reference_kernels()] == [
        "torch/delta.recurrent",
        "torch/delta.chunk",
    ]
    assert RECURRENT.recipe == DeltaRecipe(form="recurrent")
    assert CHUNK.recipe == DeltaRecipe(form="chunk", chunk_size=16)
    assert CHUNK.with_options("c", chunk_size=8).precision_recipe(torch.float32).chunk_size == 8
    for kernel in (RECURRENT, CHUNK):
        cap = kernel.capabilities
        assert cap.gates == ("none", "scalar", "vector")
        assert cap.l2norm_qk == (False, True)
        assert cap.negative_eigenvalues
        assert cap.varlen
        assert cap.backward
        assert cap.initial_state
        assert cap.final_state
        assert set(cap.dtypes) == {"float32", "float16", "bfloat16"}
    assert 16 in CHUNK.capabilities.chunk_sizes
    assert RECURRENT.capabilities.chunk_sizes == ()
    problem = fp32(problem_factory(gate="scalar", final=False))
    for kernel in (RECURRENT, CHUNK):
        o, S = kernel.call(problem)
        assert S is None
        assert o.shape == problem.v.shape


def test_invalid_arguments_are_named(problem_factory):
    p = fp32(problem_factory(gate="none"))
    with pytest.raises(InvalidArgument, match="chunk_size"):
        delta_chunk_torch(p.q, p.k, p.v, None, p.beta, chunk_size=0)
    with pytest.raises(InvalidArgument, match="beta"):
        delta_recurrent_torch(p.q, p.k, p.v, None, p.beta + 2)


# The zoo.


def _steep(problem: DeltaProblem) -> DeltaProblem:
    # A decay of e^-8 per token: the cumulative gate of a 16-token chunk reaches -128.
    return dataclasses.replace(problem, g=torch.full_like(problem.g, -8.0))


def _small_rows(problem: DeltaProblem) -> DeltaProblem:
    # Rows with ||x||² ~ eps, where x / (||x|| + eps) and x / sqrt(||x||² + eps) part ways.
    small = torch.ones_like(problem.q[..., :1])
    small[:, ::3] = 1e-3
    return dataclasses.replace(problem, q=problem.q * small, k=problem.k * small)


CASES = {
    "default": ({"gate": "scalar"}, None, False),
    "steep_gate": ({"gate": "scalar"}, _steep, False),
    "varlen": ({"gate": "scalar", "B": 1, "T": 21, "cu_seqlens": [0, 6, 6, 21]}, None, False),
    "small_rows": ({"gate": "vector", "l2norm": True}, _small_rows, False),
    "backward": ({"gate": "scalar", "B": 1, "T": 19, "seed": 3}, None, True),
}
"""Named cases: problem_factory keywords, a transformation, whether to run the backward."""

EXPOSING = {
    "zoo/delta_state_bf16": "default",
    "zoo/delta_inverse_fp16": "default",
    "zoo/delta_undecayed_prediction": "default",
    "zoo/delta_factored_gate": "steep_gate",
    "zoo/delta_w_undecayed": "default",
    "zoo/delta_beta_wrong_side": "default",
    "zoo/delta_inclusive_tril": "default",
    "zoo/delta_beta_value_only": "default",
    "zoo/delta_initial_state_by_batch_row": "varlen",
    "zoo/delta_final_state_before_tail": "default",
    "zoo/delta_full_qk_mask": "default",
    "zoo/delta_dbeta_without_prediction": "backward",
    "zoo/delta_scale_on_k": "default",
    "zoo/delta_l2norm_eps_outside_sqrt": "small_rows",
}
"""The case that exposes each broken kernel."""

BELOW_BOUND = {"zoo/delta_output_truncated"}
"""Broken kernels whose error is below every tolerance bound (one ulp of a 16-bit o): they are
observably wrong bit for bit, not by 10x (`test_truncated_output_is_one_ulp_toward_zero`)."""


MEMORY_PATHS = {"zoo/delta_last_dim_stride_ignored", "zoo/delta_dense_cotangent_assumed"}
"""Broken kernels right on every dense contiguous problem: wrong only for a strided last dim or
an expanded or transposed cotangent, which `contract_holds` and `backward_takes_any_cotangent`
hand them (`tests/zoo/test_delta_zoo.py`)."""


def case(problem_factory, name: str) -> tuple[DeltaProblem, bool]:
    kwargs, transform, backward = CASES[name]
    problem = problem_factory(**kwargs)
    if transform is not None:
        problem = transform(problem)
    return fp32(problem), backward


def test_zoo_table():
    names = [kernel.name for kernel, _, _ in zoo.DELTA_ZOO]
    assert len(names) >= 8
    assert len(set(names)) == len(names)
    assert set(names) == set(EXPOSING) | BELOW_BOUND | MEMORY_PATHS
    assert {bug_class for _, bug_class, _ in zoo.DELTA_ZOO} == ZOO_CLASSES
    for kernel, _, description in zoo.DELTA_ZOO:
        assert kernel.name.startswith("zoo/delta_")
        assert len(description) > 80
        twin = zoo.DELTA_TWIN_OF[kernel.name]
        assert twin in zoo.DELTA_TWINS
        assert kernel.capabilities == twin.capabilities
        assert kernel.recipe == twin.recipe


@pytest.mark.parametrize(
    ("twin", "reference"),
    [(zoo.RECURRENT_TWIN, RECURRENT), (zoo.CHUNK_TWIN, CHUNK), (zoo.FUNCTION_TWIN, RECURRENT)],
    ids=["recurrent", "chunk", "function"],
)
def test_twins_compute_the_references_bit_for_bit(problem_factory, twin, reference):
    problem = fp32(problem_factory(gate="vector", l2norm=True, B=1, T=21, cu_seqlens=[0, 4, 21]))
    o, S = twin.call(problem)
    o_ref, S_ref = reference.call(problem)
    assert torch.equal(o, o_ref)
    assert torch.equal(S, S_ref)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("twin", zoo.DELTA_TWINS, ids=lambda t: t.name.removeprefix("zoo-twin/"))
def test_zoo_twin_agrees(problem_factory, twin, name):
    problem, backward = case(problem_factory, name)
    errs = errors(twin, problem, backward=backward)
    allowed = GRADIENT_SANITY if backward else FORWARD_SANITY
    assert max(errs.values()) < allowed, errs


@pytest.mark.parametrize(
    "entry",
    [e for e in zoo.DELTA_ZOO if e[0].name in EXPOSING],
    ids=lambda e: e[0].name.removeprefix("zoo/"),
)
def test_zoo_entry_is_observably_wrong(problem_factory, entry, record_property):
    broken = entry[0]
    twin = zoo.DELTA_TWIN_OF[broken.name]
    problem, backward = case(problem_factory, EXPOSING[broken.name])
    broken_err = max(errors(broken, problem, backward=backward).values())
    twin_err = max(errors(twin, problem, backward=backward).values())
    record_property("errors", (broken_err, twin_err))
    print(f"{broken.name}: error {broken_err:.3e}, twin {twin_err:.3e}")
    assert broken_err > 10 * max(twin_err, 2.0**-24), (broken_err, twin_err)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_truncated_output_is_one_ulp_toward_zero(problem_factory, dtype):
    # Where the twin rounds away from zero, the broken kernel's o is the next number toward
    # zero; everywhere else it is the twin's, and the final state is the twin's.
    broken = next(k for k, _, _ in zoo.DELTA_ZOO if k.name == "zoo/delta_output_truncated")
    twin = zoo.DELTA_TWIN_OF[broken.name]
    p = fp32(problem_factory(gate="scalar"))
    problem = dataclasses.replace(p, q=p.q.to(dtype), k=p.k.to(dtype), v=p.v.to(dtype))
    problem = dataclasses.replace(problem, beta=problem.beta.to(dtype))
    (o, S), (o_twin, S_twin) = broken.call(problem), twin.call(problem)
    differ = o != o_twin
    assert bool(differ.any())
    step = torch.nextafter(o_twin, torch.zeros_like(o_twin))
    assert torch.equal(o[differ], step[differ])
    assert torch.equal(S, S_twin)
    # fp32 outputs are stored without rounding: nothing to truncate.
    assert torch.equal(broken.call(p)[0], twin.call(p)[0])


HIDDEN = {
    "zoo/delta_undecayed_prediction": ({"gate": "none"}, None),
    "zoo/delta_w_undecayed": ({"gate": "none"}, None),
    "zoo/delta_factored_gate": ({"gate": "vector"}, None),
    "zoo/delta_beta_wrong_side": ({"gate": "scalar", "beta": "one"}, None),
    "zoo/delta_beta_value_only": ({"gate": "scalar", "beta": "one"}, None),
    "zoo/delta_initial_state_by_batch_row": ({"gate": "scalar"}, None),
    "zoo/delta_final_state_before_tail": ({"gate": "scalar", "T": 32}, None),
    "zoo/delta_scale_on_k": ({"gate": "vector"}, lambda p: dataclasses.replace(p, scale=1.0)),
    "zoo/delta_l2norm_eps_outside_sqrt": ({"gate": "vector", "l2norm": True}, None),
}
"""Cases on which a bug stays hidden, as its description says (why a plain test misses it)."""


@pytest.mark.parametrize("name", sorted(HIDDEN), ids=lambda n: n.removeprefix("zoo/"))
def test_zoo_bug_hidden_where_its_description_says(problem_factory, name):
    broken = next(kernel for kernel, _, _ in zoo.DELTA_ZOO if kernel.name == name)
    kwargs, transform = HIDDEN[name]
    problem = problem_factory(**kwargs)
    problem = fp32(problem if transform is None else transform(problem))
    errs = errors(broken, problem, backward=False)
    assert max(errs.values()) < FORWARD_SANITY, errs


def test_dbeta_bug_leaves_the_other_gradients_right(problem_factory):
    problem, _ = case(problem_factory, "backward")
    broken = next(k for k, _, _ in zoo.DELTA_ZOO if k.name == "zoo/delta_dbeta_without_prediction")
    errs = errors(broken, problem, backward=True)
    assert errs.pop("dbeta") > 1e-2
    assert max(errs.values()) < GRADIENT_SANITY, errs
