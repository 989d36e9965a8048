# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The result model: one shape for every result, from one comparison to one verdict.

Data moves down this list once, and nothing re-derives what an earlier step already knew:

* `Comparison`: one tensor of one property on one case, against the oracle (``reference``
  ``"oracle"``), against another run (``"pair:<label>"``: |a - b| <= B_a + B_b) or bit for bit
  (``"bitwise:<condition>"``). Its ``deciding`` score is the one its rule is decided on.
* `PropertyResult`: one property on one case: a status, its comparisons, and the one-line
  ``reason`` no comparison carries (why it did not apply, what the kernel did wrong).
* `CaseRecord`: a `PropertyResult` as `run` and `check` record it (kernel, form, dtype, sizes,
  time, saved failure): what the run document's ``results.jsonl`` holds, one per line.
* `PropertyVerdict`: one kernel x property over a whole search.

Every type is frozen and has one ``to_json`` / ``from_json``; the writer, the summary, the plots
and the CLI read them by attribute. This module imports no torch.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
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


@dataclass(frozen=True)
class PropertyResult:
    """One property on one case and one kernel: what every property function returns.

    Attributes:
        property: The property's name.
        kernel: The kernel's name (several joined by ``+`` for a multi-kernel property).
        case: The case, on one line (its spec's repr, valid Python).
        status: See `Status`; ``failed`` exactly when a comparison failed or a finding was made.
        comparisons: The tensors compared.
        reason: Why the property did not apply, or what failed that no comparison carries (the
            kernel raised, returned a wrong shape, broke the calling convention), else `None`.
        notes: Context for a reader: the bound's recipe, what was left out and why.
        diagnosis: For a failure against a bound, the smallest change to the kernel's declared
            precision recipe under which it would pass, or why none explains it
            (`linattn_verify.diagnosis.diagnose`), else `None`. Default: `None`.
    """

    property: str
    kernel: str
    case: str
    status: Status
    comparisons: tuple[Comparison, ...] = ()
    reason: str | None = None
    notes: tuple[str, ...] = ()
    diagnosis: str | None = None

    @builtins.property
    def ok(self) -> bool:
        """Whether the property did not fail (it held, or did not apply, or could not decide)."""
        return self.status != "failed"

    @builtins.property
    def worst(self) -> Comparison | None:
        """The comparison that decides the outcome (see `worst_of`)."""
        return worst_of(self.comparisons)

    def message(self) -> str:
        """The failure message (failed comparisons, reason, notes, diagnosis), or a summary."""
        from linattn_verify.compare.message import mismatch_message, summary_line

        if self.status == "failed":
            parts = [mismatch_message(c) for c in self.comparisons if not c.ok]
            if self.reason:
                parts.append(self.reason)
            diagnosis = [] if self.diagnosis is None else [f"Diagnosis: {self.diagnosis}"]
            return "\n".join([*parts, *self.notes, *diagnosis])
        if self.status != "held":
            return self.reason or ""
        worst = self.worst
        head = [] if worst is None else [f"worst: {summary_line(worst)}"]
        return "\n".join([*head, *self.notes])

    def report(self) -> str:
        """The message under one head line naming the property, the kernel and the case."""
        head = f"{self.property} {self.status.upper() if not self.ok else self.status}"
        head += f" for {self.kernel} [{self.case}]"
        body = self.message()
        return f"{head}\n{body}" if body else head

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "property": self.property,
            "kernel": self.kernel,
            "case": self.case,
            "status": self.status,
            "comparisons": [c.to_json() for c in self.comparisons],
            "reason": self.reason,
            "notes": list(self.notes),
            "diagnosis": self.diagnosis,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PropertyResult:
        """Read `to_json`'s output back (``diagnosis`` may be absent: older documents)."""
        return cls(
            property=str(data["property"]),
            kernel=str(data["kernel"]),
            case=str(data["case"]),
            status=data["status"],
            comparisons=tuple(Comparison.from_json(c) for c in data.get("comparisons", ())),
            reason=data.get("reason"),
            notes=tuple(data.get("notes", ())),
            diagnosis=data.get("diagnosis"),
        )


def judged_status(comparisons: Sequence[Comparison], findings: Sequence[str] = ()) -> Status:
    """``failed`` when a comparison failed or there is a finding, else ``held``."""
    return "failed" if findings or any(not c.ok for c in comparisons) else "held"


