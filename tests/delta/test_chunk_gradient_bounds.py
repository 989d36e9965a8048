# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk (WY) recipe's gradient bound: its sums are the gradients, sound, and sharp.

Soundness: torch autograd of the fp32 chunk reference (``torch/delta.chunk``, C = 16) stays
within the bound (r <= 1; the fail threshold is 2) on a deterministic set of cases covering every
gate shape, the in-kernel L2 norm, beta near 2, varlen with an empty sequence, nearly parallel
keys, steep gates and T not a multiple of C, in fp32 and bf16. Sharpness: the zoo's fp16 inverse
(``zoo/delta_inverse_fp16``) exceeds it (r > 2) where the recipe declares an fp32 inverse, and
stays within it where the recipe declares the fp16 store.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from linattn_verify.core.loading import import_file
from linattn_verify.delta import chunk_gradient_bounds as cgb
from linattn_verify.delta.gradient_assembly import reference_gradients
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import sequence_inputs
from linattn_verify.delta.reference_kernels import delta_reference_kernels
from linattn_verify.delta.strategies import DeltaCase, random_delta_cotangents

RECIPE = DeltaRecipe(form="chunk", chunk_size=16)
ZOO = Path(__file__).resolve().parents[1] / "zoo" / "delta_bugs.py"


def case(**overrides: Any) -> DeltaCase:
    fields: dict[str, Any] = {
        "B": 1,
        "T": 40,
        "H": 2,
        "K": 16,
        "V": 16,
        "dtype": "float32",
        "gate": "scalar",
        "gate_family": "logsigmoid",
        "beta_family": "sigmoid",
        "key_family": "unit",
        "value_family": "unit",
        "l2norm_qk": False,
        "negative_eigenvalues": False,
        "initial_state": True,
        "output_final_state": True,
        "seq_lens": None,
        "scale": None,
        "seed": 1,
    }
    fields.update(overrides)
    return DeltaCase(**fields)


CASES = {
    "scalar": case(),
    "no_gate": case(gate="none", gate_family="none", seed=2),
    "vector": case(gate="vector", seed=3),
    "l2norm_raw": case(key_family="raw", l2norm_qk=True, seed=4),
    "beta_near_two": case(beta_family="near_two", negative_eigenvalues=True, seed=5),
    "near_parallel": case(key_family="near_parallel", beta_family="one", seed=6),
    "steep": case(gate_family="steep", seed=7),
    "steep_vector": case(gate="vector", gate_family="steep", seed=8),
    "varlen_empty": case(seq_lens=(17, 0, 23), seed=9),
    "mild_long": case(gate_family="mild", T=70, H=1, seed=10),
    "tiny_values": case(value_family="tiny", key_family="raw", l2norm_qk=True, seed=11),
    "no_state": case(initial_state=False, output_final_state=False, T=21, seed=12),
    "bf16": case(dtype="bfloat16", seed=13),
    "bf16_vector_l2norm": case(dtype="bfloat16", gate="vector", key_family="raw", l2norm_qk=True),
    "bf16_near_two": case(dtype="bfloat16", beta_family="near_two", negative_eigenvalues=True),
}


def chunk_kernel() -> DeltaKernel:
    return {k.name: k for k in delta_reference_kernels()}["torch/delta.chunk"]


def kernel_gradients(
    kernel: DeltaKernel, problem: DeltaProblem, do: torch.Tensor, dS: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    leaves = {n: x.detach().clone().requires_grad_(True) for n, x in problem.inputs().items()}
    o, S = kernel.call(replace(problem, **leaves))  # type: ignore[arg-type]
    loss = (o.float() * do.float()).sum()
    if S is not None and dS is not None:
        loss = loss + (S.float() * dS.float()).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        n: torch.zeros_like(leaves[n]) if g is None else g
        for n, g in zip(leaves, grads, strict=True)
    }


def worst_ratios(
    kernel: DeltaKernel, problem: DeltaProblem, recipe: DeltaRecipe, seed: int = 0
) -> dict[str, float]:
    do, dS = random_delta_cotangents(problem, seed)
    bounds = cgb.chunk_backward_bounds(problem, recipe, do=do, d_final_state=dS)
    got = kernel_gradients(kernel, problem, do, dS)
    ratios = {}
    for name, tb in bounds.items():
        assert torch.isfinite(tb.bound).all(), name
        error = (got[name[1:]].double() - tb.reference).abs()
        ratios[name] = float((error / tb.bound).max()) if error.numel() else 0.0
    return ratios


