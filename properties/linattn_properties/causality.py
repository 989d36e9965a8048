# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Causality: the past never sees the future (docs/design.md §8.3).

Both properties pick a cut t (from the case's seed) and change only what comes after it. For a
kernel that promises bit-exact causality they compare bitwise, so they see index bugs far below
any rounding bound: a kernel that reads one token ahead, a chunk whose mask lets the next token
in, a decay weight computed from the wrong end of the chunk. A kernel that does not promise it
is judged within its error bounds (docs/design.md, "Exact properties").
"""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from linattn_properties._nonfinite import nonfinite_allowed, undefined_elements
from linattn_properties._support import (
    STATE_NAMES,
    past_side,
    prepare_case,
    property_function,
    run_bounds,
    run_kernel,
    within_rounding,
)
from linattn_verify.compare import Side, compare, compare_bitwise, compare_pair
from linattn_verify.core.memory import same_layout
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.results import PropertyResult


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
    # The changed inputs keep the layout of the originals: a kernel whose bits follow the
    # strides (and promises nothing about layouts) must be compared with itself.
    changed = {"q": fresh(problem.q, 3.0), "k": fresh(problem.k, 3.0), "v": fresh(problem.v, 5.0)}
    if g is not None:
        changed["g"] = g
    originals = problem.inputs()
    return problem.with_tensors(**{n: same_layout(x, originals[n]) for n, x in changed.items()})


CAUSAL = ("causal", "--causal-exact")
"""The promise the causality properties judge strictly, and the flag that declares it."""


@property_function
def causal_outputs_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that outputs at positions <= t do not depend on inputs at positions > t.

    For a cut t and inputs x' equal to x at every sequence-local position <= t (q, k, v, g
    replaced by fresh values after it), for every s <= t (and S_T of the sequences of length
    <= t + 1):

        causal_exact:  o(x')_s ≡ o(x)_s                              (≡: bit-identical)
        otherwise:     |o(x')_s - o(x)_s| <= B_s(x') + B_s(x)     and both finite or neither

    A kernel that does not promise bit-exact causality (`Capabilities.causal_exact`) may round
    its past outputs differently when the future changes (a decay reference point at the end of
    a chunk, a solver that mixes the chunk's rows): within the rounding of its form, whose
    bounds then charge each output its whole block (docs/error-model.md §4.1). Bits that differ
    within the bound make the result ``within_rounding``; equal bits hold either way. The final
    state is requested whenever the kernel can return it. A kernel that declared
    ``zero_denominator="any"`` may return anything where the exact denominator is 0: those
    elements of o are not compared.

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: bitwise comparisons ``"o[t<=<t>]"`` (indices of the whole
        ``[B, T, H, V]``, later rows copied over) and, for the sequences that end by the cut,
        ``"final_state[...]"`` (``"final_key_sum[...]"``), or their pairwise forms; the cut t in
        its notes.
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
    changed = _perturbed(problem, mask, spec.seed)
    base = run_kernel(kernel, problem)
    other = run_kernel(kernel, changed)
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
    states = [name for name in STATE_NAMES if name in base.outputs and done]
    for name in states:
        comparisons.append(
            compare_bitwise(
                f"{name}[sequences {done}, length <= {t + 1}]",
                other.outputs[name][done],
                base.outputs[name][done],
                subject=kernel.name,
                condition=condition,
            )
        )
    notes = [f"cut t={t} (sequence-local, 0-based)"]
    if kernel.capabilities.causal_exact or all(c.ok for c in comparisons):
        return case.judged(comparisons, notes=notes)
    # Not promised bit for bit: the two runs agree within their bounds.
    before, after = run_bounds(kernel, problem), run_bounds(kernel, changed)
    label = f"{kernel.name} {condition}"
    pairs = [
        compare_pair(
            f"o[t<={t}]",
            past_side(label, past, other.o, base.o, after["o"], before["o"]),
            Side.of("the run before the change", base.o, before["o"]),
            before["o"].reference,
        )
    ]
    for name in states:
        a, b = after[name], before[name]
        pairs.append(
            compare_pair(
                f"{name}[sequences {done}, length <= {t + 1}]",
                Side(label, other.outputs[name][done], a.bound[done], a.verifiable[done]),
                Side(
                    "the run before the change",
                    base.outputs[name][done],
                    b.bound[done],
                    b.verifiable[done],
                ),
                b.reference[done],
            )
        )
    return within_rounding(case.judged(pairs, notes=notes), *CAUSAL)


@property_function
def causal_gradients_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that past outputs have a zero gradient with respect to future inputs.

    With a cotangent do that vanishes at every sequence-local position > t and no final-state
    cotangent, L = Σ_{s<=t} <o_s, do_s>, and for every x in {q, k, v, g} and every s > t:

        causal_exact:  ∂L/∂x_s == 0 exactly
        otherwise:     |∂L/∂x_s| <= B(∂L/∂x_s), the gradient bound of that cotangent (its exact
                       value is 0)

    except, for a kernel that declared ``zero_denominator`` ``"ieee"`` or ``"any"``, at the
    elements that depend on a row whose denominator is or may round to 0: an IEEE backward
    divides the zero cotangent by that zero (0/0) there (`nonfinite_allowed`). Bits that differ
    from 0 within the bound make the result ``within_rounding``.

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: per gradient, a bitwise comparison ``"d<x>[t><t>]"`` of the
        gradient (zeroed at positions <= t) with 0, or its comparison against the bound; the cut
        t in its notes.
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
    do = random_cotangents(problem, spec.seed + 1)[0] * keep.to(problem.v.dtype)
    allowed = nonfinite_allowed(kernel, problem, (do, None))
    condition = f"to 0 (the cotangent vanishes at positions > t={t})"
    comparisons, futures = [], {}
    for name in ("q", "k", "v", "g"):
        grad = run.filled_grads.get(name)
        if grad is None:
            continue
        m = mask.reshape(*mask.shape, *([1] * (grad.ndim - 2)))
        futures[name] = (m, torch.where(m, grad, torch.zeros((), dtype=grad.dtype)))
        comparisons.append(
            compare_bitwise(
                f"d{name}[t>{t}]",
                futures[name][1],
                torch.zeros_like(futures[name][1]),
                subject=kernel.name,
                condition=condition,
                undefined=allowed.get("d" + name),
            )
        )
    notes = [f"cut t={t} (sequence-local, 0-based)"]
    if kernel.capabilities.causal_exact or all(c.ok for c in comparisons):
        return case.judged(comparisons, notes=notes)
    bounds = run_bounds(kernel, problem, (do, None))
    against = []
    for name, (m, future) in futures.items():
        tb = bounds["d" + name]
        zero = torch.zeros((), dtype=tb.reference.dtype)
        # The exact gradient at positions > t is 0; the past is not judged here.
        tb = replace(
            tb,
            name=f"d{name}[t>{t}]",
            reference=torch.where(m, tb.reference, zero),
            bound=torch.where(m, tb.bound, zero),
            magnitude=torch.where(m, tb.magnitude, zero),
            verifiable=tb.verifiable | ~m,
        )
        against.append(compare(future, tb, subject=kernel.name))
    return within_rounding(case.judged(against, notes=notes), *CAUSAL)


__all__ = ["causal_gradients_exact", "causal_outputs_exact", "future_mask"]
