# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The machinery every property shares: one kernel runner, one result builder, comparisons.

`run_kernel` calls a kernel on private copies of a problem's inputs (same memory layout) and
turns anything wrong (an exception, a wrong type, shape or dtype, a NaN, an input changed in
place) into a `KernelFailure`; `attempt` returns the failure's message instead. `make_result`
builds every `PropertyResult`. The rest compares tensors bitwise or within an error bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import numpy as np
import torch

from linattn_verify.compare import Comparison, compare
from linattn_verify.kernel import Kernel
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.semantics import Problem
from linattn_verify.strategies import ProblemSpec, random_cotangents
from linattn_verify.tolerance import (
    ForwardBounds,
    TensorBound,
    backward_bounds,
    cotangent_loss,
    forward_bounds,
)
from linattn_verify.verdict import PropertyResult

FinalState = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None


class KernelFailure(Exception):
    """A kernel raised, or returned something that breaks the calling convention."""


@dataclass(frozen=True)
class KernelRun:
    """What one kernel call produced (detached).

    Attributes:
        o: Output ``[B, T, H, V]``.
        final_state: `None`, S_T ``[N, H, K, V]``, or ``(S_T, z_T)`` for normalized problems.
        grads: Gradients by input name (`linattn_verify.tolerance.GRADIENT_NAMES`) as autograd
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


def make_result(
    prop: str,
    kernel: str,
    spec: ProblemSpec,
    *,
    ok: bool = True,
    message: str = "",
    scores: Mapping[str, float] | None = None,
    worst_index: tuple[int, ...] | None = None,
    skipped: str | None = None,
) -> PropertyResult:
    """Build a `PropertyResult` whose case is the spec's one-line repro."""
    return PropertyResult(
        property=prop,
        kernel=kernel,
        case=spec.describe(),
        ok=ok,
        message=message,
        scores=dict(scores or {}),
        worst_index=worst_index,
        skipped=skipped,
    )


def skipped(prop: str, kernel: Kernel, spec: ProblemSpec, reason: str) -> PropertyResult:
    """Return the result of a property that does not apply."""
    return make_result(prop, kernel.name, spec, skipped=reason)


def finish(
    prop: str,
    kernel: Kernel,
    spec: ProblemSpec,
    failures: list[str],
    scores: Mapping[str, float],
    worst_index: tuple[int, ...] | None = None,
    summary: str = "",
) -> PropertyResult:
    """Return a held or failed result; the message lists every failure, then the case."""
    message = "\n".join([*failures, f"[{kernel.name} {spec.describe()}]"]) if failures else summary
    return make_result(
        prop,
        kernel.name,
        spec,
        ok=not failures,
        message=message,
        scores=scores,
        worst_index=worst_index,
    )


def kernel_recipe(kernel: Kernel, dtype: torch.dtype) -> PrecisionRecipe:
    """Return ``kernel``'s precision recipe for inputs of ``dtype``.

    A ``chunk_size=`` call option (`Kernel.with_options`) overrides the declared recipe's
    chunk size: the rounding counts of the chunked form depend on the C the kernel runs with.
    """
    recipe = kernel.precision_recipe(dtype)
    chunk_size = kernel.options.get("chunk_size")
    if isinstance(chunk_size, int) and not isinstance(chunk_size, bool):
        recipe = replace(recipe, chunk_size=chunk_size)
    return recipe


def with_effective_eps(problem: Problem, recipe: PrecisionRecipe) -> Problem:
    """Return ``problem`` with eps as the kernel adds it (rounded to the recipe's eps dtype)."""
    return replace(problem, eps=recipe.effective_eps(problem.eps))


def kernel_bounds(kernel: Kernel, problem: Problem) -> ForwardBounds:
    """Return the oracle's forward bounds for ``kernel``'s recipe (eps as the kernel adds it)."""
    recipe = kernel_recipe(kernel, problem.q.dtype)
    return forward_bounds(with_effective_eps(problem, recipe), recipe)


def run_bounds(
    kernel: Kernel, problem: Problem, cotangents: tuple[torch.Tensor, Any] | None = None
) -> dict[str, TensorBound]:
    """Return the bounds of every output (and, given cotangents, of every gradient ``d<x>``)."""
    recipe = kernel_recipe(kernel, problem.q.dtype)
    p = with_effective_eps(problem, recipe)
    bounds = dict(forward_bounds(p, recipe).tensors)
    if cotangents is not None:
        do, d_final = cotangents
        if not p.output_final_state:
            d_final = None
        grads = backward_bounds(p, recipe, do=do, d_final_state=d_final)
        bounds.update({"d" + n: b for n, b in grads.items()})
    return bounds


