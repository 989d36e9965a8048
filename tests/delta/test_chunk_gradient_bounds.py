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
from linattn_verify.delta import chunk_backward as cb
from linattn_verify.delta import chunk_gradient_bounds as cgb
from linattn_verify.delta.bounds import contraction
from linattn_verify.delta.gradient_assembly import l2norm_chain, reference_gradients
from linattn_verify.delta.gradient_bounds import backward_bounds
from linattn_verify.delta.inverse import inverse_kind
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.delta.reference import sequence_inputs
from linattn_verify.delta.reference_kernels import delta_reference_kernels
from linattn_verify.delta.strategies import DeltaCase, random_delta_cotangents
from linattn_verify.delta.units import Units

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


def chunk_by_chunk(
    seq: Any,
    raw_q: torch.Tensor,
    raw_k: torch.Tensor,
    do: torch.Tensor,
    dS: torch.Tensor,
    scale: float,
    units: Any,
    C: int,
    l2norm_qk: bool,
    floors: tuple[float, float, float],
    inverse: Any,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """`_sequence` as the module docstring states it, one chunk at a time (no batching).

    Every chunk is evaluated on its own: exactly, then the magnitudes' jvp along the model's
    errors and along the carried column errors E and F⁺, as separate calls.
    """
    H, L, K = seq.q.shape
    V = seq.v.shape[-1]
    eps_k = units.l2norm(K, l2norm_qk)
    rho = contraction(seq.beta, seq.k, seq.g)
    counts = cgb.rounding_counts

    def kappa(c: int) -> dict[str, float]:
        return {n: units.gamma(m) + 16 * units.op for n, m in counts(K, V, c).items()}

    def tangents(x: Any, M: torch.Tensor, nodes: Any) -> tuple[torch.Tensor, ...]:
        return cgb.model_tangents(
            x,
            M,
            nodes,
            units=units,
            eps_k=eps_k,
            floors=floors,
            inverse=inverse,
            gated=seq.g is not None,
        )

    spans = [(s, min(s + C, L)) for s in range(0, L, C)]
    S, E, states = seq.S0, torch.zeros(H, V, dtype=torch.float64), []
    for s, e in spans:
        x, M = cb.chunk_inputs(seq, s, e, S, torch.zeros_like(S), do[:, s:e], inverse=inverse)
        states.append((S, E))
        nodes = cb.evaluate(x, scale, magnitude=False)(*x.primitives())
        mag, lin = cb.jvp(
            cb.evaluate(x, scale, magnitude=True), cgb.abs_primals(x, M), tangents(x, M, nodes)
        )
        local = kappa(e - s)["S_next"] * mag["S_next"] + lin["S_next"]
        E = rho[:, s:e].prod(-1)[:, None] * E + local.norm(dim=1)
        S = nodes["S_next"]
    Lam, F = dS, torch.zeros(H, V, dtype=torch.float64)
    out: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for (s, e), (S, E) in reversed(list(zip(spans, states, strict=True))):
        x, M = cb.chunk_inputs(seq, s, e, S, Lam, do[:, s:e], inverse=inverse)
        nodes = cb.evaluate(x, scale, magnitude=False)(*x.primitives())
        f_abs = cb.evaluate(x, scale, magnitude=True)
        primals = cgb.abs_primals(x, M)
        mag, lin = cb.jvp(f_abs, primals, tangents(x, M, nodes))
        dirs = [torch.zeros_like(p) for p in primals]
        dirs[cgb.STATE] = E[:, None, :].expand(H, K, V).clone()
        dirs[cgb.ADJOINT] = F[:, None, :].expand(H, K, V).clone()
        _, carried = cb.jvp(f_abs, primals, tuple(dirs))
        for n in ("q", "k", "v", "beta", "g"):
            bound = kappa(e - s)[n] * mag[n] + lin[n] + carried[n]
            magnitude = mag[n]
            if n in ("q", "k") and l2norm_qk:
                raw = (raw_q if n == "q" else raw_k)[:, s:e]
                bound, magnitude = l2norm_chain(raw, getattr(x, n), bound, magnitude, units, eps_k)
            out.setdefault(n, []).insert(0, (bound, magnitude))
        local = kappa(e - s)["Lam_in"] * mag["Lam_in"] + lin["Lam_in"]
        F = rho[:, s:e].prod(-1)[:, None] * F + local.norm(dim=1)
        Lam = nodes["Lam_in"]
    result = {
        n: (torch.cat([b for b, _ in p], 1), torch.cat([m for _, m in p], 1))
        for n, p in out.items()
    }
    result["initial_state"] = (F[:, None, :].expand(H, K, V).clone(), Lam.abs())
    return result


BATCHED = {
    # name: (case overrides, recipe overrides, causal_exact)
    "scalar_tail": ({"T": 45}, {}, True),
    "no_gate_exact_multiple": ({"T": 48, "gate": "none", "gate_family": "none"}, {}, True),
    "vector_l2norm": (
        {"T": 37, "gate": "vector", "key_family": "raw", "l2norm_qk": True},
        {},
        True,
    ),
    "pivoting": ({"T": 41, "beta_family": "near_two", "negative_eigenvalues": True}, {}, False),
    "products": ({"T": 40, "key_family": "near_parallel"}, {"inverse_method": "products"}, True),
    "stored_bf16": (
        {"T": 50, "dtype": "bfloat16"},
        {"intermediate_dtype": "bfloat16", "inverse_dtype": "float16", "state_dtype": "bfloat16"},
        True,
    ),
    "shorter_than_a_chunk": ({"T": 5, "gate": "vector"}, {"tf32": True}, True),
    "steep_no_state": ({"T": 33, "gate_family": "steep", "initial_state": False}, {}, True),
    "one_head_l2norm": ({"T": 35, "H": 1, "key_family": "raw", "l2norm_qk": True}, {}, True),
}


@pytest.mark.parametrize("name", list(BATCHED))
def test_batched_sequence_equals_chunk_by_chunk(name: str) -> None:
    """`_sequence` on batches of chunks (one, two, all at once) is the chunk-by-chunk bound.

    The batched passes run the exact states and adjoints, the jvps and the column errors on
    chunks folded into the heads axis: a chunk taken for another, a state or an error one chunk
    off, or a lost tail chunk changes bounds here by far more than rounding.
    """
    overrides, recipe_overrides, causal = BATCHED[name]
    problem = case(**overrides).build()
    recipe = DeltaRecipe(form="chunk", chunk_size=8, **recipe_overrides)
    p = problem.to(torch.float64)
    L = problem.shape[1]
    seq = sequence_inputs(p, 0, 0, 0, L)
    raw_q, raw_k = p.q[0].transpose(0, 1), p.k[0].transpose(0, 1)
    gen = torch.Generator().manual_seed(7)
    do = torch.randn(*seq.v.shape, generator=gen, dtype=torch.float64)
    dS = torch.randn(*seq.S0.shape, generator=gen, dtype=torch.float64)
    units = Units.of(recipe, problem.q.dtype)
    args = (seq, raw_q, raw_k, do, dS, p.scale, units, 8, problem.l2norm_qk)
    floors = cgb.storage_floors(recipe, problem.q.dtype)
    inverse = inverse_kind(recipe, causal_exact=causal)
    expected = chunk_by_chunk(*args, floors, inverse)
    H, K = seq.q.shape[0], seq.q.shape[-1]
    per_chunk = 8 * 8 * (K if overrides.get("gate") == "vector" else 1)
    for chunks in (1, 2, 1000):
        got = cgb._sequence(*args, floors, inverse, group_elements=chunks * H * per_chunk)
        assert got.keys() == expected.keys()
        for n, (bound, magnitude) in expected.items():
            torch.testing.assert_close(got[n][0], bound, rtol=1e-12, atol=0, msg=f"{n} {chunks}")
            torch.testing.assert_close(got[n][1], magnitude, rtol=1e-12, atol=0)


def test_exact_passes_are_the_chunk_recurrences() -> None:
    """`chunk_states` and `chunk_adjoints` give `chunk_backward`'s S_next and Lam_in, to the bit."""
    problem = case(gate="vector", T=40).build()
    p = problem.to(torch.float64)
    seq = sequence_inputs(p, 0, 0, 0, 40)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(*seq.v.shape, generator=gen, dtype=torch.float64)
    Lam = torch.randn(*seq.S0.shape, generator=gen, dtype=torch.float64)
    H, C = seq.q.shape[0], 8
    x, _ = cb.chunk_inputs(seq, 0, 40, seq.S0, seq.S0, do, chunks=5)
    states, S_out = cb.chunk_states(x, seq.S0)
    adjoints, Lam_in = cb.chunk_adjoints(x, Lam, p.scale)
    S, expected_states = seq.S0, []
    for s in range(0, 40, C):
        one, _ = cb.chunk_inputs(seq, s, s + C, S, Lam, do[:, s : s + C])
        expected_states.append(S)
        S = cb.evaluate(one, p.scale, magnitude=False)(*one.primitives())["S_next"]
    assert torch.equal(states.reshape(H, 5, *S.shape[1:]), torch.stack(expected_states, 1))
    assert torch.equal(S_out, S)
    expected_adjoints = []
    for j, s in reversed(list(enumerate(range(0, 40, C)))):
        state = expected_states[j]
        one, _ = cb.chunk_inputs(seq, s, s + C, state, Lam, do[:, s : s + C])
        expected_adjoints.insert(0, Lam)
        Lam = cb.evaluate(one, p.scale, magnitude=False)(*one.primitives())["Lam_in"]
    assert torch.equal(adjoints.reshape(H, 5, *Lam.shape[1:]), torch.stack(expected_adjoints, 1))
    assert torch.equal(Lam_in, Lam)
