# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The first rung of the result model: statuses, scores and one tensor's `Comparison`.

Comparisons are built by `linattn_verify.compare` and rendered by `linattn_verify.results.message`;
the later rungs (`linattn_verify.results.verdicts`) hold them. This module imports no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

Status = Literal[
    "held",
    "failed",
    "not_applicable",
    "not_run",
    "undefined",
    "out_of_contract",
    "ill_conditioned",
    "within_rounding",
]
"""How a property came out on a case, or over a search.

``held`` and ``failed`` are the verdicts on a kernel; ``not_applicable``: the property says
nothing about this kernel or case (the reason says why); ``not_run``: a search stopped before
reaching it. ``undefined`` (the exact result is undefined there), ``out_of_contract`` (outside
what the kernel declares it supports) and ``ill_conditioned`` (the bound cannot decide) name
cases that are neither a pass nor a defect. ``within_rounding``: an exactness property whose
bit-for-bit form the kernel did not promise (docs/design.md, "Exact properties") found the
bits different but every difference within the error bound: not a defect, and not the exact
identity either; the reason names the declaration that would make it strict."""

STATUSES: tuple[Status, ...] = get_args(Status)

TensorStatus = Literal["held", "failed"]
"""How one tensor of one comparison came out."""

Severity = Literal["realistic", "extreme-range"]
"""Whether a failure lies at magnitudes models produce (see `linattn_verify.triage`)."""

FAIL_THRESHOLD = 2.0
"""The largest admissible deciding score against a bound (r, η, or the pair ratio).

The bounds are rigorous to first order (docs/error-model.md §7); S = 2 absorbs the second-order
terms. A bitwise comparison admits nothing: its threshold is 0."""


def _number(value: Any) -> float | None:
    """Read a JSON score back: None stays None; "inf", "nan" strings become floats."""
    return None if value is None else float(value)


def _plain(value: float | None) -> float | str | None:
    """A float as JSON allows it: inf and NaN as strings ``float()`` parses back."""
    if value is None:
        return None
    return float(value) if math.isfinite(value) else str(float(value))


@dataclass(frozen=True)
class Scores:
    """What a comparison measured, beside its deciding score.

    Attributes:
        r: Largest error score: |x̂ - x| / B against the oracle, |a - b| / (B_a + B_b) between
            two runs, the greatest absolute difference for a bitwise comparison.
        p999_r: 99.9th percentile of the per-element r (oracle comparisons), else `None`.
        eta: Largest residual ratio η of a normalized output, else `None`.
        rho: Largest ρ = |x̂ - x| / (u M) (about √c for a correct kernel), else `None`.
        median_rho: Median ρ, else `None`.
        rho_over_sqrt_c: Largest ρ / √c, else `None`.
        eps_influence: Largest eps / Z of a normalized output, else `None`.
        correctly_rounded: Share of elements correctly rounded to a 16-bit output dtype, else
            `None` (`linattn_verify.compare.ulps`).
        faithfully_rounded: Share of elements faithfully rounded to it, else `None`.
        max_ulps: Largest error in its ulps, else `None`.
        bias: Signed mean error in units of the mean bound, Σ(x̂ - x) / Σ B, else `None`
            (`linattn_verify.compare.oracle.signed_bias`).
        bias_t: Its size against the spread of the errors, Σ(x̂ - x) / sqrt(Σ(x̂ - x)²), else
            `None`: about N(0, 1) for unbiased independent rounding, about sqrt(n) when every
            error has one sign.
        relative_error: Largest |x̂ - x| over the largest |x| of the elements judged against an
            exact value (inf on a wrong non-finite value), else `None`: accuracy on the
            tensor's own scale, which ranks kernels of different recipes on the same case
            (their r are against different bounds).
    """

    r: float = 0.0
    p999_r: float | None = None
    eta: float | None = None
    rho: float | None = None
    median_rho: float | None = None
    rho_over_sqrt_c: float | None = None
    eps_influence: float | None = None
    correctly_rounded: float | None = None
    faithfully_rounded: float | None = None
    max_ulps: float | None = None
    bias: float | None = None
    bias_t: float | None = None
    relative_error: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the scores that were measured (no `None` values)."""
        return {k: _plain(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scores:
        """Read `to_json`'s output back."""
        return cls(**{k: _number(v) for k, v in data.items()})  # type: ignore[arg-type]


@dataclass(frozen=True)
class Worst:
    """The element a comparison is decided at.

    Attributes:
        index: Its index in the tensor.
        actual: The judged run's value there.
        expected: The reference's value there (the oracle, the other run, the expected bits).
        allowed: The absolute difference allowed there (B, B_a + B_b, or 0 for bitwise).
    """

    index: tuple[int, ...]
    actual: float
    expected: float
    allowed: float

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "index": list(self.index),
            "actual": _plain(self.actual),
            "expected": _plain(self.expected),
            "allowed": _plain(self.allowed),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Worst:
        """Read `to_json`'s output back."""
        return cls(
            index=tuple(int(i) for i in data["index"]),
            actual=float(data["actual"]),
            expected=float(data["expected"]),
            allowed=float(data["allowed"]),
        )