def final_shapes(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Return the shapes of the final-state tensors of ``problem``, by name."""
    _, _, H, K, V = problem.shape
    N = problem.num_sequences
    shapes: dict[str, tuple[int, ...]] = {"final_state": (N, H, K, V)}
    if problem.normalize:
        shapes["final_key_sum"] = (N, H, K)
    return shapes


def nan_message(name: str, x: torch.Tensor) -> str | None:
    """Return a message if ``x`` holds a NaN (never a correct value of this function)."""
    if not x.is_floating_point():
        return None
    nan = torch.isnan(x)
    if not bool(nan.any()):
        return None
    flat = int(torch.nonzero(nan.reshape(-1))[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), x.shape))
    return f"{name} holds {int(nan.sum())} NaN value(s) of {x.numel()}, first at index {index}"


def _validate(problem: Problem, o: Any, final: Any, any_float_state: bool) -> str | None:
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
        if any_float_state and not x.dtype.is_floating_point:
            return f"returned {name} of dtype {x.dtype}, expected a floating dtype"
        if not any_float_state and x.dtype not in (torch.float32, torch.float64):
            return f"returned {name} of dtype {x.dtype}, expected float32 (or float64)"
    return None


def _same_layout(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return ``x``'s values with ``like``'s strides and storage offset (differentiably).

    The storage around a strided ``like`` is filled with NaN, so a kernel that reads outside the
    view reads NaN (as `linattn_verify.strategies` poisons sliced layouts).
    """
    if like.is_contiguous() and like.storage_offset() == 0:
        return x
    extent = 1 + sum((n - 1) * abs(st) for n, st in zip(like.shape, like.stride(), strict=True))
    size = like.storage_offset() + (extent if like.numel() else 0)
    buffer = torch.full((size,), torch.nan, dtype=x.dtype, device=x.device)
    view = buffer.as_strided(like.shape, like.stride(), like.storage_offset())
    return view.copy_(x)


def _modified(passed: Problem, originals: Mapping[str, torch.Tensor]) -> str | None:
    for name, x in passed.inputs().items():
        if bool(bitwise_mismatch(x, originals[name]).any()):
            return f"input {name} was modified in place by the forward or backward pass"
    return None


def run_kernel(
    kernel: Kernel,
    problem: Problem,
    *,
    output_final_state: bool | None = None,
    cotangents: tuple[torch.Tensor, Any] | None = None,
    cotangent_seed: int | None = None,
    do_mask: torch.Tensor | None = None,
    caller_judges: bool = False,
) -> KernelRun:
    """Call ``kernel`` on private copies of ``problem``'s inputs; optionally run backward.

    The copies have the memory layout of the problem's own tensors (strided views of
    NaN-poisoned buffers included). A kernel with an implied decay gets no gradient for g.

    Args:
        kernel: The kernel under test.
        problem: The problem; its tensors are copied, so a kernel that writes to its inputs
            cannot change what the oracle sees (it fails instead).
        output_final_state: Override the problem's flag. Default: `None` (the problem's).
        cotangents: ``(do, d_final_state)`` to backpropagate through
            `linattn_verify.tolerance.cotangent_loss`, or `None` for a forward run only.
            Default: `None`.
        cotangent_seed: Without ``cotangents``, run backward with
            `random_cotangents(problem, cotangent_seed)`. Default: `None`.
        do_mask: Multiplies the output cotangent (``[B, T, H, 1]``, 0/1) and drops the
            final-state cotangent. Default: `None`.
        caller_judges: The caller judges the returned values itself (against the oracle or
            another run): NaN outputs and gradients, and a final state in any floating dtype,
            are returned instead of failing. Default: `False`.

    Returns:
        The `KernelRun`, its tensors detached.

    Raises:
        KernelFailure: the kernel (forward or backward) raised, returned a wrong type, shape or
            dtype, or a NaN (unless ``caller_judges``), or modified an input; the message says
            which.
    """
    what = kernel.name
    if output_final_state is not None:
        problem = replace(problem, output_final_state=output_final_state)
    if cotangents is None and cotangent_seed is not None:
        cotangents = random_cotangents(problem, cotangent_seed)
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
            layout = {n: _same_layout(getattr(p, n), x) for n, x in originals.items()}
            p = replace(p, **layout)  # type: ignore[arg-type]
            result = kernel.call(p)
    except Exception as exc:  # the kernel under test may raise anything
        raise KernelFailure(f"{what} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise KernelFailure(f"{what} returned {_kind(result)}, expected a pair (o, final_state).")
    o, final = result
    wrong = _validate(problem, o, final, caller_judges)
    if wrong is not None:
        raise KernelFailure(f"{what} {wrong}")
    if not problem.output_final_state:
        final = None
    elif problem.normalize:
        final = (final[0], final[1])
    run = KernelRun(o=o, final_state=final)
    for name, x in run.outputs.items():
        wrong = None if caller_judges else nan_message(name, x)
        if wrong is not None:
            raise KernelFailure(f"{what}: {wrong}")
    grads: dict[str, torch.Tensor | None] | None = None
    filled: dict[str, torch.Tensor] = {}
    if cotangents is not None:
        do, d_final = cotangents
        if do_mask is not None:
            do, d_final = do * do_mask.to(do.dtype), None
        try:
            with np.errstate(all="ignore"):
                loss = cotangent_loss(o, final, do, d_final if final is not None else None)
                values = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        except Exception as exc:
            raise KernelFailure(f"{what} backward raised {type(exc).__name__}: {exc}") from None
        grads = {n: None if g is None else g.detach() for n, g in zip(leaves, values, strict=True)}
        for name, grad in grads.items():
            # An input the outputs do not depend on has a zero gradient; autograd says None.
            filled[name] = torch.zeros_like(leaves[name]) if grad is None else grad
            wrong = None if caller_judges else nan_message("d" + name, filled[name])
            if wrong is not None:
                raise KernelFailure(f"{what}: {wrong}")
    wrong = _modified(p, originals)
    if wrong is not None:
        raise KernelFailure(f"{what}: {wrong}")
    return KernelRun(o.detach(), _detach(final), grads, filled)


def attempt(kernel: Kernel, problem: Problem, **options: Any) -> KernelRun | str:
    """Return `run_kernel`'s run, or the message of its `KernelFailure`."""
    try:
        return run_kernel(kernel, problem, **options)
    except KernelFailure as exc:
        return str(exc)


def _kind(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
    return type(x).__name__


def _detach(state: FinalState) -> FinalState:
    if isinstance(state, tuple):
        return (state[0].detach(), state[1].detach())
    return None if state is None else state.detach()


def bitwise_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Return where ``actual`` and ``expected`` differ: `torch.equal`'s rule, NaN equal to NaN."""
    a, e = actual.detach(), expected.detach().to(actual.device)
    if a.dtype != e.dtype or a.shape != e.shape:
        return torch.ones((), dtype=torch.bool).expand(a.shape if a.numel() else (1,))
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    return ~same


def bitwise_message(
    what: str, actual: torch.Tensor, expected: torch.Tensor, condition: str
) -> tuple[str | None, float, tuple[int, ...] | None]:
    """Compare bitwise; return ``(message or None, max abs difference, worst index)``.

    ``condition`` says what was changed between the runs, for the message.
    """
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (
            f"{what} {condition}: shape/dtype {tuple(actual.shape)}/{actual.dtype} differs from "
            f"{tuple(expected.shape)}/{expected.dtype}",
            math.inf,
            None,
        )
    bad = bitwise_mismatch(actual, expected)
    if not bool(bad.any()):
        return None, 0.0, None
    a64, e64 = actual.detach().double(), expected.detach().double().to(actual.device)
    diff = torch.where(bad, (a64 - e64).abs(), 0.0).nan_to_num(nan=math.inf)
    flat = int(torch.argmax(diff))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), actual.shape))
    n = int(bad.sum())
    lines = [
        f"{what} is not bit-identical {condition}!",
        f"Mismatched elements: {n} / {actual.numel()} ({100.0 * n / actual.numel():.1f}%)",
        f"Greatest absolute difference: {float(diff.max()):.6g} at index {index} (0 allowed): "
        f"got {float(a64[index]):.9g}, expected {float(e64[index]):.9g}",
    ]
    return "\n".join(lines), float(diff.max()), index


