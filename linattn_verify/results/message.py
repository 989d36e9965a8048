# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The one mismatch-message builder, in the manner of torch.testing.

Any `Comparison` (oracle, pairwise, bitwise) renders as: what is not close to what, the count
of mismatched elements, the greatest score at its index with the actual and expected values and
what was allowed there, and the rule. The case is not repeated here: the runner prints it once,
with its repro and replay lines.
"""

from __future__ import annotations

from linattn_verify.results.comparison import FAIL_THRESHOLD, Comparison

EXPLAINED_BY_RECIPE = "consistent with"
"""How a recipe diagnosis begins when a change to the declared recipe explains the failure
(`linattn_verify.diagnosis`): such a finding is a declaration finding."""

BREACHED_DECLARATION = "where it declared"
"""The words of a kernel-failure message that names a declaration the output breaks (a NaN on
a 0/0 row of a kernel declared to return 0 there): the declaration, not the kernel, may be what
is wrong, so its finding is a declaration finding (`reporting.summary.finding_evidence`)."""


def _reference_words(c: Comparison) -> str:
    if c.kind == "oracle":
        return "the float64 oracle"
    if c.kind == "pair":
        return c.other
    return "the reference run"


def _headline(c: Comparison) -> str:
    if c.kind == "bitwise":
        condition = f" {c.other}" if c.other else ""
        return f"{c.subject} {c.tensor} is not bit-identical{condition}!"
    if c.kind == "pair":
        return f"{c.subject} and {c.other} disagree on {c.tensor}!"
    return f"{c.subject} {c.tensor} is not close to {_reference_words(c)}!"


def _rule(c: Comparison) -> str:
    if c.kind == "bitwise":
        return "0 allowed"
    return f"up to {FAIL_THRESHOLD:g} allowed"


def _score_words(c: Comparison) -> str:
    if c.kind == "bitwise":
        return "Greatest absolute difference"
    if c.kind == "pair":
        return "Greatest ratio |a - b| / (B_a + B_b)"
    if c.scores.eta is not None and c.scores.eta >= c.scores.r and c.scores.eta == c.deciding:
        return "Greatest residual ratio η"
    return "Greatest error score r = |actual - expected| / bound"


def mismatch_message(c: Comparison) -> str:
    """Render a comparison that failed (any kind) as a torch.testing-style message."""
    head = _headline(c)
    if c.reason is not None:
        return f"{head}\n{c.reason}"
    n, numel = c.counts.mismatched, c.counts.numel
    rule = "bits differ" if c.kind == "bitwise" else "score > 1"
    lines = [
        head,
        f"Mismatched elements ({rule}): {n} / {numel} ({100.0 * n / max(numel, 1):.1f}%)",
    ]
    if c.counts.nonfinite:
        lines.append(f"Finite/non-finite mismatches: {c.counts.nonfinite} (never allowed)")
    if c.worst is not None:
        w = c.worst
        allowance = {"oracle": "bound B", "pair": "B_a + B_b"}.get(c.kind)
        lines.append(
            f"{_score_words(c)}: {c.deciding:.3g} at index {w.index} ({_rule(c)}): "
            f"actual {w.actual:.9g}, expected {w.expected:.9g}, "
            f"|difference| {abs(w.actual - w.expected):.3g}"
            + ("" if allowance is None else f", {allowance} {w.allowed:.3g}")
        )
    details = []
    if c.kind == "oracle" and c.scores.rho is not None:
        details.append(f"ρ = err/(u·M): max {c.scores.rho:.3g}, median {c.scores.median_rho:.3g}")
    if c.counts.unverifiable:
        details.append(f"elements not judged (unverifiable): {c.counts.unverifiable}")
    if c.counts.undefined:
        details.append(f"elements undefined: {c.counts.undefined}")
    if c.scores.eps_influence is not None:
        details.append(f"largest eps influence eps/Z: {c.scores.eps_influence:.3g}")
    if details:
        lines.append("; ".join(details))
    if c.scores.max_ulps is not None:
        lines.append(
            f"In ulps of the output dtype: {_percent(c.scores.correctly_rounded)} correctly "
            f"rounded, {_percent(c.scores.faithfully_rounded)} faithfully rounded, worst "
            f"{c.scores.max_ulps:.3g} ulps"
        )
    if c.severity is not None:
        lines.append(f"Severity: {c.severity} ({SEVERITY_WORDS[c.severity]})")
    return "\n".join(lines)


SEVERITY_WORDS = {
    "realistic": "the worst element lies at magnitudes models produce",
    "extreme-range": "the worst element, or the case's inputs, lie below 1e-20 or within 16x "
    "of the dtype's largest value, outside what models produce",
}


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def summary_line(c: Comparison) -> str:
    """One line: the tensor, whether it held, its deciding score and against what."""
    against = {"oracle": "oracle", "pair": f"vs {c.other}", "bitwise": "bitwise"}[c.kind]
    status = "ok" if c.ok else "FAIL"
    if c.reason is not None:
        return f"{c.tensor} ({against}): {status}: {c.reason}"
    name = {"oracle": "r", "pair": "ratio", "bitwise": "max |diff|"}[c.kind]
    return f"{c.tensor} ({against}): {status} {name}={c.deciding:.3g}"


__all__ = ["mismatch_message", "summary_line"]
