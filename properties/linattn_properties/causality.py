# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Causality, exactly: the past never sees the future (DESIGN.md §8.3).

Both properties pick a cut t (from the case's seed) and compare bitwise, so they see index bugs
far below any rounding bound: a kernel that reads one token ahead, a chunk whose mask lets the
next token in, a decay weight computed from the wrong end of the chunk.
"""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from linattn_properties._support import (
    attempt,
    bitwise_message,
    finish,
    skipped,
)
from linattn_verify.kernel import Kernel
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec
from linattn_verify.verdict import PropertyResult


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
        g = torch.where(mask[..., None], new_g, g)
    return replace(
        problem, q=fresh(problem.q, 3.0), k=fresh(problem.k, 3.0), v=fresh(problem.v, 5.0), g=g
    )


def causal_outputs_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that outputs at positions <= t do not depend on inputs at positions > t, bitwise.

    For a cut t and inputs x' equal to x at every sequence-local position <= t (q, k, v, g
    replaced by fresh values after it):

        o(x')_s ≡ o(x)_s for every s <= t,    S_T(x') ≡ S_T(x) for sequences of length <= t + 1

    (≡: bit-identical, NaN equal to NaN). The final state is requested whenever the kernel can
    return it.

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`; scores ``t``, ``mismatches`` and ``max_abs_diff``.
    """
    prop = "causal_outputs_exact"
    problem = spec.build()
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    t = _cut(problem, spec.seed)
    if t is None:
        return skipped(prop, kernel, spec, "no sequence has a position after the cut (T <= 1)")
    mask = future_mask(problem, t)
    with_final = kernel.capabilities.final_state
    base = attempt(kernel, problem, output_final_state=with_final)
    other = attempt(kernel, _perturbed(problem, mask, spec.seed), output_final_state=with_final)
    failures = [f"{label}: {r}" for label, r in (("x", base), ("x'", other)) if isinstance(r, str)]
    if isinstance(base, str) or isinstance(other, str):
        return finish(prop, kernel, spec, failures, {"t": t})
    condition = f"after changing the inputs at positions > t={t}"
    past = (~mask)[..., None, None]
    worst_diff, worst_index, mismatches = 0.0, None, 0
    o = base.outputs["o"]
    # Future rows may differ; copy them over so indices stay those of [B, T, H, V].
    o2 = torch.where(past, other.outputs["o"], o)
    message, diff, index = bitwise_message(f"o at positions <= {t}", o2, o, condition)
    if message is not None:
        failures.append(message)
        worst_diff, worst_index, mismatches = diff, index, 1
    done = [n for n, _, start, end in problem.sequences() if end - start <= t + 1]
    for name in ("final_state", "final_key_sum"):
        if name in base.outputs and done:
            message, diff, _ = bitwise_message(
                f"{name} of sequences {done} (length <= {t + 1})",
                other.outputs[name][done],
                base.outputs[name][done],
                condition,
            )
            if message is not None:
                failures.append(message)
                worst_diff = max(worst_diff, diff)
                mismatches += 1
    scores = {"t": float(t), "mismatches": float(mismatches), "max_abs_diff": worst_diff}
    return finish(prop, kernel, spec, failures, scores, worst_index, summary=f"t={t}")


def causal_gradients_exact(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that past outputs have exactly zero gradient with respect to future inputs.

    With a cotangent do that vanishes at every sequence-local position > t and no final-state
    cotangent, L = Σ_{s<=t} <o_s, do_s>, and for every x in {q, k, v, g}:

        ∂L/∂x_s == 0 exactly for every s > t

    Args:
        spec: The case (t is drawn from ``spec.seed``).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`; scores ``t`` and ``max_abs_future_grad``.
    """
    prop = "causal_gradients_exact"
    problem = spec.build()
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    if not kernel.capabilities.backward:
        return skipped(prop, kernel, spec, f"{kernel.name}: no backward support")
    t = _cut(problem, spec.seed)
    if t is None:
        return skipped(prop, kernel, spec, "no sequence has a position after the cut (T <= 1)")
    mask = future_mask(problem, t)
    keep = (~mask)[..., None, None]
    run = attempt(kernel, problem, cotangent_seed=spec.seed + 1, do_mask=keep)
    if isinstance(run, str):
        return finish(prop, kernel, spec, [run], {"t": float(t)})
    failures = []
    worst, worst_index = 0.0, None
    for name in ("q", "k", "v", "g"):
        grad = run.filled_grads.get(name)
        if grad is None:
            continue
        m = mask.reshape(*mask.shape, *([1] * (grad.ndim - 2)))
        future = torch.where(m, grad, torch.zeros((), dtype=grad.dtype))
        bad = future != 0
        if bool(bad.any()):
            magnitude = future.abs().double().nan_to_num(nan=float("inf"))
            flat = int(torch.argmax(magnitude))
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), grad.shape))
            count = int(m.expand_as(grad).sum())
            failures.append(
                f"d{name} at positions > t={t} is not exactly zero although the cotangent "
                f"vanishes there!\nNonzero elements: {int(bad.sum())} / {count}"
                f"\nGreatest: {float(grad[index]):.6g} at index {index} (0 allowed)"
            )
            if float(magnitude.max()) >= worst:
                worst, worst_index = float(magnitude.max()), index
    scores = {"t": float(t), "max_abs_future_grad": worst}
    return finish(prop, kernel, spec, failures, scores, worst_index, summary=f"t={t}")


__all__ = ["causal_gradients_exact", "causal_outputs_exact", "future_mask"]
