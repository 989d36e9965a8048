# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule's own identities, and the pairwise properties it shares with the catalogue.

Two runs of one exact function, each within its recipe's bound B of the exact value, agree
within B_a + B_b (`linattn_verify.compare.pairwise`); a read-back is judged against the value
written, with the exact deviation the key's norm leaves added to the bound.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from linattn_properties._support import property_function
from linattn_properties.delta._support import bounds_of, prepare, run, verdict
from linattn_verify.compare import compare_within
from linattn_verify.compare.pairwise import Side, compare_pair
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import DeltaProblem, l2norm
from linattn_verify.results import Comparison, PropertyResult


def _pair(
    kernel: DeltaKernel,
    a: DeltaProblem,
    b: DeltaProblem,
    labels: tuple[str, str],
) -> list[Comparison]:
    """Run ``a`` and ``b`` (one exact function) and judge every output pairwise."""
    run_a, run_b = run(kernel, a), run(kernel, b)
    bounds_a, bounds_b = bounds_of(kernel, a), bounds_of(kernel, b)
    out_b = run_b.outputs()
    return [
        compare_pair(
            name,
            Side.of(labels[0], x, bounds_a[name]),
            Side.of(labels[1], out_b[name], bounds_b[name]),
            bounds_a[name].reference,
        )
        for name, x in run_a.outputs().items()
    ]


