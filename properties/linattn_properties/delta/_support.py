# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What the delta-rule properties share: the prelude, the kernel runner, the verdict rules.

A property reads: `prepare` (build the case, check the kernel supports it and that it lies in
the kernel's contract), `run` (call the kernel on private copies of the inputs; an exception or
a broken calling convention raises `linattn_properties._support.KernelFailure`), the
comparisons (`linattn_verify.compare`), and `verdict`, which turns comparisons into the
property's status, ``ill_conditioned`` included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from linattn_properties._support import (
    KernelFailure,
    OutsideDeclaration,
    state_dtype_problem,
    with_returned_state_rounding,
)
from linattn_verify.compare import bitwise_mismatch, compare
from linattn_verify.core.bound import TensorBound
from linattn_verify.core.memory import Layout, same_layout, vector_jacobian
from linattn_verify.delta.bounds import forward_bounds
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.results import Comparison, PropertyResult, base_tensor, judged_status

ILL_CONDITIONED_RATIO = 1.0
"""A held comparison whose largest bound reaches this share of the tensor's largest value
certifies no digit of it (docs/error-model.md §8.5): the case is ``ill_conditioned``."""


@dataclass(frozen=True)
class DeltaRun:
    """What one kernel call produced (detached): o, the final state, gradients by input name."""

    o: torch.Tensor
    final_state: torch.Tensor | None
    grads: dict[str, torch.Tensor] | None = None

    def outputs(self) -> dict[str, torch.Tensor]:
        """``o`` and, when returned, ``final_state``."""
        named = {"o": self.o}
        if self.final_state is not None:
            named["final_state"] = self.final_state
        return named

    def everything(self) -> dict[str, torch.Tensor]:
        """Outputs and gradients (``"d<name>"``), under the names of the bounds."""
        return {**self.outputs(), **{"d" + n: g for n, g in (self.grads or {}).items()}}


@dataclass(frozen=True)
class Prepared:
    """A case ready for a property: the problem as the kernel receives it, and its recipe."""

    property: str
    case: Any
    kernel: DeltaKernel
    problem: DeltaProblem
    recipe: DeltaRecipe

    def not_applicable(self, reason: str) -> PropertyResult:
        """The property says nothing about this case."""
        return PropertyResult(
            self.property, self.kernel.name, self.case.describe(), "not_applicable", reason=reason
        )

    def judged(
        self, comparisons: Sequence[Comparison], *, findings: Sequence[str] = ()
    ) -> PropertyResult:
        """The property compared: `verdict` of its comparisons."""
        return verdict(self.property, self.kernel, self.case, comparisons, findings=findings)


def prepare(
    prop: str,
    case: Any,
    kernel: DeltaKernel,
    *,
    backward: bool = False,
    in_contract: bool = False,
) -> Prepared | PropertyResult:
    """Build ``case``; `not_applicable` if the kernel does not support it (or its backward).

    With ``in_contract``, a case outside the kernel's numerical contract
    (`DeltaKernel.contract`) is not applicable too: for properties whose rule assumes it.
    """
    problem = case.build()
    reason = kernel.supports(problem)
    if reason is None and backward and not kernel.capabilities.backward:
        reason = f"{kernel.name}: no backward support"
    if reason is None and in_contract:
        reason = kernel.contract(problem)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    return Prepared(prop, case, kernel, problem, kernel.precision_recipe(problem.q.dtype))


