# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Judge two tensors bit for bit: the exactness properties (causality, dyadic inputs, reruns).

The rule is `torch.equal`'s, with NaN equal to NaN: same shape, same dtype, same values. The
deciding score is the greatest absolute difference (0 when identical; inf when a shape or dtype
differs or one side is finite where the other is not). Elements named ``undefined`` (whose value
a kernel that declared ``zero_denominator="any"`` may choose freely) are not compared, and are
counted.
"""

from __future__ import annotations

import math

import torch

from linattn_verify.compare._elementwise import argmax_index, shape_problem, worst_at
from linattn_verify.results import Comparison, Counts, Scores


def bitwise_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Return where ``actual`` and ``expected`` differ: `torch.equal`'s rule, NaN equal to NaN."""
    a, e = actual.detach(), expected.detach().to(actual.device)
    if a.dtype != e.dtype or a.shape != e.shape:
        return torch.ones((), dtype=torch.bool, device=a.device).expand(
            a.shape if a.numel() else (1,)
        )
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    return ~same


def compare_bitwise(
    tensor: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    subject: str = "kernel",
    condition: str = "",
    undefined: torch.Tensor | None = None,
) -> Comparison:
    """Judge ``actual`` against ``expected`` bit for bit.

    Args:
        tensor: What is compared (``"o"``, ``"o[t<=5]"``, ``"input q"``...).
        actual: The run judged.
        expected: What it must equal.
        subject: Who computed ``actual``. Default: `"kernel"`.
        condition: What changed between the two, for the message (``"when inputs after t=5
            change"``). Default: `""`.
        undefined: Elements not compared (whose exact value is undefined and which the kernel
            may return as it likes), counted as ``undefined``; `None`: none. Default: `None`.

    Returns:
        The `Comparison` (reference ``"bitwise:<condition>"``).
    """
    reference = f"bitwise:{condition}"
    wrong = shape_problem(actual, expected, dtype=expected.dtype)
    if wrong is not None:
        return Comparison(tensor, subject, reference, "failed", math.inf, reason=wrong)
    numel = actual.numel()
    bad = bitwise_mismatch(actual, expected)
    skipped = 0
    if undefined is not None:
        undefined = undefined.to(bad.device).expand_as(bad)
        bad = bad & ~undefined
        skipped = int(undefined.sum())
    if numel == 0 or not bool(bad.any()):
        counts = Counts(numel=numel, undefined=skipped)
        return Comparison(tensor, subject, reference, "held", 0.0, counts=counts)
    a64, e64 = actual.detach().double(), expected.detach().double().to(actual.device)
    diff = torch.where(bad, (a64 - e64).abs(), 0.0).nan_to_num(nan=math.inf)
    index = argmax_index(diff)
    deciding = float(diff[index])
    nonfinite = bad & (torch.isfinite(a64) != torch.isfinite(e64))
    return Comparison(
        tensor=tensor,
        subject=subject,
        reference=reference,
        status="failed",
        deciding=deciding,
        scores=Scores(r=deciding),
        worst=worst_at(index, a64, e64, torch.zeros_like(a64)),
        counts=Counts(
            numel=numel,
            mismatched=int(bad.sum()),
            nonfinite=int(nonfinite.sum()),
            undefined=skipped,
        ),
    )


__all__ = ["bitwise_mismatch", "compare_bitwise"]