@dataclass(frozen=True)
class CaseRecord:
    """One property evaluated on one case of one kernel, as `run` and `check` record it.

    Attributes:
        kernel: The kernel's name.
        form: The kernel's form (`None` for a kernel that declares none).
        property: The property's name.
        dtype: The case's input dtype.
        T: Sequence length.
        K: Key head dimension.
        V: Value head dimension.
        case: The case's spec (its repr, valid Python: the repro).
        status: The result's status.
        comparisons: The result's comparisons.
        reason: The result's reason, or the harness's own error on this case.
        notes: The result's notes.
        seconds: Time spent on the case.
        failure_file: The saved failing case (``linattn-verify replay``), else `None`.
        error: `True` when the harness itself failed on the case (``reason`` says how).
        diagnosis: The result's diagnosis (`PropertyResult.diagnosis`).
    """

    kernel: str
    form: str | None
    property: str
    dtype: str
    T: int
    K: int
    V: int
    case: str
    status: Status
    comparisons: tuple[Comparison, ...] = ()
    reason: str | None = None
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    failure_file: str | None = None
    error: bool = False
    diagnosis: str | None = None

    @classmethod
    def of(
        cls,
        result: PropertyResult,
        *,
        form: str | None,
        dtype: str,
        sizes: tuple[int, int, int],
        seconds: float,
        failure_file: str | None = None,
    ) -> CaseRecord:
        """Record ``result``; ``sizes`` is (T, K, V)."""
        T, K, V = sizes
        return cls(
            kernel=result.kernel,
            form=form,
            property=result.property,
            dtype=dtype,
            T=T,
            K=K,
            V=V,
            case=result.case,
            status=result.status,
            comparisons=result.comparisons,
            reason=result.reason,
            notes=result.notes,
            seconds=round(seconds, 3),
            failure_file=failure_file,
            diagnosis=result.diagnosis,
        )

    @builtins.property
    def ok(self) -> bool:
        """Whether the case did not fail."""
        return self.status != "failed"

    @builtins.property
    def result(self) -> PropertyResult:
        """The `PropertyResult` recorded."""
        return PropertyResult(
            property=self.property,
            kernel=self.kernel,
            case=self.case,
            status=self.status,
            comparisons=self.comparisons,
            reason=self.reason,
            notes=self.notes,
            diagnosis=self.diagnosis,
        )

    @builtins.property
    def worst(self) -> Comparison | None:
        """The deciding comparison (see `worst_of`)."""
        return worst_of(self.comparisons)

    @builtins.property
    def worst_score(self) -> float:
        """The deciding score of the worst comparison (0 when there is none)."""
        worst = self.worst
        return 0.0 if worst is None else worst.deciding

    def with_failure_file(self, path: str | None) -> CaseRecord:
        """Return the record naming where its failing case was saved."""
        return replace(self, failure_file=path)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (one line of ``results.jsonl``)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["comparisons"] = [c.to_json() for c in self.comparisons]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseRecord:
        """Read `to_json`'s output back."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["comparisons"] = tuple(Comparison.from_json(c) for c in data.get("comparisons", ()))
        values["notes"] = tuple(data.get("notes", ()))
        return cls(**values)


@dataclass(frozen=True)
class PropertyVerdict:
    """One property of one kernel over a whole search (every case it was tried on).

    Attributes:
        kernel: The kernel's name.
        property: The property's name.
        status: ``failed`` if any case failed; ``not_run`` if never tried; ``not_applicable``
            if it applied to no case; ``within_rounding`` if a case came out so (and none
            failed); else ``held``.
        examples: Cases tried (shrinking included).
        not_applicable: Cases on which the property did not apply.
        seconds: Time spent on the property.
        message: The failure report of the minimal failing case (with repro and replay), or,
            without a failure, the report of the first ``within_rounding`` case, or "".
        failure_file: The saved minimal failing case, else `None`.
        first_failure_seconds: Seconds from the start of the search to the first failing case.
        within_rounding: Cases that came out ``within_rounding``. Default: `0`.
    """

    kernel: str
    property: str
    status: Status
    examples: int = 0
    not_applicable: int = 0
    seconds: float = 0.0
    message: str = ""
    failure_file: str | None = None
    first_failure_seconds: float | None = None
    within_rounding: int = 0

    @builtins.property
    def ok(self) -> bool:
        """Whether the property did not fail."""
        return self.status != "failed"

    def counted(self, result: PropertyResult) -> PropertyVerdict:
        """This verdict with one more case that did not fail (``result``) counted.

        A ``within_rounding`` case's report becomes the message while nothing has failed.
        """
        rounding = result.status == "within_rounding"
        return replace(
            self,
            examples=self.examples + 1,
            not_applicable=self.not_applicable + (result.status == "not_applicable"),
            within_rounding=self.within_rounding + rounding,
            message=result.report() if rounding and not self.message else self.message,
        )

    @classmethod
    def of_cases(cls, records: Iterable[CaseRecord]) -> list[PropertyVerdict]:
        """One verdict per (kernel, property) of ``records``, sorted by kernel then property."""
        tallies: dict[tuple[str, str], PropertyVerdict] = {}
        for record in records:
            key = (record.kernel, record.property)
            verdict = tallies.get(key) or cls(record.kernel, record.property, "held")
            verdict = replace(verdict, seconds=round(verdict.seconds + record.seconds, 3))
            if record.ok:
                tallies[key] = verdict.counted(record.result)
                continue
            first_failure = verdict.status != "failed"
            tallies[key] = replace(
                verdict,
                status="failed",
                examples=verdict.examples + 1,
                message=record.result.report() if first_failure else verdict.message,
                failure_file=record.failure_file if first_failure else verdict.failure_file,
            )
        return [tallies[key].settled() for key in sorted(tallies)]

    def settled(self) -> PropertyVerdict:
        """The verdict with its final status: not run, not applicable, within rounding, held."""
        if self.status != "held":
            return self
        if self.examples == 0:
            return replace(self, status="not_run")
        if self.not_applicable >= self.examples:
            return replace(self, status="not_applicable")
        if self.within_rounding:
            return replace(self, status="within_rounding")
        return self

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PropertyVerdict:
        """Read `to_json`'s output back."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


__all__ = [
    "FAIL_THRESHOLD",
    "STATUSES",
    "CaseRecord",
    "Comparison",
    "Counts",
    "PropertyResult",
    "PropertyVerdict",
    "Scores",
    "Status",
    "TensorStatus",
    "Worst",
    "judged_status",
    "worst_of",
]