def compare_within(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    bound: torch.Tensor,
    *,
    magnitude: torch.Tensor,
    unit: float,
) -> Comparison:
    """Score ``actual`` against ``expected`` (float64) with an absolute bound per element.

    Elements whose bound is infinite are unverifiable (not judged, counted). The pass rule and
    the scores are those of `linattn_verify.compare.compare` (max r <= 2, finite mismatch fails).
    """
    expected = expected.to(torch.float64)
    verifiable = torch.isfinite(bound)
    tb = TensorBound(
        name=name,
        reference=expected,
        bound=bound,
        magnitude=magnitude,
        count=torch.ones_like(expected),
        unit=unit,
        single=torch.zeros_like(expected),
        verifiable=verifiable,
    )
    return compare(actual, tb)


def relayout(problem: Problem, how: Callable[[torch.Tensor], torch.Tensor]) -> Problem:
    """Return ``problem`` with every floating input passed through ``how`` (same values)."""
    return replace(problem, **{n: how(x) for n, x in problem.inputs().items()})  # type: ignore[arg-type]


def _poison(x: torch.Tensor) -> torch.Tensor:
    # Only floating buffers: a garbage integer buffer (an index) could make an unchecked
    # interpreter load read far out of bounds and kill the process instead of failing.
    if x.is_floating_point():
        with torch.no_grad():
            x.fill_(math.nan)
    return x


@contextmanager
def nan_poisoned_allocations() -> Iterator[None]:
    """Make `torch.empty` and `torch.empty_like` return NaN-filled floating tensors."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        return _poison(real_empty(*args, **kwargs))

    def empty_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        return _poison(real_empty_like(*args, **kwargs))

    with mock.patch("torch.empty", empty), mock.patch("torch.empty_like", empty_like):
        yield