@property_function
def unit_key_reads_back_value(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that with beta = 1 the state reads back the value just written: S_T^T k_T = v_T.

    With beta_T = 1, S_T^T k_T = v_T + (1 - ||k_T||²)(S'^T_T k_T - v_T): for a unit key the last
    write is read back exactly. Per sequence, with Ŝ_T the kernel's final state and B_S its
    bound: |Ŝ_T^T k_T - v_T| <= |k_T|^T B_S + |S_T^T k_T - v_T| (the exact deviation of a key
    whose norm rounding moved off 1), with k the L2-normalised key where the kernel normalises.
    """
    prop = "unit_key_reads_back_value"
    built = case.build()
    problem = replace(built, beta=torch.ones_like(built.beta), output_final_state=True)
    reason = kernel.supports(problem)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    if (outside := kernel.contract(problem)) is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=outside)
    result = run(kernel, problem)
    assert result.final_state is not None
    tb = bounds_of(kernel, problem)["final_state"]
    p64 = problem.to(torch.float64)
    keys = l2norm(p64.k) if p64.l2norm_qk else p64.k
    reads, written, allowed, magnitude = [], [], [], []
    for n, b, start, end in problem.sequences():
        if end == start:
            continue
        k_T, v_T = keys[b, end - 1], p64.v[b, end - 1]  # [H, K], [H, V]
        S_hat = result.final_state[n].to(torch.float64)
        exact = (tb.reference[n] * k_T[..., None]).sum(-2)
        reads.append((S_hat * k_T[..., None]).sum(-2))
        written.append(v_T)
        allowed.append((tb.bound[n] * k_T.abs()[..., None]).sum(-2) + (exact - v_T).abs())
        magnitude.append((tb.reference[n].abs() * k_T.abs()[..., None]).sum(-2))
    if not reads:
        return PropertyResult(
            prop, kernel.name, case.describe(), "not_applicable", reason="every sequence is empty"
        )
    comparison = compare_within(
        "S_T^T k_T",
        torch.stack(reads),
        torch.stack(written),
        torch.stack(allowed),
        magnitude=torch.stack(magnitude),
        unit=tb.unit,
        subject=kernel.name,
    )
    return verdict(prop, kernel, case, [comparison])


@property_function
def no_gate_matches_zero_gate(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that g = None and g = 0 (e^0 = 1: no decay) give the same outputs, pairwise.

    Applies to kernels declaring ``"none"`` and a gate shape: the two calls often take different
    code paths (a USE_G switch), and must agree within B_a + B_b.
    """
    prop = "no_gate_matches_zero_gate"
    gates = kernel.capabilities.gates
    shaped = [g for g in gates if g != "none"]
    if "none" not in gates or not shaped:
        return PropertyResult(
            prop,
            kernel.name,
            case.describe(),
            "not_applicable",
            reason=f"{kernel.name}: needs gates 'none' and a gate shape (declares {gates})",
        )
    built = case.build()
    plain = replace(built, g=None)
    K = built.shape[3]
    shape = (*built.q.shape[:3], K) if shaped[0] == "vector" else built.q.shape[:3]
    zero = replace(built, g=torch.zeros(shape, dtype=built.q.dtype, device=built.q.device))
    reason = kernel.supports(plain) or kernel.supports(zero)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    comparisons = _pair(kernel, plain, zero, ("g=None", f"g=0 ({shaped[0]})"))
    return verdict(prop, kernel, case, comparisons)


@property_function
def scalar_gate_matches_repeated_vector(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that a scalar gate g [B, T, H] and g repeated over K [B, T, H, K] agree, pairwise.

    The same exact function (a scalar gate decays every key dimension alike), so the outputs
    agree within B_a + B_b. Applies to kernels declaring both gate shapes; the case's gate (its
    first key dimension, for a vector gate) is the scalar one.
    """
    prop = "scalar_gate_matches_repeated_vector"
    if not {"scalar", "vector"} <= set(kernel.capabilities.gates):
        return PropertyResult(
            prop,
            kernel.name,
            case.describe(),
            "not_applicable",
            reason=f"{kernel.name}: declares gates {kernel.capabilities.gates}, not both shapes",
        )
    built = case.build()
    if built.g is None:
        return PropertyResult(
            prop, kernel.name, case.describe(), "not_applicable", reason="the case has no gate"
        )
    g = built.g if built.g.ndim == 3 else built.g[..., 0].contiguous()
    scalar = replace(built, g=g)
    vector = replace(built, g=g[..., None].expand(*g.shape, built.shape[3]).contiguous())
    reason = kernel.supports(scalar) or kernel.supports(vector)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    return verdict(prop, kernel, case, _pair(kernel, scalar, vector, ("scalar g", "vector g")))


@property_function
def varlen_matches_separate_runs(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that a packed (``cu_seqlens``) run equals each sequence run on its own, pairwise.

    Per non-empty sequence n: o of its tokens and S_T[n] from the packed run agree with a run on
    that sequence alone (B = 1, its own S_0) within B_a + B_b.
    """
    prop = "varlen_matches_separate_runs"
    case_ = prepare(prop, case, kernel)
    if isinstance(case_, PropertyResult):
        return case_
    packed = replace(case_.problem, output_final_state=kernel.capabilities.final_state)
    if packed.cu_seqlens is None:
        return case_.not_applicable("the case packs no sequences (no cu_seqlens)")
    whole = run(kernel, packed)
    whole_bounds = bounds_of(kernel, packed)
    comparisons: list[Comparison] = []
    for n, _, start, end in packed.sequences():
        if end == start:
            continue
        alone = replace(
            packed.token_span(start, end),
            initial_state=None if packed.initial_state is None else packed.initial_state[n : n + 1],
            cu_seqlens=None,
        )
        single = run(kernel, alone)
        single_bounds = bounds_of(kernel, alone)
        for name, x in single.outputs().items():
            tb = whole_bounds[name]
            span = slice(start, end) if name == "o" else slice(n, n + 1)
            axis = 1 if name == "o" else 0

            def part(t: torch.Tensor, span: slice = span, axis: int = axis) -> torch.Tensor:
                return t[span] if axis == 0 else t[:, span]

            packed_side = Side(
                "packed run", part(whole.outputs()[name]), part(tb.bound), part(tb.verifiable)
            )
            comparisons.append(
                compare_pair(
                    f"{name}[sequence {n}]",
                    packed_side,
                    Side.of("separate run", x, single_bounds[name]),
                    part(tb.reference),
                )
            )
    return verdict(prop, kernel, case, comparisons)


__all__ = [
    "no_gate_matches_zero_gate",
    "scalar_gate_matches_repeated_vector",
    "unit_key_reads_back_value",
    "varlen_matches_separate_runs",
]
