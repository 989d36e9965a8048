# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Causality, exactly: the past never sees the future (docs/design.md §8.3).

Both properties pick a cut t (from the case's seed) and compare bitwise, so they see index bugs
far below any rounding bound: a kernel that reads one token ahead, a chunk whose mask lets the
next token in, a decay weight computed from the wrong end of the chunk.
"""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from linattn_properties._support import (
    nonfinite_allowed,
    prepare_case,
    property_function,
    run_kernel,
    undefined_elements,
)
from linattn_verify.compare import compare_bitwise
from linattn_verify.kernel import Kernel
from linattn_verify.results import PropertyResult
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec


def _cut(problem: Problem, seed: int) -> int | None:
    """Return the cut t (0-based, inside each sequence) or `None` when no sequence has a future."""
    longest = max(end - start for _, _, start, end in problem.sequences())
    if longest < 2:
        return None
    return random.Random(seed).randrange(longest - 1)


def future_mask(problem: Problem, t: int) -> torch.Tensor:
    """Return ``[B, T]`` booleans: the tokens at sequence-local positions > ``t``."""
    B, T = problem.q.shape[:2]
    mask = torch.zeros(B, T, dtype=torch.bool)
    for _, b, start, end in problem.sequences():
        mask[b, min(start + t + 1, end) : end] = True
    return mask.to(problem.q.device)


def _perturbed(problem: Problem, mask: torch.Tensor, seed: int) -> Problem:
    """Replace q, k, v (and g) at the masked tokens by fresh values of another scale."""
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)

    def fresh(x: torch.Tensor, scale: float) -> torch.Tensor:
        noise = (torch.randn(x.shape, generator=gen) * scale).to(x.device, x.dtype)
        m = mask.reshape(*mask.shape, *([1] * (x.ndim - 2)))
        return torch.where(m, noise, x)

    g = problem.g
    if g is not None:
        # Any log decay <= 0, including the steep ones that make exp underflow.
        new_g = (-10.0 * torch.rand(g.shape, generator=gen)).to(g.device, g.dtype)
        g = torch.where(mask.reshape(*mask.shape, *([1] * (g.ndim - 2))), new_g, g)
    return problem.with_tensors(
        q=fresh(problem.q, 3.0), k=fresh(problem.k, 3.0), v=fresh(problem.v, 5.0), g=g
    )


@property_function
def causal_outputs_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that outputs at positions <= t do not depend on inputs at positions > t, bitwise.

    For a cut t and inputs x' equal to x at every sequence-local position <= t (q, k, v, g
    replaced by fresh values after it):

        o(x')_s ≡ o(x)_s for every s <= t,    S_T(x') ≡ S_T(x) for sequences of length <= t + 1

    (≡: bit-identical, NaN equal to NaN). The final state is requested whenever the kernel can
    return it. A kernel that declared ``zero_denominator="any"`` may return anything where the
    exact denominator is 0: those elements of o are not compared.

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: bitwise comparisons ``"o[t<=<t>]"`` (indices of the whole
        ``[B, T, H, V]``, later rows copied over) and, for the sequences that end by the cut,
        ``"final_state[...]"`` (``"final_key_sum[...]"``); the cut t in its notes.
    """
    case = prepare_case("causal_outputs_exact", spec, kernel)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    t = _cut(problem, spec.seed)
    if t is None:
        return case.not_applicable("no sequence has a position after the cut (T <= 1)")
    mask = future_mask(problem, t)
    problem = replace(problem, output_final_state=kernel.capabilities.final_state)
    base = run_kernel(kernel, problem)
    other = run_kernel(kernel, _perturbed(problem, mask, spec.seed))
    condition = f"after changing the inputs at positions > t={t}"
    past = (~mask)[..., None, None]
    # Future rows may differ; copy them over so indices stay those of [B, T, H, V].
    o2 = torch.where(past, other.o, base.o)
    undefined = undefined_elements(kernel, problem).get("o")
    comparisons = [
        compare_bitwise(
            f"o[t<={t}]",
            o2,
            base.o,
            subject=kernel.name,
            condition=condition,
            undefined=undefined,
        )
    ]
    done = [n for n, _, start, end in problem.sequences() if end - start <= t + 1]
    for name in ("final_state", "final_key_sum"):
        if name in base.outputs and done:
            comparisons.append(
                compare_bitwise(
                    f"{name}[sequences {done}, length <= {t + 1}]",
                    other.outputs[name][done],
                    base.outputs[name][done],
                    subject=kernel.name,
                    condition=condition,
                )
            )
    return case.judged(comparisons, notes=[f"cut t={t} (sequence-local, 0-based)"])


@property_function
def causal_gradients_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that past outputs have exactly zero gradient with respect to future inputs.

    With a cotangent do that vanishes at every sequence-local position > t and no final-state
    cotangent, L = Σ_{s<=t} <o_s, do_s>, and for every x in {q, k, v, g}:

        ∂L/∂x_s == 0 exactly for every s > t

    except, for a kernel that declared ``zero_denominator`` ``"ieee"`` or ``"any"``, at the
    elements that depend on a row whose denominator is or may round to 0: an IEEE backward
    divides the zero cotangent by that zero (0/0) there (`nonfinite_allowed`).

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: per gradient, a bitwise comparison ``"d<x>[t><t>]"`` of the
        gradient (zeroed at positions <= t) with 0; the cut t in its notes.
    """
    case = prepare_case("causal_gradients_exact", spec, kernel, backward=True)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    t = _cut(problem, spec.seed)
    if t is None:
        return case.not_applicable("no sequence has a position after the cut (T <= 1)")
    mask = future_mask(problem, t)
    keep = (~mask)[..., None, None]
    run = run_kernel(kernel, problem, cotangent_seed=spec.seed + 1, do_mask=keep)
    allowed = nonfinite_allowed(kernel, problem)
    condition = f"to 0 (the cotangent vanishes at positions > t={t})"
    comparisons = []
    for name in ("q", "k", "v", "g"):
        grad = run.filled_grads.get(name)
        if grad is None:
            continue
        m = mask.reshape(*mask.shape, *([1] * (grad.ndim - 2)))
        future = torch.where(m, grad, torch.zeros((), dtype=grad.dtype))
        comparisons.append(
            compare_bitwise(
                f"d{name}[t>{t}]",
                future,
                torch.zeros_like(future),
                subject=kernel.name,
                condition=condition,
                undefined=allowed.get("d" + name),
            )
        )
    return case.judged(comparisons, notes=[f"cut t={t} (sequence-local, 0-based)"])


__all__ = ["causal_gradients_exact", "causal_outputs_exact", "future_mask"]
