# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Denominator stability of normalized outputs (DESIGN.md §8.4, ERROR_MODEL.md §3).

The oracle comparison judges certified elements by r and every element by the residual η; this
property adds what that comparison lets through on purpose: a NaN on an unverifiable row (the
residual skips non-finite values), an inf where the denominator is certified nonzero and the
quotient cannot overflow, and a nonzero value on a row whose exact denominator is 0 (the 0/0
row, defined to be 0).
"""

from __future__ import annotations

import torch

from linattn_properties._support import attempt, finish, run_bounds, skipped
from linattn_verify.compare import compare
from linattn_verify.kernel import Kernel
from linattn_verify.strategies import ProblemSpec
from linattn_verify.verdict import PropertyResult


def denominator_stable(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a normalized output is as stable as its quotient's conditioning allows.

    With N, Z = s φ(q_t)^T z_t + eps the exact numerator and denominator, B^N, B^Z their error
    bounds and B^o, η the forward bound and residual ratio of `linattn_verify.compare`:

    * ô is never NaN;
    * Z = 0 exactly (the 0/0 row) ⇒ ô = 0 exactly;
    * ô = ±inf only where |Z| <= B^Z (the denominator may round to 0) or the largest
      admissible quotient (|N| + B^N) / (|Z| - B^Z) overflows the output dtype;
    * max r <= 2 on certified elements (B^Z < |Z|/2) and max η <= 2 everywhere.

    Args:
        spec: The case.
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`; scores ``max_r``, ``max_eta``, ``max_eps_influence`` (eps/Z),
        ``unverifiable_rows``, ``zero_rows``.
    """
    prop = "denominator_stable"
    problem = spec.build()
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(prop, kernel, spec, reason)
    if not problem.normalize:
        return skipped(prop, kernel, spec, "unnormalized output has no denominator")
    run = attempt(kernel, problem)
    if isinstance(run, str):
        return finish(prop, kernel, spec, [run], {})
    o = run.outputs["o"]
    bound = run_bounds(kernel, problem)["o"]
    res = bound.residual
    assert res is not None
    failures = []
    c = compare(o, bound)
    if not c.ok:
        failures.append(c.message(kernel.name))
    Z, BZ = res.denominator, res.denominator_bound
    x = o.double()
    zero_rows = (Z == 0).expand_as(x)
    wrong_zero = zero_rows & (x != 0)
    worst = c.worst_index
    if bool(wrong_zero.any()):
        index = _first(wrong_zero)
        failures.append(
            "o is not 0 on a row whose exact denominator is 0 (the 0/0 row, defined as 0)!\n"
            f"Mismatched elements: {int(wrong_zero.sum())} / {int(zero_rows.sum())}\n"
            f"First at index {index}: got {float(x[index]):.9g} (0 required)"
        )
        worst = index
    ceiling = (res.numerator.abs() + res.numerator_bound) / (Z.abs() - BZ).clamp(min=0)
    may_overflow = (Z.abs() <= BZ) | (ceiling >= torch.finfo(o.dtype).max)
    bad_inf = torch.isinf(x) & ~may_overflow
    if bool(bad_inf.any()):
        index = _first(bad_inf)
        failures.append(
            "o is infinite where the denominator is certified nonzero and the quotient is "
            f"bounded!\nInfinite elements: {int(bad_inf.sum())} / {x.numel()}\n"
            f"First at index {index}: |Z| = {float(Z[index[:-1]][0]):.3g} > B^Z = "
            f"{float(BZ[index[:-1]][0]):.3g}, |o| <= {float(ceiling[index[:-1]][0]):.3g}"
        )
        worst = index
    unverifiable_rows = int((~bound.verifiable).any(dim=-1).sum())
    scores = {
        "max_r": c.max_r,
        "max_eta": c.max_eta or 0.0,
        "max_eps_influence": c.max_eps_influence or 0.0,
        "unverifiable_rows": float(unverifiable_rows),
        "zero_rows": float(int((Z == 0).sum())),
    }
    return finish(prop, kernel, spec, failures, scores, worst, summary=c.summary())


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


__all__ = ["denominator_stable"]