def run(
    kernel: DeltaKernel,
    problem: DeltaProblem,
    *,
    cotangents: tuple[torch.Tensor, torch.Tensor | None] | None = None,
    cotangent_layout: Layout | None = None,
) -> DeltaRun:
    """Call ``kernel`` on private copies of ``problem``'s inputs; optionally run backward.

    The copies have the memory layout of the problem's own tensors (strided views of
    NaN-poisoned buffers, expanded tensors). The backward receives the cotangents laid out by
    ``cotangent_layout`` (`linattn_verify.core.memory`; contiguous by default).

    Raises:
        OutsideDeclaration: ``problem`` is outside what the kernel declares it takes.
        KernelFailure: the kernel raised (forward or backward), returned something other than
            ``(o [B, T, H, V] in the input dtype, S_T [N, H, K, V] floating or None)``, or
            modified an input in place.
    """
    outside = kernel.supports(problem)
    if outside is not None:
        raise OutsideDeclaration(outside)
    originals = problem.inputs()
    backward = cotangents is not None
    leaves = {n: x.detach().clone().requires_grad_(backward) for n, x in originals.items()}
    what = kernel.name
    # Under the interpreter the kernel's arithmetic is numpy's, which warns where a GPU is silent.
    try:
        with np.errstate(all="ignore"), torch.set_grad_enabled(backward):
            laid_out = {n: same_layout(leaf, originals[n]) for n, leaf in leaves.items()}
            result = kernel.call(replace(problem, **laid_out))  # type: ignore[arg-type]
    except Exception as exc:  # the kernel under test may raise anything
        raise KernelFailure(f"{what} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise KernelFailure(f"{what} returned {type(result).__name__}, expected (o, final_state).")
    o, final = result
    wrong = _wrong_outputs(problem, o, final, kernel.capabilities.final_state_dtype)
    if wrong is not None:
        raise KernelFailure(f"{what} {wrong}")
    grads = None
    if cotangents is not None:
        do, dS = cotangents
        finals = [final] if problem.output_final_state else []
        try:
            with np.errstate(all="ignore"):
                values = vector_jacobian(
                    [o, *finals],
                    [do, dS][: 1 + len(finals)],
                    list(leaves.values()),
                    cotangent_layout,
                )
        except Exception as exc:
            raise KernelFailure(f"{what} backward raised {type(exc).__name__}: {exc}") from None
        grads = {
            n: torch.zeros_like(leaves[n]) if gr is None else gr.detach()
            for n, gr in zip(leaves, values, strict=True)
        }
    for name, x in originals.items():
        if bool(bitwise_mismatch(leaves[name].detach(), x).any()):
            raise KernelFailure(f"{what}: input {name} was modified in place")
    final = final.detach() if problem.output_final_state else None
    return DeltaRun(o.detach(), final, grads)


def _wrong_outputs(problem: DeltaProblem, o: Any, final: Any, state_dtype: str) -> str | None:
    B, T, H, K, V = problem.shape
    if not isinstance(o, torch.Tensor):
        return f"returned o of type {type(o).__name__}, expected a torch.Tensor"
    if tuple(o.shape) != (B, T, H, V):
        return f"returned o of shape {tuple(o.shape)}, expected [B, T, H, V] = {(B, T, H, V)}"
    if o.dtype != problem.q.dtype:
        return f"returned o of dtype {o.dtype}, expected the input dtype {problem.q.dtype}"
    if not problem.output_final_state:
        return None
    expected = (problem.num_sequences, H, K, V)
    if not isinstance(final, torch.Tensor):
        return f"returned final state {type(final).__name__}, expected a tensor {expected}"
    if tuple(final.shape) != expected:
        return f"returned final state of shape {tuple(final.shape)}, expected {expected}"
    return state_dtype_problem("final state", final, state_dtype, problem.q.dtype)


def bounds_of(kernel: DeltaKernel, problem: DeltaProblem) -> dict[str, TensorBound]:
    """The forward bounds of ``problem`` under ``kernel``'s recipe and declarations.

    A kernel that does not promise bit-exact causality is charged a pivoting solver's inverse
    (`linattn_verify.delta.inverse.inverse_magnitude`); a state returned in the input dtype, its
    rounding (`with_returned_state_rounding`).
    """
    cap = kernel.capabilities
    recipe = kernel.precision_recipe(problem.q.dtype)
    bounds = forward_bounds(problem, recipe, causal_exact=cap.causal_exact)
    return with_returned_state_rounding(bounds, cap, problem.q.dtype)


def against_oracle(
    run_: DeltaRun, bounds: dict[str, TensorBound], subject: str
) -> list[Comparison]:
    """Compare every output of ``run_`` with its oracle bound."""
    return [compare(x, bounds[name], subject=subject) for name, x in run_.outputs().items()]


def bound_ratio(tb: TensorBound) -> float:
    """The share of its tensor's scale the worst bound spans, max B / max |x| (0 if empty)."""
    if tb.reference.numel() == 0:
        return 0.0
    scale = float(tb.reference.abs().max())
    worst = float(tb.bound.max())
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


def verdict(
    prop: str,
    kernel: DeltaKernel,
    case: Any,
    comparisons: Sequence[Comparison],
    *,
    findings: Sequence[str] = (),
    bounds: Sequence[TensorBound] = (),
) -> PropertyResult:
    """The property's result from its comparisons and findings.

    Failed on any failed comparison or finding; ``ill_conditioned`` when it held but one of
    ``bounds`` spans the whole scale of its tensor (`ILL_CONDITIONED_RATIO`; the reason gives
    the amplification B / (u max|x|)): a pass there would certify nothing.
    """
    result = PropertyResult(
        property=prop,
        kernel=kernel.name,
        case=case.describe(),
        status=judged_status(comparisons, findings),
        comparisons=tuple(comparisons),
        reason="\n".join(findings) or None,
    )
    if result.status != "held":
        return result
    # A tensor whose every term is exactly 0 (M = 0) is exact, however small its bound.
    blunt = [
        tb
        for tb in bounds
        if bound_ratio(tb) >= ILL_CONDITIONED_RATIO
        and tb.magnitude.numel()
        and float(tb.magnitude.max()) > 0
    ]
    if not blunt:
        return result
    blunt.sort(key=bound_ratio, reverse=True)
    tb = blunt[0]
    scale = float(tb.reference.abs().max())
    amplification = float(tb.bound.max()) / (tb.unit * scale) if scale > 0 else float("inf")
    # The worst tensor leads the reason (reports attribute the case to it); the other blunt
    # ones and the certified rest follow, so a reader sees what the case did decide.
    reason = (
        f"{tb.name}: the bound reaches {bound_ratio(tb):.3g}x the largest |value| "
        f"(amplification B / (u max|x|) = {amplification:.3g}): no digit is certified"
    )
    if len(blunt) > 1:
        reason += "; nor of " + ", ".join(f"{b.name} ({bound_ratio(b):.3g}x)" for b in blunt[1:])
    uncertified = tuple(b.name for b in blunt)
    certified = [c.tensor for c in comparisons if base_tensor(c.tensor) not in uncertified]
    if certified:
        reason += f"; certified: {', '.join(certified)}"
    return replace(result, status="ill_conditioned", reason=reason, uncertified=uncertified)
