# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The machinery every property shares: one prelude, one kernel runner, one result builder.

A property reads, top to bottom: `prepare_case` (build the problem, check the kernel supports
it, find its recipe), `run_kernel` (call the kernel on private copies of the inputs, same memory
layout; anything wrong, an exception, a wrong type, shape or dtype, a NaN its declared
zero-denominator convention does not allow, an input changed in place, raises
`KernelFailure`), the comparisons (`linattn_verify.compare`), and `PreparedCase.judged`.
`property_function` turns a `KernelFailure` that escapes into the failed result: one error
dialect.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from linattn_properties._nonfinite import nan_message, nonfinite_allowed, zero_convention_breach
from linattn_verify.compare import Side, bitwise_mismatch
from linattn_verify.core.bound import TensorBound
from linattn_verify.core.memory import Layout, same_layout, vector_jacobian
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.strategies import ProblemSpec, random_cotangents
from linattn_verify.linear_attn.tolerance import (
    backward_bounds,
    charge_returned_state,
    forward_bounds,
)
from linattn_verify.results import Comparison, PropertyResult, judged_status
from linattn_verify.triage import with_input_severity
from linattn_verify.typing import dtype_name

FinalState = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None


class KernelFailure(Exception):
    """A kernel raised, or returned something that breaks the calling convention."""


class OutsideDeclaration(Exception):
    """A problem a property derived is one the kernel declares it does not take.

    A piece of a split, a separate run (`Kernel.supports`: T < H for ``seq_len_at_least_heads``,
    say). The kernel is never called on it: `property_function` makes the property not applicable.
    """


@dataclass(frozen=True)
class KernelRun:
    """What one kernel call produced (detached).

    Attributes:
        o: Output ``[B, T, H, V]``.
        final_state: `None`, S_T ``[N, H, K, V]``, or ``(S_T, z_T)`` for normalized problems.
        grads: Gradients by input name (`linattn_verify.linear_attn.tolerance.GRADIENT_NAMES`) as
        autograd
            returned them (`None` for an input the outputs do not depend on), or `None` when no
            backward pass was run.
        filled_grads: The same gradients with `None` replaced by zeros (empty without backward).
    """

    o: torch.Tensor
    final_state: FinalState
    grads: dict[str, torch.Tensor | None] | None = None
    filled_grads: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def outputs(self) -> dict[str, torch.Tensor]:
        """Return ``"o"`` and, when returned, ``"final_state"`` (and ``"final_key_sum"``)."""
        named: dict[str, torch.Tensor] = {"o": self.o}
        if isinstance(self.final_state, tuple):
            named["final_state"], named["final_key_sum"] = self.final_state
        elif self.final_state is not None:
            named["final_state"] = self.final_state
        return named

    def tensors(self) -> dict[str, torch.Tensor]:
        """Return every produced tensor under the names of the bounds (``o``, ``dq``, ...)."""
        named = self.outputs
        for key, grad in (self.grads or {}).items():
            if grad is not None:
                named["d" + key] = grad
        return named

    def everything(self) -> dict[str, torch.Tensor]:
        """Return outputs and gradients (``"d<name>"``, zeros where autograd said `None`)."""
        return {**self.outputs, **{"d" + n: g for n, g in self.filled_grads.items()}}


Subject = Kernel | Sequence[Kernel] | str
"""What a property judges: a kernel, several kernels, or a named reference path."""


def kernel_label(kernel: Subject) -> str:
    """The name a result gives its subject: a kernel's, several joined by ``+``, or the str."""
    if isinstance(kernel, str):
        return kernel
    if isinstance(kernel, Sequence):
        return "+".join(str(k.name) for k in kernel)  # type: ignore[union-attr]
    return kernel.name  # a kernel of any family


def not_applicable(prop: str, kernel: Subject, spec: ProblemSpec, reason: str) -> PropertyResult:
    """The result of a property that says nothing about this kernel or case."""
    return PropertyResult(
        prop, kernel_label(kernel), spec.describe(), "not_applicable", reason=reason
    )


def failed(prop: str, kernel: Subject, spec: ProblemSpec, reason: str) -> PropertyResult:
    """The result of a property that failed on a finding no comparison carries."""
    return PropertyResult(prop, kernel_label(kernel), spec.describe(), "failed", reason=reason)