@pytest.mark.parametrize("name", list(CASES))
def test_reference_chunk_kernel_within_bound(name: str) -> None:
    problem = CASES[name].build()
    ratios = worst_ratios(chunk_kernel(), problem, RECIPE)
    assert set(ratios) == {"d" + n for n in problem.inputs()}
    assert max(ratios.values()) <= 1.0, ratios


@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
def test_chunk_sums_are_the_gradients(gate: str) -> None:
    """`chunk_backward` in exact mode, chained over chunks, is float64 autograd of the oracle."""
    problem = case(gate=gate, gate_family="none" if gate == "none" else "logsigmoid", T=37).build()
    do, dS = random_delta_cotangents(problem, 0)
    assert dS is not None
    exact = reference_gradients(problem, do, dS)
    p = problem.to(torch.float64)
    seq = sequence_inputs(p, 0, 0, 0, 37)
    do64 = do.double()[0].transpose(0, 1)
    C, starts, S, states = 16, range(0, 37, 16), seq.S0, []
    zero = torch.zeros_like(S)
    for s in starts:
        x, _ = cgb.chunk_inputs(seq, s, min(s + C, 37), S, zero, do64[:, s : s + C])
        states.append(S)
        S = cgb.evaluate(x, p.scale, magnitude=False)(*x.primitives())["S_next"]
    Lam = dS[0].double()
    parts: dict[str, list[torch.Tensor]] = {n: [] for n in ("q", "k", "v", "beta", "g")}
    for s, S in reversed(list(zip(starts, states, strict=True))):
        x, _ = cgb.chunk_inputs(seq, s, min(s + C, 37), S, Lam, do64[:, s : s + C])
        out = cgb.evaluate(x, p.scale, magnitude=False)(*x.primitives())
        for n in parts:
            parts[n].insert(0, out[n])
        Lam = out["Lam_in"]
    for n, chunks in parts.items():
        if n not in exact:
            continue
        mine = torch.cat(chunks, 1)
        if n == "g" and gate == "scalar":
            mine = mine.sum(-1)
        torch.testing.assert_close(mine.transpose(0, 1), exact[n][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(Lam, exact["initial_state"][0], rtol=0, atol=1e-12)


def test_backward_bounds_dispatches_the_chunk_recipe() -> None:
    problem = CASES["varlen_empty"].build()
    do, dS = random_delta_cotangents(problem, 0)
    a = backward_bounds(problem, RECIPE, do=do, d_final_state=dS)
    b = cgb.chunk_backward_bounds(problem, RECIPE, do=do, d_final_state=dS)
    assert set(a) == set(b)
    for name in a:
        assert torch.equal(a[name].bound, b[name].bound), name
    # The empty sequence's S_0 gradient is dS_T exactly: only its final rounding is allowed.
    assert dS is not None
    empty = a["dinitial_state"]
    assert torch.equal(empty.reference[1], dS[1].double())
    assert float(empty.bound[1].max()) <= 2.0**-24 * float(dS[1].abs().max()) + 2.0**-149


def test_16bit_storage_widens_the_bound() -> None:
    problem = CASES["scalar"].build()
    do, dS = random_delta_cotangents(problem, 0)
    plain = cgb.chunk_backward_bounds(problem, RECIPE, do=do, d_final_state=dS)
    stored = replace(RECIPE, inverse_dtype="bfloat16", intermediate_dtype="bfloat16")
    wide = cgb.chunk_backward_bounds(problem, stored, do=do, d_final_state=dS)
    for name in plain:
        assert bool((wide[name].bound >= plain[name].bound).all()), name
    assert float((wide["dv"].bound / plain["dv"].bound).max()) > 100


def zoo_kernel(name: str) -> DeltaKernel:
    module = import_file(ZOO, "_delta_bugs_for_chunk_gradients")
    kernel: DeltaKernel = next(k for k, _, _ in module.DELTA_ZOO if k.name == name)
    return kernel


def test_fp16_inverse_is_caught() -> None:
    """An inverse stored in fp16 where the recipe says fp32: r > 2 in dv (about 5)."""
    bug = zoo_kernel("zoo/delta_inverse_fp16")
    ratios = worst_ratios(bug, CASES["scalar"].build(), RECIPE)
    assert ratios["dv"] > 2, ratios


def test_fp16_inverse_declared_is_within_bound() -> None:
    """The same kernel judged by a recipe declaring the fp16 store: within the bound."""
    bug = zoo_kernel("zoo/delta_inverse_fp16")
    recipe = replace(RECIPE, inverse_dtype="float16")
    for name in ("scalar", "no_gate", "near_parallel"):
        ratios = worst_ratios(bug, CASES[name].build(), recipe)
        assert max(ratios.values()) <= 1.0, (name, ratios)
