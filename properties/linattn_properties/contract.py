# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The calling contract of a kernel (DESIGN.md §4, §8.9), and the helpers every property uses.

`contract_holds` checks what a correct *function* cannot tell apart from a correct *kernel*:
shapes and dtypes, inputs left alone, layout independence, determinism, and no reads of
uninitialised memory. The helpers (`run_kernel`, `bitwise_mismatch`, `compare_within`, ...) are
shared by the other property modules: they run a kernel defensively (a raise, a wrong type,
shape or dtype, or a NaN becomes a message, never an exception) and compare tensors either
bitwise or within a bound from the error model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import torch

from linattn_verify.compare import Comparison, compare
from linattn_verify.kernel import Kernel
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

ROW_TENSORS = ("o", "q", "k", "v", "g")
"""Tensors laid out ``[B, T, H, ...]`` (outputs and per-token inputs or their gradients)."""


@dataclass(frozen=True)
class Outputs:
    """What one kernel call returned, validated, by name.

    Attributes:
        tensors: ``"o"`` and, when requested, ``"final_state"`` (and ``"final_key_sum"``).
        grads: Gradients by input name (``"q"``, ..., ``"initial_key_sum"``), or empty.
    """

    tensors: Mapping[str, torch.Tensor]
    grads: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def everything(self) -> dict[str, torch.Tensor]:
        """Return outputs and gradients (``"d<name>"``) in one dictionary."""
        return {**self.tensors, **{"d" + n: g for n, g in self.grads.items()}}


def skipped(prop: str, kernel: Kernel, spec: ProblemSpec, reason: str) -> PropertyResult:
    """Return the result of a property that does not apply."""
    return PropertyResult(prop, kernel.name, spec.describe(), True, skipped=reason)


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
    if failures:
        message = "\n".join([*failures, f"[{kernel.name} {spec.describe()}]"])
        return PropertyResult(
            prop, kernel.name, spec.describe(), False, message, dict(scores), worst_index
        )
    return PropertyResult(
        prop, kernel.name, spec.describe(), True, summary, dict(scores), worst_index
    )