def judged(
    prop: str,
    kernel: Subject,
    spec: ProblemSpec,
    comparisons: Sequence[Comparison],
    *,
    findings: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> PropertyResult:
    """The result of a property that compared: failed if a comparison failed or a finding was made.

    A failed bound comparison on a case drawn at extreme magnitudes is ``extreme-range``
    (`linattn_verify.triage.with_input_severity`).

    Args:
        prop: The property's name.
        kernel: The kernel (or kernels) under test.
        spec: The case.
        comparisons: Every comparison made.
        findings: Failures no comparison carries (a contract broken, a kernel that raised on one
            of several runs). Default: `()`.
        notes: Context for the reader (what was drawn, what was left out). Default: `()`.
    """
    return PropertyResult(
        property=prop,
        kernel=kernel_label(kernel),
        case=spec.describe(),
        status=judged_status(comparisons, findings),
        comparisons=with_input_severity(comparisons, spec.values),
        reason="\n".join(findings) or None,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class PreparedCase:
    """A case ready for a property: the problem as the kernel receives it, and its recipe.

    Attributes:
        property: The property's name.
        spec: The case.
        kernel: The kernel under test.
        problem: ``kernel.prepare(spec.build())``, with the overrides `prepare_case` applied.
        recipe: The kernel's precision recipe for the problem's dtype.
    """

    property: str
    spec: ProblemSpec
    kernel: Kernel
    problem: Problem
    recipe: PrecisionRecipe

    def not_applicable(self, reason: str) -> PropertyResult:
        """The property does not apply to this case (see `not_applicable`)."""
        return not_applicable(self.property, self.kernel, self.spec, reason)

    def failed(self, reason: str) -> PropertyResult:
        """The property failed on a finding no comparison carries (see `failed`)."""
        return failed(self.property, self.kernel, self.spec, reason)

    def judged(
        self,
        comparisons: Sequence[Comparison],
        *,
        findings: Sequence[str] = (),
        notes: Sequence[str] = (),
    ) -> PropertyResult:
        """The property compared (see `judged`)."""
        return judged(
            self.property, self.kernel, self.spec, comparisons, findings=findings, notes=notes
        )


def prepare_case(
    prop: str,
    spec: ProblemSpec,
    kernel: Kernel,
    *,
    backward: bool = False,
    final_state: bool | None = None,
) -> PreparedCase | PropertyResult:
    """The prelude of every per-kernel property: build, prepare, check the kernel supports it.

    Args:
        prop: The property's name.
        spec: The case.
        kernel: The kernel under test.
        backward: The property needs the kernel's backward pass. Default: `False`.
        final_state: Override the case's ``output_final_state`` (`None`: keep it).
            Default: `None`.

    Returns:
        The `PreparedCase`, or the ``not_applicable`` result saying why the kernel cannot run it.
    """
    if backward and not kernel.capabilities.backward:
        return not_applicable(prop, kernel, spec, f"{kernel.name}: no backward support")
    problem = kernel.prepare(spec.build())
    if final_state is not None:
        problem = replace(problem, output_final_state=final_state)
    reason = kernel.supports(problem)
    if reason is not None:
        return not_applicable(prop, kernel, spec, reason)
    return PreparedCase(prop, spec, kernel, problem, kernel.precision_recipe(problem.q.dtype))


Property = Callable[..., PropertyResult]


def within_rounding(result: PropertyResult, promise: str, flag: str) -> PropertyResult:
    """``result`` of an exactness property judged within bounds because its bits differed.

    A held result becomes ``within_rounding``: no defect, but not the exact identity either
    (docs/design.md, "Exact properties"); its reason names the promise and the flag that makes
    the property strict. Any other result is returned as it is.
    """
    if result.status != "held":
        return result
    reason = (
        f"{promise} within rounding, not bit-exact: the bits differ, every difference within the "
        f"error bound (declare {flag} to judge it bit for bit)"
    )
    return replace(result, status="within_rounding", reason=reason)


def past_side(
    label: str,
    past: torch.Tensor,
    after: torch.Tensor,
    before: torch.Tensor,
    bound_after: TensorBound,
    bound_before: TensorBound,
) -> Side:
    """The run after a change of the future, at past positions only (``past``, broadcastable).

    Future positions take the run before the change, with its bound: their difference is 0, so
    a pairwise comparison of this side with the run before judges the past alone.
    """
    undefined = None
    if bound_before.undefined is not None or bound_after.undefined is not None:
        zero = torch.zeros_like(bound_before.bound, dtype=torch.bool)
        a = bound_after.undefined if bound_after.undefined is not None else zero
        b = bound_before.undefined if bound_before.undefined is not None else zero
        undefined = torch.where(past, a, b)
    return Side(
        label,
        torch.where(past.to(after.device), after, before),
        torch.where(past, bound_after.bound, bound_before.bound),
        torch.where(past, bound_after.verifiable, bound_before.verifiable),
        undefined,
    )


def property_function(fn: Property) -> Property:
    """Make a property total: a `KernelFailure` it lets through becomes its failed result.

    Inside a property, `run_kernel` raises `KernelFailure` when the kernel raises or breaks the
    calling convention; that is the property's failure (the message says what happened), so
    properties let it propagate and this wrapper, named after the function, turns it into the
    result.
    """

    @functools.wraps(fn)
    def checked(spec: ProblemSpec, kernel: Any, *args: Any, **kwargs: Any) -> PropertyResult:
        try:
            return fn(spec, kernel, *args, **kwargs)
        except KernelFailure as exc:
            return failed(fn.__name__, kernel, spec, str(exc))
        except OutsideDeclaration as exc:
            return not_applicable(fn.__name__, kernel, spec, f"a derived problem: {exc}")

    return checked


def run_bounds(
    kernel: Kernel, problem: Problem, cotangents: tuple[torch.Tensor, Any] | None = None
) -> dict[str, TensorBound]:
    """Return the bounds of every output (and, given cotangents, of every gradient ``d<x>``).

    Each carries the kernel's declared zero-denominator convention and its undefined elements.
    """
    recipe = kernel.precision_recipe(problem.q.dtype)
    cap = kernel.capabilities
    forward = forward_bounds(
        problem, recipe, zero_denominator=cap.zero_denominator, causal_exact=cap.causal_exact
    )
    bounds = with_returned_state_rounding(dict(forward.tensors), cap, problem.q.dtype)
    if cotangents is not None:
        do, d_final = cotangents
        if not problem.output_final_state:
            d_final = None
        grads = backward_bounds(
            problem,
            recipe,
            do=do,
            d_final_state=d_final,
            forward=forward,
            zero_denominator=cap.zero_denominator,
        )
        bounds.update({"d" + n: b for n, b in grads.items()})
    return bounds


STATE_NAMES = ("final_state", "final_key_sum")
"""The returned-state tensors (S_T and, normalized, z_T) of either family."""


def with_returned_state_rounding(
    bounds: dict[str, TensorBound], capabilities: Any, dtype: torch.dtype
) -> dict[str, TensorBound]:
    """``bounds`` with a declared input-dtype state's rounding charged (`charge_returned_state`)."""
    return charge_returned_state(bounds, capabilities.final_state_dtype, dtype)


def final_shapes(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Return the shapes of the final-state tensors of ``problem``, by name."""
    _, _, H, _, V = problem.shape
    F = problem.feature_dim
    N = problem.num_sequences
    shapes: dict[str, tuple[int, ...]] = {"final_state": (N, H, F, V)}
    if problem.normalize:
        shapes["final_key_sum"] = (N, H, F)
    return shapes


def state_dtype_problem(
    name: str, x: torch.Tensor, declared: str, dtype: torch.dtype
) -> str | None:
    """What is wrong with the dtype of a returned state tensor, against the declaration, or `None`.

    ``declared`` is the kernel's ``final_state_dtype``: ``"float32"`` admits float32 and float64
    (wider: nothing more to charge), ``"input"`` the input dtype too (rounded to it at worst:
    FLA's normalized kernels return S_T in fp32 and z_T in the input dtype).
    """
    if x.dtype in (torch.float32, torch.float64):
        return None
    if declared == "input":
        if x.dtype == dtype:
            return None
        return (
            f"returned {name} of dtype {x.dtype}, expected the input dtype {dtype} or float32 "
            "(declared: final_state_dtype='input')"
        )
    return (
        f"returned {name} of dtype {x.dtype}, expected float32 (or float64); a kernel that "
        "returns its state in the input dtype declares it (check: --final-state-dtype input)"
    )


def _validate(problem: Problem, o: Any, final: Any, state_dtype: str) -> str | None:
    """Return what is wrong with a kernel's ``(o, final)`` (after "returned"), or `None`."""
    B, T, H, _, V = problem.shape
    if not isinstance(o, torch.Tensor):
        return f"returned o of type {type(o).__name__}, expected a torch.Tensor"
    if tuple(o.shape) != (B, T, H, V):
        return f"returned o of shape {tuple(o.shape)}, expected [B, T, H, V] = {(B, T, H, V)}"
    if o.dtype != problem.q.dtype:
        return f"returned o of dtype {o.dtype}, expected the input dtype {problem.q.dtype}"
    if not problem.output_final_state:
        return None
    if final is None:
        return "returned no final state although output_final_state=True"
    shapes = final_shapes(problem)
    parts = final if problem.normalize else (final,)
    if not isinstance(parts, tuple | list) or len(parts) != len(shapes):
        return f"returned final state {type(final).__name__}, expected " + (
            "a pair (S_T, z_T)" if problem.normalize else "a tensor S_T"
        )
    for (name, shape), x in zip(shapes.items(), parts, strict=True):
        if not isinstance(x, torch.Tensor):
            return f"returned {name} of type {type(x).__name__}, expected a torch.Tensor"
        if tuple(x.shape) != shape:
            return f"returned {name} of shape {tuple(x.shape)}, expected {shape}"
        wrong = state_dtype_problem(name, x, state_dtype, problem.q.dtype)
        if wrong is not None:
            return wrong
    return None


def _modified(passed: Problem, originals: Mapping[str, torch.Tensor]) -> str | None:
    for name, x in passed.inputs().items():
        if bool(bitwise_mismatch(x, originals[name]).any()):
            return f"input {name} was modified in place by the forward or backward pass"
    return None


def run_kernel(
    kernel: Kernel,
    problem: Problem,
    *,
    cotangents: tuple[torch.Tensor, Any] | None = None,
    cotangent_seed: int | None = None,
    do_mask: torch.Tensor | None = None,
    caller_judges: bool = False,
    cotangent_layout: Layout | None = None,
) -> KernelRun:
    """Call ``kernel`` on private copies of ``problem``'s inputs; optionally run backward.

    The copies have the memory layout of the problem's own tensors (strided views of
    NaN-poisoned buffers included). A kernel with an implied decay gets no gradient for g.

    Args:
        kernel: The kernel under test.
        problem: The problem; its tensors are copied, so a kernel that writes to its inputs
            cannot change what the oracle sees (it fails instead).
        cotangents: ``(do, d_final_state)`` to backpropagate (`vector_jacobian`: the gradient
            of `linattn_verify.linear_attn.tolerance.cotangent_loss`), or `None` for a forward run
            only. Default: `None`.
        cotangent_seed: Without ``cotangents``, run backward with
            `random_cotangents(problem, cotangent_seed)`. Default: `None`.
        do_mask: Multiplies the output cotangent (``[B, T, H, 1]``, 0/1) and drops the
            final-state cotangent. Default: `None`.
        caller_judges: The caller judges the returned values itself (against the oracle or
            another run): NaN outputs and gradients are returned instead of failing. A
            non-finite o where the exact denominator is 0 from a kernel that declared
            ``zero_denominator="zero"`` fails either way: it breaks the kernel's own
            declaration (`zero_convention_breach`). Default: `False`.
        cotangent_layout: How the cotangents are laid out when the backward receives them
            (`linattn_verify.core.memory`: expanded, transposed, ...). Default: contiguous.

    Returns:
        The `KernelRun`, its tensors detached.

    Raises:
        KernelFailure: the kernel (forward or backward) raised, returned a wrong type, shape or
            dtype, or a NaN its declared zero-denominator convention does not allow there (unless
            ``caller_judges``), or modified an input; the message says which.
        OutsideDeclaration: ``problem`` is outside what the kernel declares it takes.
    """
    outside = kernel.supports(problem)
    if outside is not None:
        raise OutsideDeclaration(outside)
    what = kernel.name
    if cotangents is None and cotangent_seed is not None:
        cotangents = random_cotangents(problem, cotangent_seed)
    if cotangents is not None and do_mask is not None:
        cotangents = (cotangents[0] * do_mask.to(cotangents[0].dtype), None)
    backward = cotangents is not None
    originals = problem.inputs()
    p, leaves = problem.with_grad_leaves()
    if kernel.implied_decay is not None:
        # The kernel applies its own fixed decay: g is not one of its inputs.
        leaves.pop("g", None)
    if not backward:
        for leaf in leaves.values():
            leaf.requires_grad_(False)
    # Under the Triton interpreter the kernel's arithmetic is numpy's, which warns on overflow,
    # division by zero and invalid operations (errors under `-W error`); a GPU computes the same
    # IEEE results silently. The results, inf and NaN included, are judged by the property.
    try:
        with np.errstate(all="ignore"), torch.set_grad_enabled(backward):
            # The kernel sees the memory layout of the problem's own tensors, built
            # differentiably from the leaves.
            layout = {n: same_layout(getattr(p, n), x) for n, x in originals.items()}
            p = p.with_tensors(**layout)
            result = kernel.call(p)
    except Exception as exc:  # the kernel under test may raise anything
        raise KernelFailure(f"{what} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise KernelFailure(f"{what} returned {_kind(result)}, expected a pair (o, final_state).")
    o, final = result
    wrong = _validate(problem, o, final, kernel.capabilities.final_state_dtype)
    if wrong is not None:
        raise KernelFailure(f"{what} {wrong}")
    if not problem.output_final_state:
        final = None
    elif problem.normalize:
        final = (final[0], final[1])
    run = KernelRun(o=o, final_state=final)
    breach = zero_convention_breach(kernel, problem, o.detach())
    if breach is not None:
        raise KernelFailure(breach)
    allowed: dict[str, torch.Tensor] | None = None

    def nan_in(name: str, x: torch.Tensor) -> str | None:
        # Where NaN may be the declared value is worked out only once a NaN is seen.
        nonlocal allowed
        if caller_judges or not x.is_floating_point() or not bool(torch.isnan(x).any()):
            return None
        if allowed is None:
            allowed = nonfinite_allowed(kernel, problem, cotangents)
        return nan_message(name, x, allowed.get(name) if allowed else None)

    for name, x in run.outputs.items():
        wrong = nan_in(name, x.detach())
        if wrong is not None:
            raise KernelFailure(f"{what}: {wrong}")
    grads: dict[str, torch.Tensor | None] | None = None
    filled: dict[str, torch.Tensor] = {}
    if cotangents is not None:
        do, d_final = cotangents
        try:
            with np.errstate(all="ignore"):
                finals = [] if final is None else list(final) if problem.normalize else [final]
                d_finals = list(d_final) if isinstance(d_final, tuple | list) else [d_final]
                d_finals += [None] * (len(finals) - len(d_finals))  # none for S_T (z_T): 0
                values = vector_jacobian(
                    [o, *finals],
                    [do, *d_finals[: len(finals)]],
                    list(leaves.values()),
                    cotangent_layout,
                )
        except Exception as exc:
            raise KernelFailure(f"{what} backward raised {type(exc).__name__}: {exc}") from None
        grads = {n: None if g is None else g.detach() for n, g in zip(leaves, values, strict=True)}
        for name, grad in grads.items():
            # An input the outputs do not depend on has a zero gradient; autograd says None.
            filled[name] = torch.zeros_like(leaves[name]) if grad is None else grad
            wrong = nan_in("d" + name, filled[name])
            if wrong is not None:
                raise KernelFailure(f"{what}: {wrong}")
    wrong = _modified(p, originals)
    if wrong is not None:
        raise KernelFailure(f"{what}: {wrong}")
    return KernelRun(o.detach(), _detach(final), grads, filled)


def _kind(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{dtype_name(x.dtype)}"
    return type(x).__name__


def _detach(state: FinalState) -> FinalState:
    if isinstance(state, tuple):
        return (state[0].detach(), state[1].detach())
    return None if state is None else state.detach()


def relayout(problem: Problem, how: Callable[[torch.Tensor], torch.Tensor]) -> Problem:
    """Return ``problem`` with every floating input passed through ``how`` (same values)."""
    return problem.with_tensors(**{n: how(x) for n, x in problem.inputs().items()})
