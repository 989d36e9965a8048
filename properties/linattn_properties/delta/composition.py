# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""How runs of a delta-rule kernel compose: chunk sizes, split sequences, scaled (v, S_0).

Chunk-size invariance and the state split are pairwise (two runs of one exact function agree
within B_a + B_b, the split run's bound carrying the error of the state it was handed); linearity
in (v, S_0) jointly is exact for a power-of-two scale while nothing underflows or overflows, so
it is judged bit for bit there and pairwise elsewhere.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import torch

from linattn_properties._support import property_function
from linattn_properties.delta._support import bounds_of, prepare, run, verdict
from linattn_verify.compare import compare_bitwise
from linattn_verify.compare.pairwise import Side, compare_pair
from linattn_verify.delta.bounds import contraction
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import DeltaProblem, l2norm
from linattn_verify.delta.reference import intermediate_range
from linattn_verify.results import Comparison, PropertyResult
from linattn_verify.typing import dtype_name, torch_dtype


@property_function
def chunk_size_invariant(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that two declared chunk sizes give the same outputs, within B_C1 + B_C2.

    Applies to kernels declaring at least two ``chunk_sizes``; the pair is drawn from the case's
    seed, and each run is bounded with its own C.
    """
    prop = "chunk_size_invariant"
    sizes = kernel.capabilities.chunk_sizes
    case_ = prepare(prop, case, kernel)
    if isinstance(case_, PropertyResult):
        return case_
    if len(sizes) < 2:
        return case_.not_applicable(f"{kernel.name}: declares chunk_sizes={sizes}")
    a, b = random.Random(case.seed).sample(sorted(sizes), 2)
    ka = kernel.with_options(f"{kernel.name}[C={a}]", chunk_size=a)
    kb = kernel.with_options(f"{kernel.name}[C={b}]", chunk_size=b)
    run_a, run_b = run(ka, case_.problem), run(kb, case_.problem)
    bounds_a, bounds_b = bounds_of(ka, case_.problem), bounds_of(kb, case_.problem)
    comparisons = [
        compare_pair(
            name,
            Side.of(ka.name, x, bounds_a[name]),
            Side.of(kb.name, run_b.outputs()[name], bounds_b[name]),
            bounds_a[name].reference,
        )
        for name, x in run_a.outputs().items()
    ]
    return verdict(prop, kernel, case, comparisons)


@property_function
def state_split_composes(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that running [0, t) then [t, T) from the first part's state equals one run.

    Without packed sequences: the first part's final state S_t (fp32, as returned) is the second
    part's initial state. The second run's bound adds what an error E_t (per value column, the
    first part's state bound) in its initial state can do: s ||q_s|| Π_{r<=s} ρ_r E_t on o_s and
    Π ρ_r E_t on S_T (docs/error-model.md §8.1); o and S_T are judged pairwise against the
    single run.
    """
    prop = "state_split_composes"
    case_ = prepare(prop, case, kernel)
    if isinstance(case_, PropertyResult):
        return case_
    whole = replace(case_.problem, output_final_state=True)
    if whole.cu_seqlens is not None or whole.shape[1] < 2:
        return case_.not_applicable("needs one unpacked sequence of at least two tokens per row")
    if kernel.supports(whole) is not None:
        return case_.not_applicable(str(kernel.supports(whole)))
    T = whole.shape[1]
    t = random.Random(case.seed).randrange(1, T)

    def part(lo: int, hi: int, state: torch.Tensor | None) -> Any:
        return replace(whole.token_span(lo, hi), initial_state=state)

    first = part(0, t, whole.initial_state)
    first_run = run(kernel, first)
    assert first_run.final_state is not None
    carried = first_run.final_state.to(torch.float32)
    second = part(t, T, carried)
    second_run, whole_run = run(kernel, second), run(kernel, whole)
    E_t = bounds_of(kernel, first)["final_state"].bound[:, :, 0, :]  # [B, H, V]
    second_bounds, whole_bounds = bounds_of(kernel, second), bounds_of(kernel, whole)
    # How far an initial-state error E_t can travel: Π ρ over the second part's tokens.
    p = second.to(torch.float64)
    keys = l2norm(p.k) if p.l2norm_qk else p.k
    queries = l2norm(p.q) if p.l2norm_qk else p.q
    g = None if p.g is None else p.g.transpose(1, 2)
    rho = contraction(p.beta.transpose(1, 2), keys.transpose(1, 2), g).cumprod(-1)  # [B, H, L]
    carried_o = p.scale * queries.norm(dim=-1).transpose(1, 2) * rho  # [B, H, L]
    extra_o = (carried_o[..., None] * E_t[:, :, None, :]).transpose(1, 2)  # [B, L, H, V]
    extra_S = (rho[..., -1, None] * E_t)[:, :, None, :]  # [B, H, 1, V]
    o_side = Side(
        "split run",
        second_run.o,
        second_bounds["o"].bound + extra_o,
        second_bounds["o"].verifiable,
    )
    S_side = Side(
        "split run",
        second_run.final_state,  # type: ignore[arg-type]
        second_bounds["final_state"].bound + extra_S,
        second_bounds["final_state"].verifiable,
    )
    comparisons: list[Comparison] = [
        compare_pair(
            f"o[t>={t}]",
            o_side,
            Side(
                "single run",
                whole_run.o[:, t:],
                whole_bounds["o"].bound[:, t:],
                whole_bounds["o"].verifiable[:, t:],
            ),
            whole_bounds["o"].reference[:, t:],
        ),
        compare_pair(
            "final_state",
            S_side,
            Side.of("single run", whole_run.final_state, whole_bounds["final_state"]),  # type: ignore[arg-type]
            whole_bounds["final_state"].reference,
        ),
    ]
    return verdict(prop, kernel, case, comparisons)


EXACT_MARGIN = 2.0**24
"""How far inside the format's normal range (and below its largest value) every product of
intermediates must stay for doubling to be exact bit for bit: a kernel's own intermediates
(a chunk's inverse, its corrected values) stray from the recurrence's by far less than this."""


def doubling_is_exact(kernel: DeltaKernel, problem: DeltaProblem) -> str | None:
    """`None` if doubling (v, S_0) doubles every intermediate exactly; else why not.

    Doubling is exact unless an intermediate is subnormal (gradual underflow) or overflows in
    the narrowest format the kernel computes or stores it in (fp32, a declared 16-bit storage;
    the output's own rounding to the input dtype is judged per element by the caller). Judged
    from the case's own magnitudes (`intermediate_range`): the products a kernel forms are of at
    most three intermediates, so the smallest lies above the cube of the smallest nonzero one;
    the doubled run's largest is twice the largest.
    """
    recipe = kernel.precision_recipe(problem.q.dtype)
    names = ["float32"]
    for field in ("intermediate_dtype", "inverse_dtype", "state_dtype"):
        declared = getattr(recipe, field)
        if declared is not None:
            names.append(dtype_name(problem.q.dtype) if declared == "input" else declared)
    formats = [torch.finfo(torch_dtype(n)) for n in names]
    tiny = max(f.smallest_normal for f in formats)
    top = min(f.max for f in formats)
    window = recipe.chunk_size if recipe.form == "chunk" else 1
    smallest, largest = intermediate_range(problem, window)
    if largest == 0:
        return None
    if min(smallest, 1.0) ** 3 < tiny * EXACT_MARGIN:
        return (
            f"an intermediate may be subnormal (smallest nonzero magnitude {smallest:.3g}; "
            f"{'/'.join(sorted(set(names)))} normal from {tiny:.3g}), where doubling rounds"
        )
    if 2 * max(largest, 1.0) ** 3 > top / EXACT_MARGIN:
        return f"the doubled run's intermediates reach {2 * largest:.3g}, near {top:.3g}"
    return None


@property_function
def linear_in_values_and_state(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check o(2v, 2S_0) = 2 o(v, S_0) and S_T likewise: bit for bit where doubling is exact.

    The delta rule is linear in (v, S_0) jointly (A_t depends on k, beta and g only), and a
    factor of two is exact in floating point while nothing underflows or overflows, so every
    rounding of the doubled run is then the double of the original's, in any algorithm: the
    runs are compared bit for bit (elements subnormal in the output dtype excepted: their own
    rounding does not double). Where the bits differ and an intermediate of the case can be
    subnormal (steep gates, tiny values) or overflow (`doubling_is_exact`, from the case's own
    magnitudes, for every dtype and storage format), the doubled run is judged pairwise instead:
    |y - 2x| <= B(2v, 2S_0) + 2 B(v, S_0). Bits that differ where doubling is exact fail.
    """
    prop = "linear_in_values_and_state"
    case_ = prepare(prop, case, kernel, in_contract=True)
    if isinstance(case_, PropertyResult):
        return case_
    problem = case_.problem
    doubled = replace(
        problem,
        v=problem.v * 2,
        initial_state=None if problem.initial_state is None else problem.initial_state * 2,
    )
    if not bool(torch.isfinite(doubled.v).all()):
        return case_.not_applicable("2v overflows the input dtype")
    base, twice = run(kernel, problem), run(kernel, doubled)
    comparisons = []
    for name, x in base.outputs().items():
        y = twice.outputs()[name]
        # Rounding the result to its dtype doubles exactly unless it is subnormal there.
        tiny = torch.finfo(x.dtype).tiny
        subnormal = (x.abs() < 2 * tiny) | (y.abs() < 2 * tiny)
        comparisons.append(
            compare_bitwise(
                name,
                y,
                x * 2,
                subject=kernel.name,
                condition="with v and S_0 doubled (must be 2x the original)",
                undefined=subnormal,
            )
        )
    inexact = None if all(c.ok for c in comparisons) else doubling_is_exact(kernel, problem)
    if inexact is None:
        return verdict(prop, kernel, case, comparisons)
    base_bounds, twice_bounds = bounds_of(kernel, problem), bounds_of(kernel, doubled)
    pairs = [
        compare_pair(
            name,
            Side.of("doubled run", y, twice_bounds[name]),
            Side(
                "2 x original",
                base.outputs()[name].double() * 2,
                2 * base_bounds[name].bound,
                base_bounds[name].verifiable,
            ),
            twice_bounds[name].reference,
        )
        for name, y in twice.outputs().items()
    ]
    result = verdict(prop, kernel, case, pairs)
    return replace(
        result, notes=(*result.notes, f"bits differ, judged within the bounds: {inexact}")
    )


__all__ = ["chunk_size_invariant", "linear_in_values_and_state", "state_split_composes"]