@dataclass(frozen=True)
class Counts:
    """How many elements fell where.

    Attributes:
        numel: Elements compared.
        mismatched: Judged elements beyond their allowance (r > 1, ratio > 1, bits differ).
        nonfinite: Judged elements finite on one side only (never allowed).
        undefined: Elements whose exact value is undefined (an exactly zero exact denominator, or
            a gradient depending on one): never judged against an exact value, only against
            the value the kernel declares there (docs/design.md §3).
        unverifiable: Elements the bound cannot judge (infinite bound), not judged by r.
    """

    numel: int = 0
    mismatched: int = 0
    nonfinite: int = 0
    undefined: int = 0
    unverifiable: int = 0

    def to_json(self) -> dict[str, int]:
        """Return a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Counts:
        """Read `to_json`'s output back."""
        return cls(**{k: int(v) for k, v in data.items()})


@dataclass(frozen=True)
class Comparison:
    """One tensor of one property on one case, judged against one reference.

    Attributes:
        tensor: The tensor (``"o"``, ``"final_state"``, ``"dq"``, ...), with a qualifier where a
            property compares the same tensor more than once (``"o[t<=5]"``).
        subject: The run judged (a kernel's name, ``"split run"``, ...).
        reference: ``"oracle"``, ``"pair:<the other run>"`` or ``"bitwise:<condition>"``.
        status: ``held`` or ``failed``.
        deciding: The score the rule is decided on: max(r, η) against the oracle, the pair ratio
            between runs, the greatest absolute difference bit for bit (inf on any
            finite/non-finite mismatch or a shape or dtype that differs).
        scores: Everything else measured.
        worst: Where ``deciding`` is reached, or `None` (nothing to compare, wrong shape).
        counts: Element counts.
        reason: Why the values could not be compared (a wrong shape, type or dtype), else `None`.
        severity: For a failed bound comparison, ``"realistic"`` or ``"extreme-range"``
            (`linattn_verify.triage.severity`), else `None`.
    """

    tensor: str
    subject: str
    reference: str
    status: TensorStatus
    deciding: float
    scores: Scores = Scores()
    worst: Worst | None = None
    counts: Counts = Counts()
    reason: str | None = None
    severity: Severity | None = None

    @property
    def ok(self) -> bool:
        """Whether the tensor held."""
        return self.status == "held"

    @property
    def kind(self) -> str:
        """``"oracle"``, ``"pair"`` or ``"bitwise"``."""
        return self.reference.partition(":")[0]

    @property
    def other(self) -> str:
        """The other run of a pairwise comparison, or the condition of a bitwise one."""
        return self.reference.partition(":")[2]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "tensor": self.tensor,
            "subject": self.subject,
            "reference": self.reference,
            "status": self.status,
            "deciding": _plain(self.deciding),
            "scores": self.scores.to_json(),
            "worst": None if self.worst is None else self.worst.to_json(),
            "counts": self.counts.to_json(),
            "reason": self.reason,
            "severity": self.severity,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        """Read `to_json`'s output back."""
        worst = data.get("worst")
        return cls(
            tensor=str(data["tensor"]),
            subject=str(data["subject"]),
            reference=str(data["reference"]),
            status=data["status"],
            deciding=float(data["deciding"]),
            scores=Scores.from_json(data.get("scores", {})),
            worst=None if worst is None else Worst.from_json(worst),
            counts=Counts.from_json(data.get("counts", {})),
            reason=data.get("reason"),
            severity=data.get("severity"),
        )


def worst_of(comparisons: Iterable[Comparison]) -> Comparison | None:
    """Return the comparison closest to (or furthest past) failing: failed first, then deciding.

    Bitwise comparisons rank after bound comparisons with the same status, since their deciding
    score is an absolute difference rather than a ratio to an allowance.
    """
    return max(
        comparisons,
        key=lambda c: (not c.ok, c.kind != "bitwise", _rankable(c.deciding)),
        default=None,
    )


def _rankable(value: float) -> float:
    return math.inf if math.isnan(value) else value


_BASE_TENSOR = re.compile(r"[A-Za-z_]\w*")


def base_tensor(name: str) -> str:
    """The tensor a comparison judges, without the part or combination its name adds.

    ``o[t>=7]`` (a slice), ``o(-2·(v1, S1) + 4·(v2, S2))`` (a property's combination of runs) and
    ``o`` are all ``o``: one defect of o shows in each (one finding), and a tensor named by a
    result (``uncertified``) is every comparison of it.
    """
    match = _BASE_TENSOR.match(name)
    return match.group(0) if match else name


__all__ = [
    "FAIL_THRESHOLD",
    "STATUSES",
    "Comparison",
    "Counts",
    "Scores",
    "Severity",
    "Status",
    "TensorStatus",
    "Worst",
    "base_tensor",
    "worst_of",
]
