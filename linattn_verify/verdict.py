# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The result of checking one property on one case and one kernel."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from linattn_verify.errors import PropertyViolation


@dataclass(frozen=True)
class PropertyResult:
    """What a property function returns.

    Attributes:
        property: The property's name (``<subject>_<relation>_<reference>``).
        kernel: The kernel's name.
        case: One-line description of the case (its repro).
        ok: Whether the property held (also `True` when it did not apply; see ``skipped``).
        message: The failure message (torch.testing style: what, where, by how much, allowed),
            or a one-line summary when it held.
        scores: Named scores, e.g. ``{"o.max_r": 0.02, "dq.max_r": 0.1}``.
        worst_index: Index of the worst element, when there is one.
        skipped: Why the property does not apply to this case and kernel, else `None`.
    """

    property: str
    kernel: str
    case: str
    ok: bool
    message: str = ""
    scores: Mapping[str, float] = field(default_factory=dict)
    worst_index: tuple[int, ...] | None = None
    skipped: str | None = None

    def report(self) -> str:
        """Return the message with the property, kernel and case."""
        status = "skipped" if self.skipped else ("held" if self.ok else "FAILED")
        head = f"{self.property} {status} for {self.kernel} [{self.case}]"
        body = self.skipped or self.message
        return f"{head}\n{body}" if body else head

    def raise_for_failure(self) -> None:
        """Raise `PropertyViolation` (with the report) unless the property held."""
        __tracebackhide__ = True
        if not self.ok:
            raise PropertyViolation(self.report())


__all__ = ["PropertyResult"]
