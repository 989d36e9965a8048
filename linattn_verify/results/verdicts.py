# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The later rungs of the result model: `PropertyResult`, `CaseRecord`, `PropertyVerdict`.

This module imports no torch.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from linattn_verify.results.comparison import (
    Comparison,
    Status,
    base_tensor,
    worst_of,
)


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
        uncertified: Of an ``ill_conditioned`` result, the tensors whose bound spans their
            whole scale (docs/error-model.md §8.6): they held, but no digit of them was
            certified; the other comparisons were. Empty otherwise.
    """

    property: str
    kernel: str
    case: str
    status: Status
    comparisons: tuple[Comparison, ...] = ()
    reason: str | None = None
    notes: tuple[str, ...] = ()
    diagnosis: str | None = None
    uncertified: tuple[str, ...] = ()

    @builtins.property
    def certified_any(self) -> bool:
        """Whether some comparison decided something: not every tensor is `uncertified`."""
        return any(base_tensor(c.tensor) not in self.uncertified for c in self.comparisons)

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
        from linattn_verify.results.message import mismatch_message, summary_line

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
            "uncertified": list(self.uncertified),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PropertyResult:
        """Read `to_json`'s output back (``diagnosis``, ``uncertified``: absent in older ones)."""
        return cls(
            property=str(data["property"]),
            kernel=str(data["kernel"]),
            case=str(data["case"]),
            status=data["status"],
            comparisons=tuple(Comparison.from_json(c) for c in data.get("comparisons", ())),
            reason=data.get("reason"),
            notes=tuple(data.get("notes", ())),
            diagnosis=data.get("diagnosis"),
            uncertified=tuple(data.get("uncertified", ())),
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


__all__ = ["CaseRecord", "PropertyResult", "PropertyVerdict", "judged_status"]
