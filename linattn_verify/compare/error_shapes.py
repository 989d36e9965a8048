# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a failing o looks like, where it is a defect kernels are known to have.

A bound comparison says by how much o is off, not how. Some defects leave o off in a shape that
names them, and `recognised` tests for each by judging the kernel's o against what that defect
computes, with the same rigour as against the oracle (r <= `FAIL_THRESHOLD` on every verifiable
element, finite where finite), after the plainest, an o of zeros where the exact one is not:

* **the state read before token t is added**: o_t = s φ(q_t)^T S_{t-1} or s φ(q_t)^T (a_t
  S_{t-1}) (+ normalizer), exactly the declared semantics of keys, values and gates moved one
  token later in each sequence (`_one_token_later`). Judged against the float64 oracle and the
  bounds of that problem (`linattn_verify.linear_attn.tolerance.forward_bounds`), so only for
  feature maps with φ(0) = 0 (identity, relu), where a zero key adds nothing;
* **a wrong scale**: o = c · (exact o) at every element for one c != 1 (least squares over the
  verifiable elements), judged against |c| B (every term of o scales by c, and so does its
  rounding); unnormalized outputs only (a normalized o cancels most of a scale);
* **a permutation**: o is the exact o with its batch rows, tokens, heads or value columns
  reordered (an index mixed up in the kernel's addressing): each slice of o along that axis is
  within its bound of a distinct slice of the exact o, and not all of them of their own. Axes
  of at most `PERMUTED_AXIS_MAX` entries (the search compares every pair of slices).

Each is a statement about this case only: "consistent with", never "is".
"""

from __future__ import annotations

import torch

from linattn_verify.compare._elementwise import safe_ratio
from linattn_verify.core.bound import TensorBound
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.tolerance import forward_bounds
from linattn_verify.results import FAIL_THRESHOLD

ZERO_AT_ZERO = ("identity", "relu")
"""Feature maps with φ(0) = 0: a key of zeros adds nothing to the state."""

SAME_SCALE = 1e-3
"""A fitted ratio within this of 1 is no wrong scale (the comparison would not have failed)."""

PERMUTED_AXIS_MAX = 64
"""The longest axis searched for a permutation (its pairs of slices are compared)."""

_AXES = ((0, "batch rows", "b"), (1, "tokens", "t"), (2, "heads", "h"), (3, "value columns", "c"))


def recognised(
    problem: Problem,
    recipe: PrecisionRecipe,
    o: object,
    exact: TensorBound,
    *,
    causal_exact: bool = True,
) -> str | None:
    """Name the defect a failed ``o`` is consistent with on this case, or `None`.

    Args:
        problem: The problem as the kernel saw it.
        recipe: The kernel's precision recipe.
        o: The kernel's output.
        exact: The oracle's `TensorBound` of o for ``problem``.
        causal_exact: As declared (the bounds of the moved problem are the kernel's).
    """
    if not isinstance(o, torch.Tensor) or o.shape != exact.reference.shape:
        return None
    x, mask = exact.reference, exact.verifiable & torch.isfinite(exact.reference)
    if bool((o[mask] == 0).all()) and bool((x[mask] != 0).any()):
        return (
            "o is 0 at every element (the exact o is not): nothing was written, or every term "
            "is missing (with one token and no initial state: the state read before the token "
            "is added)"
        )
    if problem.feature_map in ZERO_AT_ZERO:
        for read, moved in _one_token_later(problem):
            bound = forward_bounds(
                moved, recipe, zero_denominator="any", causal_exact=causal_exact
            ).tensors["o"]
            if _within(o, bound.reference, bound.bound, bound.verifiable):
                return (
                    "o is consistent, within its bound, with the state read before token t is "
                    f"added: o_t = s φ(q_t)^T {read} (the exact output of keys, values and "
                    "gates one token later), so token t's own term is missing from o_t"
                )
    if not problem.normalize:
        x_hat = o.to(torch.float64)
        energy = float((x[mask] ** 2).sum())
        if energy > 0 and bool(torch.isfinite(x_hat[mask]).all()):
            c = float((x_hat[mask] * x[mask]).sum()) / energy
            wrong = abs(c - 1) > SAME_SCALE and abs(c) > SAME_SCALE
            if wrong and _within(o, c * x, abs(c) * exact.bound, mask):
                s = problem.scale
                return (
                    f"o is {c:.4g} times the exact value at every element, within its bound: "
                    f"a wrong scale? The declared scale is {s:.4g} (K^-1/2 = "
                    f"{problem.q.shape[-1] ** -0.5:.4g}); the kernel's o is that of {c * s:.4g}"
                )
    for axis, what, letter in _AXES:
        order = _permutation(o, exact, axis)
        if order is not None:
            swaps = [f"{letter}={i} holds {letter}={j}" for i, j in enumerate(order) if i != j]
            more = f", ... ({len(swaps)} moved)" if len(swaps) > 6 else ""
            return (
                f"o is the exact o with its {what} permuted, within its bound: "
                f"{', '.join(swaps[:6])}{more} (an index mixed up in the kernel's addressing?)"
            )
    return None


def _permutation(o: torch.Tensor, exact: TensorBound, axis: int) -> list[int] | None:
    """The reordering of the exact o along ``axis`` that o is, or `None`.

    Slice i of o must be within its bound of a distinct slice j(i) of the exact o; `None` when
    no such order exists or it is the identity.
    """
    n = o.shape[axis]
    if not 1 < n <= PERMUTED_AXIS_MAX:
        return None
    x, bound, verifiable = exact.reference, exact.bound, exact.verifiable

    def fits(i: int, j: int) -> bool:
        return _within(
            o.select(axis, i), x.select(axis, j), bound.select(axis, j), verifiable.select(axis, j)
        )

    order: list[int] = []
    for i in range(n):
        # Its own slice first: equal slices (ties) then keep their places.
        free = [i] + [j for j in range(n) if j != i]
        match = next((j for j in free if j not in order and fits(i, j)), None)
        if match is None:
            return None
        order.append(match)
    return None if order == list(range(n)) else order


def _within(
    o: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, verifiable: torch.Tensor
) -> bool:
    """Whether ``o`` is finite where expected is and r <= `FAIL_THRESHOLD` on the verifiable."""
    x_hat = o.to(torch.float64)
    finite = torch.isfinite(expected)
    if not bool(torch.equal(torch.isfinite(x_hat) & finite, finite)):
        return False
    judged = verifiable & finite
    if not bool(judged.any()):
        return False
    r = safe_ratio((x_hat - expected).abs()[judged], bound[judged])
    return bool((r <= FAIL_THRESHOLD).all())


def _one_token_later(problem: Problem) -> list[tuple[str, Problem]]:
    """The problems whose exact o is a kernel's that reads the state before token t is added.

    k, v and g moved one token later in each sequence (its first key and value 0, its first
    gate 0) give S'_t = S_{t-1}: o_t = s φ(q_t)^T S_{t-1}. A kernel that decays first and reads
    then, s φ(q_t)^T (a_t S_{t-1}), is that with q_t ⊙ a_t (φ(a q) = a φ(q) for a > 0 and the
    maps of `ZERO_AT_ZERO`).
    """

    def later(x: torch.Tensor | None) -> torch.Tensor | None:
        if x is None:
            return None
        y = torch.zeros_like(x)
        for _, b, start, end in problem.sequences():
            y[b, start + 1 : end] = x[b, start : end - 1]
        return y

    moved = problem.with_tensors(
        k=later(problem.k), v=later(problem.v), g=later(problem.g), gv=later(problem.gv)
    )
    # The decayed read's q ⊙ a_t covers a key-side decay only (not a value gate's).
    if problem.g is None or problem.gv is not None:
        return [("S_{t-1}", moved)]
    decay = torch.exp(problem.g.to(torch.float64))
    decay = decay if decay.ndim == problem.q.ndim else decay[..., None]
    q = (problem.q.to(torch.float64) * decay).to(problem.q.dtype)
    return [("S_{t-1}", moved), ("(a_t S_{t-1})", moved.with_tensors(q=q))]


__all__ = ["recognised"]