def final_shapes(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Return the shapes of the final-state tensors of ``problem``, by name."""
    _, _, H, K, V = problem.shape
    N = problem.num_sequences
    shapes: dict[str, tuple[int, ...]] = {"final_state": (N, H, K, V)}
    if problem.normalize:
        shapes["final_key_sum"] = (N, H, K)
    return shapes


def _describe_index(x: torch.Tensor, mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), x.shape))


def nan_message(name: str, x: torch.Tensor) -> str | None:
    """Return a message if ``x`` holds a NaN (never a correct value of this function)."""
    if not x.is_floating_point():
        return None
    nan = torch.isnan(x)
    if not bool(nan.any()):
        return None
    index = _describe_index(x, nan)
    return f"{name} holds {int(nan.sum())} NaN value(s) of {x.numel()}, first at index {index}"


def _validate(problem: Problem, o: Any, final: Any, want_final: bool) -> Outputs | str:
    B, T, H, _, V = problem.shape
    if not isinstance(o, torch.Tensor):
        return f"returned o of type {type(o).__name__}, expected a torch.Tensor"
    if tuple(o.shape) != (B, T, H, V):
        return f"returned o of shape {tuple(o.shape)}, expected [B, T, H, V] = {(B, T, H, V)}"
    if o.dtype != problem.q.dtype:
        return f"returned o of dtype {o.dtype}, expected the input dtype {problem.q.dtype}"
    tensors: dict[str, torch.Tensor] = {"o": o}
    if want_final:
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
            if x.dtype not in (torch.float32, torch.float64):
                return f"returned {name} of dtype {x.dtype}, expected float32 (or float64)"
            tensors[name] = x
    for name, x in tensors.items():
        message = nan_message(name, x)
        if message is not None:
            return message
    return Outputs(tensors)


def run_kernel(
    kernel: Kernel,
    problem: Problem,
    *,
    output_final_state: bool | None = None,
    cotangent_seed: int | None = None,
    cotangents: tuple[torch.Tensor, Any] | None = None,
    do_mask: torch.Tensor | None = None,
) -> Outputs | str:
    """Run ``kernel`` on ``problem``; return its validated outputs or what went wrong.

    Args:
        kernel: The kernel under test.
        problem: The problem, passed as it is (no copies, no casts).
        output_final_state: Override the problem's flag. Default: `None` (the problem's).
        cotangent_seed: When given, also run the backward pass with the cotangents
            `random_cotangents(problem, cotangent_seed)` and return the gradients. Default: `None`.
        cotangents: Explicit ``(do, d_final_state)`` for the backward pass (instead of a seed).
            Default: `None`.
        do_mask: Multiplies the output cotangent (``[B, T, H, 1]``, 0/1) and drops the
            final-state cotangent. Default: `None`.

    Returns:
        `Outputs`, or a one-line message: the kernel raised, returned a wrong type, shape or
        dtype, or a NaN.
    """
    want_final = problem.output_final_state if output_final_state is None else output_final_state
    if cotangents is None and cotangent_seed is not None:
        cotangents = random_cotangents(problem, cotangent_seed)
    backward = cotangents is not None
    leaves: dict[str, torch.Tensor] = {}
    originals = problem.inputs()
    if backward:
        problem, leaves = problem.with_grad_leaves()
    try:
        with torch.set_grad_enabled(backward):
            o, final = kernel.call(problem, output_final_state=want_final)
    except Exception as exc:  # a kernel failing in any way is a property failure, reported
        return f"{kernel.name} raised {type(exc).__name__}: {exc}"
    checked = _validate(problem, o, final, want_final)
    if isinstance(checked, str) or not backward:
        return checked if isinstance(checked, str) else _detached(checked)
    assert cotangents is not None
    do, d_final = cotangents
    if do_mask is not None:
        do, d_final = do * do_mask.to(do.dtype), None
    finals = [checked.tensors[n] for n in final_shapes(problem) if n in checked.tensors]
    final_arg: Any = tuple(finals) if problem.normalize else (finals[0] if finals else None)
    try:
        loss = cotangent_loss(checked.tensors["o"], final_arg, do, d_final if finals else None)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    except Exception as exc:  # see above
        return f"{kernel.name} backward raised {type(exc).__name__}: {exc}"
    named: dict[str, torch.Tensor] = {}
    for (name, leaf), grad in zip(leaves.items(), grads, strict=True):
        # An input the outputs do not depend on has a zero gradient; autograd says None.
        named[name] = torch.zeros_like(leaf) if grad is None else grad.detach()
        message = nan_message("d" + name, named[name])
        if message is None and bool(bitwise_mismatch(leaf, originals[name]).any()):
            message = f"the forward or backward pass modified input {name} in place"
        if message is not None:
            return message
    return Outputs({n: t.detach() for n, t in checked.tensors.items()}, named)


def _detached(out: Outputs) -> Outputs:
    return Outputs({n: t.detach() for n, t in out.tensors.items()}, out.grads)


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


def kernel_bounds(kernel: Kernel, problem: Problem) -> ForwardBounds:
    """Return the oracle's forward bounds for ``kernel``'s recipe (eps as the kernel adds it)."""
    recipe = kernel.precision_recipe(problem.q.dtype)
    return forward_bounds(replace(problem, eps=recipe.effective_eps(problem.eps)), recipe)


def run_bounds(
    kernel: Kernel, problem: Problem, cotangents: tuple[torch.Tensor, Any] | None = None
) -> dict[str, TensorBound]:
    """Return the bounds of every output (and, given cotangents, of every gradient ``d<x>``)."""
    recipe = kernel.precision_recipe(problem.q.dtype)
    p = replace(problem, eps=recipe.effective_eps(problem.eps))
    bounds = dict(forward_bounds(p, recipe).tensors)
    if cotangents is not None:
        do, d_final = cotangents
        if not p.output_final_state:
            d_final = None
        grads = backward_bounds(p, recipe, do=do, d_final_state=d_final)
        bounds.update({"d" + n: b for n, b in grads.items()})
    return bounds


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


def _transposed(x: torch.Tensor) -> torch.Tensor:
    """Same values, strides of a tensor stored with dims 1 and 2 swapped."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _sliced(x: torch.Tensor) -> torch.Tensor:
    """Same values, a view into a larger NaN-filled tensor (offset 1 in every dim)."""
    big = torch.full([s + 2 for s in x.shape], math.nan, dtype=x.dtype, device=x.device)
    view = big[tuple(slice(1, 1 + s) for s in x.shape)]
    view.copy_(x)
    return view


