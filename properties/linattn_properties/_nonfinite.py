# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Where a kernel's declarations let it return NaN, inf or anything at all (docs/design.md §3).

The rows whose denominator is or may be 0, the elements an ``any`` kernel may return as it
likes, the elements where NaN or inf is allowed (the zero-denominator conventions and declared
16-bit overflow), and the messages for a NaN found elsewhere or a ``zero`` kernel's breach.
"""

from __future__ import annotations

from typing import Any

import torch

from linattn_verify.linear_attn._bounds.dependence import depends_on_rows
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.tolerance import forward_bounds, overflow_elements
from linattn_verify.results.message import BREACHED_DECLARATION


def denominator_rows(
    kernel: Kernel, problem: Problem, *, backward: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the rows ``[B, T, H]`` of a normalized problem whose denominator Z is or may be 0.

    The first mask: the exact Z is 0; the second: the kernel's rounding may turn Z into 0
    (|Z| <= B^Z, the exact zeros included), or, for a reciprocal division, make 1/Z overflow
    its dtype (|Z| < 1/max), or with ``backward`` make the backward's (1/Z)^2 overflow
    (|Z| < max^-1/2: autograd of a reciprocal forms it even for a zero cotangent, 0·inf = NaN).
    """
    recipe = kernel.precision_recipe(problem.q.dtype)
    fb = forward_bounds(problem, recipe, causal_exact=kernel.capabilities.causal_exact)
    res = fb.tensors["o"].residual
    assert res is not None
    Z, B_Z = res.denominator[..., 0], res.denominator_bound[..., 0]
    limits = recipe.division_limits(problem.q.dtype)
    smallest = 0.0 if limits is None else limits.largest ** (-0.5 if backward else -1.0)
    return Z == 0, Z.abs() <= B_Z + smallest


def _by_tensor(problem: Problem, rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """``rows`` as masks of o and of every gradient (``d<x>``) of their (sequence, head).

    Only the ``ieee`` and ``any`` conventions ask: their backward may spread the 0/0 row's NaN
    to the whole sequence and head (`depends_on_rows` with ``whole_sequence``).
    """
    V = problem.v.shape[-1]
    masks = {"o": rows[..., None].expand(*rows.shape, V)}
    spread = depends_on_rows(problem, rows, whole_sequence=True)
    masks.update({"d" + n: m for n, m in spread.items()})
    return masks


def undefined_elements(kernel: Kernel, problem: Problem) -> dict[str, torch.Tensor]:
    """Return the elements (``o``, ``d<x>``) an ``any`` kernel may return as it likes.

    Those are the elements whose exact value is undefined, for a kernel that declared
    ``zero_denominator="any"``. Empty for the other conventions (their value there is a function
    of the inputs, so runs compared bit for bit must agree on it) and for unnormalized problems.
    For the bitwise comparisons (`compare_bitwise`'s ``undefined``).
    """
    if not problem.normalize or kernel.capabilities.zero_denominator != "any":
        return {}
    return _by_tensor(problem, denominator_rows(kernel, problem)[0])


def nonfinite_allowed(
    kernel: Kernel,
    problem: Problem,
    cotangents: tuple[torch.Tensor, Any] | None = None,
) -> dict[str, torch.Tensor]:
    """Elements (``o``, final states, ``d<x>``) where the kernel's declaration allows NaN or inf.

    For ``ieee`` and ``any`` (docs/design.md §3): the rows whose exact denominator is 0 or may
    round to 0 in the kernel's arithmetic (|Z| <= B^Z: a correct IEEE kernel divides by a
    computed 0 there; for a reciprocal division, where 1/Z, or in the backward (1/Z)^2, may
    overflow its dtype), and every gradient element of their sequence and head. For any
    convention, where a declared 16-bit arithmetic may overflow (`overflow_elements`; its
    gradients judged with the ``cotangents`` (do, d_final_state) the kernel ran with).
    """
    recipe = kernel.precision_recipe(problem.q.dtype)
    causal_exact = kernel.capabilities.causal_exact
    allowed = overflow_elements(problem, recipe, causal_exact=causal_exact, cotangents=cotangents)
    if not problem.normalize or kernel.capabilities.zero_denominator == "zero":
        return allowed
    undefined, may_vanish = denominator_rows(kernel, problem)
    by_denominator = _by_tensor(problem, undefined | may_vanish)
    if recipe.division == "reciprocal":
        # The backward's (1/Z)^2 overflows sooner than 1/Z does.
        _, backward = denominator_rows(kernel, problem, backward=True)
        widened = _by_tensor(problem, undefined | backward)
        by_denominator.update({n: m for n, m in widened.items() if n != "o"})
    for name, mask in by_denominator.items():
        allowed[name] = allowed[name] | mask if name in allowed else mask
    return allowed


def nan_message(name: str, x: torch.Tensor, allowed: torch.Tensor | None = None) -> str | None:
    """Return a message if ``x`` holds a NaN outside ``allowed`` (`None`: nowhere allowed).

    NaN is never a correct value of this function; only where its exact value is undefined or
    its denominator may round to 0 may a kernel's declaration make it one (`nonfinite_allowed`).
    """
    if not x.is_floating_point():
        return None
    nan = torch.isnan(x)
    if allowed is not None:
        nan = nan & ~allowed.to(nan.device)
    if not bool(nan.any()):
        return None
    index = _first(nan)
    where = "" if allowed is None else " outside the rows whose exact denominator is or may be 0"
    return (
        f"{name} holds {int(nan.sum())} NaN value(s) of {x.numel()}{where}, first at index {index}"
    )


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


def zero_convention_breach(kernel: Kernel, problem: Problem, o: torch.Tensor) -> str | None:
    """Return a message if a ``zero`` kernel returned a non-finite o on a 0/0 row, else `None`.

    A kernel that declared ``zero_denominator="zero"`` declared 0 where the exact denominator is
    0, so a NaN or inf there breaks its own declaration.

    One root cause, one message: whichever property meets it, the first line is the same but
    for the counts and the index (`linattn_verify.reporting.summary.failures` groups on it).
    """
    if kernel.capabilities.zero_denominator != "zero" or not problem.normalize:
        return None
    if not o.is_floating_point() or bool(torch.isfinite(o).all()):
        return None
    rows = denominator_rows(kernel, problem)[0]
    breach = ~torch.isfinite(o) & rows[..., None].to(o.device)
    if not bool(breach.any()):
        return None
    kind = "NaN" if bool(torch.isnan(o[breach]).all()) else "non-finite"
    return (
        f"{kernel.name}: o holds {int(breach.sum())} {kind} value(s) of {o.numel()}, first at "
        f"index {_first(breach)}, on rows whose exact denominator is 0, {BREACHED_DECLARATION} "
        "zero_denominator='zero' (0 there); a kernel that divides by zero as IEEE arithmetic "
        "does declares 'ieee' (check: --zero-denominator ieee), or 'any'"
    )
