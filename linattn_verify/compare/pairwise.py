# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Judge two runs of the same exact function against each other.

Two runs a and b are each within their own bound of the exact value, so a correct pair
satisfies, for every element judged by both,

    |a - b| <= B_a + B_b,

with B from each run's own precision recipe. The deciding score is the ratio
|a - b| / (B_a + B_b); like r against the oracle it fails above `FAIL_THRESHOLD`. Elements
unverifiable for either run (B = inf) are not judged, nor are elements whose exact value is
undefined (an exactly zero exact denominator, docs/design.md §3: there is no exact value both
runs approximate; the value a kernel declares there is judged against the oracle); an element
finite in one run and not in the other fails wherever the exact value is representable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from linattn_verify.compare._elementwise import argmax_index, safe_ratio, shape_problem, worst_at
from linattn_verify.core.bound import TensorBound
from linattn_verify.results import FAIL_THRESHOLD, Comparison, Counts, Scores
from linattn_verify.triage import severity


@dataclass(frozen=True)
class Side:
    """One run's value of a tensor with the bound of its own recipe.

    Attributes:
        label: Which run (a kernel's name, ``"split run"``, ``"separate runs"``...).
        value: The run's tensor.
        bound: Its absolute error bound B (inf where unverifiable).
        verifiable: Elements whose bound is meaningful.
        undefined: Elements whose exact value is undefined (not judged), or `None` (none).
    """

    label: str
    value: torch.Tensor
    bound: torch.Tensor
    verifiable: torch.Tensor
    undefined: torch.Tensor | None = None

    @classmethod
    def of(cls, label: str, value: torch.Tensor, tb: TensorBound) -> Side:
        """Pair a run's tensor with the `TensorBound` of its own recipe."""
        return cls(label, value, tb.bound, tb.verifiable, tb.undefined)


def compare_pair(tensor: str, a: Side, b: Side, exact: torch.Tensor) -> Comparison:
    """Judge |a - b| against B_a + B_b (see the module docstring).

    Args:
        tensor: The tensor's name.
        a: The run judged (the comparison's subject).
        b: The run it is judged against.
        exact: The exact value (float64), to tell an honest overflow from a failure.

    Returns:
        The `Comparison` (reference ``"pair:<b.label>"``).
    """
    reference = f"pair:{b.label}"
    wrong = shape_problem(a.value, exact) or shape_problem(b.value, exact)
    if wrong is not None:
        unfit = Comparison(tensor, a.label, reference, "failed", math.inf, reason=wrong)
        dtype = a.value.dtype if isinstance(a.value, torch.Tensor) else exact.dtype
        return replace(unfit, severity=severity(unfit, dtype))
    x = a.value.detach().to(torch.float64)
    y = b.value.detach().to(device=x.device, dtype=torch.float64)
    numel = x.numel()
    if numel == 0:
        return Comparison(tensor, a.label, reference, "held", 0.0)
    allowed = a.bound + b.bound
    limit = min(torch.finfo(a.value.dtype).max, torch.finfo(b.value.dtype).max)
    representable = exact.abs() + torch.nan_to_num(allowed, posinf=0.0) < limit
    undefined = torch.zeros_like(x, dtype=torch.bool)
    for side in (a, b):
        if side.undefined is not None:
            undefined = undefined | side.undefined.to(x.device)
    judged = a.verifiable & b.verifiable & representable & torch.isfinite(allowed) & ~undefined
    both = torch.isfinite(x) & torch.isfinite(y)
    nonfinite = (torch.isfinite(x) != torch.isfinite(y)) & judged
    err = torch.where(both, (x - y).abs(), 0.0)
    ratio = torch.where(judged, safe_ratio(err, allowed), 0.0)
    ratio = torch.where(nonfinite, torch.inf, ratio)
    index = argmax_index(ratio)
    deciding = float(ratio[index])
    comparison = Comparison(
        tensor=tensor,
        subject=a.label,
        reference=reference,
        status="held" if deciding <= FAIL_THRESHOLD else "failed",
        deciding=deciding,
        scores=Scores(r=deciding),
        worst=worst_at(index, x, y, allowed),
        counts=Counts(
            numel=numel,
            mismatched=int((ratio > 1).sum()),
            nonfinite=int(nonfinite.sum()),
            undefined=int(undefined.sum()),
            unverifiable=int((~judged & ~undefined).sum()),
        ),
    )
    if comparison.ok:
        return comparison
    # Ulps against another run are not a distance to the exact value, so only the severity.
    return replace(comparison, severity=severity(comparison, a.value.dtype))


__all__ = ["Side", "compare_pair"]