def relayout(problem: Problem, how: Callable[[torch.Tensor], torch.Tensor]) -> Problem:
    """Return ``problem`` with every floating input passed through ``how`` (same values)."""

    def conv(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else how(x)

    return replace(
        problem,
        q=how(problem.q),
        k=how(problem.k),
        v=how(problem.v),
        g=conv(problem.g),
        initial_state=conv(problem.initial_state),
        initial_key_sum=conv(problem.initial_key_sum),
    )


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


def _snapshot(problem: Problem) -> dict[str, torch.Tensor]:
    named = dict(problem.inputs())
    if problem.cu_seqlens is not None:
        named["cu_seqlens"] = problem.cu_seqlens
    return {n: t.detach().clone() for n, t in named.items()}


def _inputs_unmodified(problem: Problem, before: Mapping[str, torch.Tensor]) -> list[str]:
    after = _snapshot(problem)
    failures = []
    for name, old in before.items():
        message, _, _ = bitwise_message(f"input {name}", after[name], old, "after the call")
        if message is not None:
            failures.append(message.replace("is not bit-identical", "was modified in place"))
    return failures


class _Judge:
    """Compares a run with the reference run: bitwise, or within 2B for nondeterministic kernels."""

    def __init__(
        self, kernel: Kernel, problem: Problem, reference: Outputs, seed: int | None = None
    ) -> None:
        self.kernel, self.problem, self.reference, self.seed = kernel, problem, reference, seed
        self.exact = kernel.capabilities.deterministic
        self._bounds: dict[str, TensorBound] | None = None
        self.bit_identical = True
        self.max_r = 0.0

    def __call__(self, run: Outputs | str, condition: str) -> list[str]:
        if isinstance(run, str):
            return [f"run {condition}: {run}"]
        failures = []
        for name, expected in self.reference.everything().items():
            actual = run.everything().get(name)
            if actual is None:
                failures.append(f"{name} missing from the run {condition}")
                continue
            message, _, _ = bitwise_message(name, actual, expected, condition)
            self.bit_identical &= message is None
            if message is None or self.exact:
                failures += [] if message is None else [message]
                continue
            bound = self._bound(name)
            if bound is None:
                failures.append(message + " (no error bound for this tensor)")
                continue
            c = compare_within(
                name,
                actual,
                expected.double(),
                2 * bound.bound,
                magnitude=bound.magnitude,
                unit=bound.unit,
            )
            self.max_r = max(self.max_r, c.max_r)
            if not c.ok:
                failures.append(f"{c.message(self.kernel.name)} ({condition}, sum of 2 bounds)")
        return failures

    def _bound(self, name: str) -> TensorBound | None:
        if self._bounds is None:
            cotangents = None
            if self.seed is not None:
                cotangents = random_cotangents(self.problem, self.seed)
            self._bounds = run_bounds(self.kernel, self.problem, cotangents)
        return self._bounds.get(name)


def contract_holds(spec: ProblemSpec, kernel: Kernel, *, backward: bool = True) -> PropertyResult:
    """Check the calling contract of a kernel on one case.

    With o, S_T = f(q, k, v, g, S_0) the kernel's outputs on the case:

    * o has shape ``[B, T, H, V]`` and the input dtype; S_T (z_T) has shape ``[N, H, K, V]``
      (``[N, H, K]``) and dtype float32; nothing is NaN;
    * every input (and ``cu_seqlens``) is bitwise unchanged by the call (and the backward);
    * f(x) ≡ f(x) (bit-identical rerun) when the kernel claims determinism, else
      |f(x) - f(x)| <= 2B with B the error model's bound;
    * f(transposed-stride x) ≡ f(x) and f(x as a slice of a larger NaN-filled tensor) ≡ f(x);
    * with `torch.empty`/`torch.empty_like` returning NaN-filled tensors, outputs (and
      gradients, when backward is supported) are unchanged: ≡ (or within 2B).

    Args:
        spec: The case.
        kernel: The kernel under test.
        backward: Include the gradients in the NaN-poisoning check. Default: `True`.

    Returns:
        The `PropertyResult`; scores ``bit_identical`` (1.0 if every rerun was bit-identical)
        and ``max_r`` (nondeterministic kernels).
    """
    prop = "contract_holds"
    built = spec.build()
    reason = kernel.supports(built)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    # The reference run takes contiguous inputs; the case's own layout is one of the variants.
    problem = relayout(built, lambda x: x.contiguous())
    before = _snapshot(problem)
    first = run_kernel(kernel, problem)
    if isinstance(first, str):
        return finish(prop, kernel, spec, [first], {})
    failures = _inputs_unmodified(problem, before)
    judge = _Judge(kernel, problem, first)
    failures += judge(run_kernel(kernel, problem), "on a rerun")
    failures += judge(
        run_kernel(kernel, relayout(problem, _transposed)), "with transposed-stride inputs"
    )
    failures += judge(
        run_kernel(kernel, relayout(problem, _sliced)), "with inputs sliced from larger tensors"
    )
    seed = spec.seed + 1 if backward and kernel.capabilities.backward else None
    clean = run_kernel(kernel, problem, cotangent_seed=seed) if seed is not None else first
    if isinstance(clean, str):
        return finish(prop, kernel, spec, [*failures, f"backward: {clean}"], {})
    failures += _inputs_unmodified(problem, before)
    with nan_poisoned_allocations():
        poisoned = run_kernel(kernel, problem, cotangent_seed=seed)
    poisoned_judge = _Judge(kernel, problem, clean, seed)
    failures += poisoned_judge(poisoned, "with torch.empty/empty_like returning NaN-filled memory")
    bit = judge.bit_identical and poisoned_judge.bit_identical
    scores = {"bit_identical": float(bit), "max_r": max(judge.max_r, poisoned_judge.max_r)}
    return finish(prop, kernel, spec, failures, scores, summary=f"bit_identical={bit}")


__all__ = [
    "Outputs",
    "bitwise_message",
    "bitwise_mismatch",
    "compare_within",
    "contract_holds",
    "final_shapes",
    "finish",
    "kernel_bounds",
    "nan_message",
    "nan_poisoned_allocations",
    "relayout",
    "run_bounds",
    "run_kernel",
    "skipped",
]
