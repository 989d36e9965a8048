# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's state: counts and failures per (kernel, property), across invocations.

The types here are the state as a document (`SoakState`, its JSON form `SoakState.to_json`, the
format of the state files of before the SQLite store and of ``soak --export``) and what a visit
returns (`VisitResult`); `linattn_verify.soak.store` keeps them in SQLite.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from linattn_verify.errors import InvalidArgument
from linattn_verify.results import PropertyVerdict, Status

STATE_FORMAT = "linattn-verify-soak"
"""The ``format`` field of a state file: anything else is not ours."""

STATE_VERSION = 1
"""Version of the state document; bumped when its fields change meaning."""

DEFAULT_STATE = Path(".linattn-soak.sqlite")
"""Where the state is kept when ``--state`` is not given (a SQLite store)."""

LEGACY_DEFAULT_STATE = Path(".linattn-soak.json")
"""The default of before the store: a JSON state there is migrated into `DEFAULT_STATE`."""

DEFAULT_KERNELS = ("triton/*", "torch/*", "fla/*")
"""What a soak visits by default: our Triton kernels, the torch references, FLA's if installed."""

DEFAULT_CHUNK_EXAMPLES = 10
"""Examples per visit when not told otherwise."""


class SoakStateError(InvalidArgument):
    """The state file is not a soak state this version can read (corrupt, foreign, newer)."""


class SoakBusy(InvalidArgument):
    """Another soak holds the state file."""


class SoakStopped(BaseException):
    """Raised inside a visit by `Stopper` on SIGINT or SIGTERM.

    A `BaseException`, not an `Exception`, so that Hypothesis does not take it for a failure of
    the example it interrupts (and shrink it) but lets it through.
    """


def utc_now() -> str:
    """The time now, UTC, to the second (ISO 8601 with Z)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def visit_seed(base: int, kernel: str, prop: str, visit: int) -> int:
    """The Hypothesis seed of a pair's ``visit``-th visit (from 1): distinct for every visit.

    ``(base << 64) + (visit << 32) + crc32("kernel property")``: the visit number makes each
    visit of a pair a new search; the checksum gives the pairs different searches.
    """
    checksum = zlib.crc32(f"{kernel} {prop}".encode())
    return (base << 64) + (visit << 32) + checksum


def failures_dir_of(state_path: Path) -> Path:
    """Where a soak saves its failing cases: ``soak.sqlite`` -> ``soak.failures/`` beside it.

    The folder is named after the stem, so a JSON state and the store migrated from it
    (``soak.json``, ``soak.sqlite``) share it.
    """
    return state_path.with_name(f"{state_path.stem or state_path.name}.failures")


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]``, checked to be of ``kind`` (a bool is not an int here)."""
    value = data[key]
    if isinstance(value, bool) and kind is not bool:
        raise TypeError(f"{key!r} is {value!r}, not a {kind}")
    if not isinstance(value, kind):
        raise TypeError(f"{key!r} is {value!r}, not a {kind}")
    return value


def _number(data: Mapping[str, Any], key: str) -> float:
    value = float(_field(data, key, (int, float)))
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{key!r} is {value!r}, not a finite number >= 0")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value: int = _field(data, key, int)
    if value < 0:
        raise ValueError(f"{key!r} is {value!r}, not a count")
    return value


@dataclass(frozen=True)
class SoakFailure:
    """One distinct failing case of a (kernel, property), as the soak found it.

    Attributes:
        visit: The pair's visit that found it (from 1).
        seed: That visit's Hypothesis seed (`visit_seed`).
        case: The minimal failing case (its spec's repr), or the last case tried when the
            harness itself failed.
        message: The failure report (with repro and replay line), or the harness's error.
        failure_file: The saved case, for ``linattn-verify replay``, else `None`.
        examples_before: Examples the pair had passed before that visit.
        found_at: When (UTC, ISO 8601).
        error: `True` when the harness itself failed, not the kernel (``message`` says how).
    """

    visit: int
    seed: int
    case: str
    message: str
    failure_file: str | None
    examples_before: int
    found_at: str
    error: bool = False

    @property
    def replay(self) -> str | None:
        """The command that re-runs the saved case, if one was saved."""
        return None if self.failure_file is None else f"linattn-verify replay {self.failure_file}"

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "visit": self.visit,
            "seed": self.seed,
            "case": self.case,
            "message": self.message,
            "failure_file": self.failure_file,
            "examples_before": self.examples_before,
            "found_at": self.found_at,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SoakFailure:
        """Read `to_json`'s output back (raises KeyError, TypeError or ValueError if malformed)."""
        return cls(
            visit=_count(data, "visit"),
            seed=_field(data, "seed", int),
            case=_field(data, "case", str),
            message=_field(data, "message", str),
            failure_file=_field(data, "failure_file", (str, type(None))),
            examples_before=_count(data, "examples_before"),
            found_at=_field(data, "found_at", str),
            error=_field(data, "error", bool),
        )


@dataclass(frozen=True)
class PairState:
    """What the soaks so far did to one (kernel, property).

    Attributes:
        kernel: The kernel's name.
        property: The property's name.
        visits: Visits completed.
        examples: Cases tried (shrinking included).
        not_applicable: Cases on which the property did not apply.
        seconds: Time spent in its visits.
        failures: Distinct failing cases, in the order found.
        within_rounding: Cases that came out ``within_rounding`` (bits differ from the exact
            identity, within the bound). Default: `0`.
    """

    kernel: str
    property: str
    visits: int = 0
    examples: int = 0
    not_applicable: int = 0
    seconds: float = 0.0
    failures: tuple[SoakFailure, ...] = ()
    within_rounding: int = 0

    @builtins.property
    def ok(self) -> bool:
        """Whether no case failed."""
        return not self.failures

    def verdict(self) -> PropertyVerdict:
        """The pair as a settled `PropertyVerdict` (its first failure's message and file)."""
        first = self.failures[0] if self.failures else None
        status: Status = "held" if first is None else "failed"
        return PropertyVerdict(
            kernel=self.kernel,
            property=self.property,
            status=status,
            examples=self.examples,
            not_applicable=self.not_applicable,
            within_rounding=self.within_rounding,
            seconds=round(self.seconds, 3),
            message="" if first is None else first.message,
            failure_file=None if first is None else first.failure_file,
        ).settled()

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "kernel": self.kernel,
            "property": self.property,
            "visits": self.visits,
            "examples": self.examples,
            "not_applicable": self.not_applicable,
            "within_rounding": self.within_rounding,
            "seconds": round(self.seconds, 3),
            "failures": [f.to_json() for f in self.failures],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PairState:
        """Read `to_json`'s output back (raises KeyError, TypeError or ValueError if malformed)."""
        return cls(
            kernel=_field(data, "kernel", str),
            property=_field(data, "property", str),
            visits=_count(data, "visits"),
            examples=_count(data, "examples"),
            not_applicable=_count(data, "not_applicable"),
            seconds=_number(data, "seconds"),
            failures=tuple(SoakFailure.from_json(f) for f in _field(data, "failures", list)),
            # Absent from state files written before the status existed.
            within_rounding=_count(data, "within_rounding") if "within_rounding" in data else 0,
        )


@dataclass(frozen=True)
class VisitResult:
    """What one visit's search found, before the store counts it (what a worker task returns).

    Attributes:
        kernel: The kernel's name.
        property: The property's name.
        number: The pair's visit it was (from 1).
        seed: Its Hypothesis seed (`visit_seed` of the number).
        examples: Cases tried (shrinking included).
        not_applicable: Cases on which the property did not apply.
        within_rounding: Cases within the bound whose bits differ from the exact identity.
        seconds: Time the search took.
        failure: The failure it found, or `None`; its ``examples_before`` is set when the store
            records it (the pair's count then), not by the search.
        folder: Where the visit saved its failing case, if it did (the driver removes it when the
            case is already recorded).
    """

    kernel: str
    property: str
    number: int
    seed: int
    examples: int
    not_applicable: int
    within_rounding: int
    seconds: float
    failure: SoakFailure | None = None
    folder: str | None = None


@dataclass(frozen=True)
class Invocation:
    """One ``linattn-verify soak`` process.

    Attributes:
        started: When it started (UTC, ISO 8601).
        seconds: Wall time it has run (updated after every visit).
        visits: Visits it completed.
        stopped: Why it stopped (``budget``, ``max_visits``, ``SIGINT``, ``SIGTERM``), or
            ``running``: still running, or killed without a chance to say so.
        versions: `linattn_verify._device.versions` of the process.
        settings: Its kernels, properties, examples per visit and case sizes.
    """

    started: str
    seconds: float = 0.0
    visits: int = 0
    stopped: str = "running"
    versions: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "visits": self.visits,
            "stopped": self.stopped,
            "versions": dict(self.versions),
            "settings": dict(self.settings),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Invocation:
        """Read `to_json`'s output back (raises KeyError, TypeError or ValueError if malformed)."""
        return cls(
            started=_field(data, "started", str),
            seconds=_number(data, "seconds"),
            visits=_count(data, "visits"),
            stopped=_field(data, "stopped", str),
            versions=dict(_field(data, "versions", dict)),
            settings=dict(_field(data, "settings", dict)),
        )


@dataclass(frozen=True)
class SoakState:
    """Everything the soaks on one state file have done.

    Attributes:
        seed: Base seed of every visit (`visit_seed`), fixed when the state is created.
        pairs: Every (kernel, property) visited so far, in the order first recorded (with
            workers, visits finish out of order).
        invocations: Every invocation, oldest first.
    """

    seed: int = 0
    pairs: tuple[PairState, ...] = ()
    invocations: tuple[Invocation, ...] = ()

    @property
    def wall_seconds(self) -> float:
        """Wall time of all invocations together."""
        return sum(i.seconds for i in self.invocations)

    @property
    def ok(self) -> bool:
        """Whether no pair has failed."""
        return all(p.ok for p in self.pairs)

    def pair(self, kernel: str, prop: str) -> PairState:
        """The state of (kernel, prop): the recorded one, or a fresh one."""
        for pair in self.pairs:
            if (pair.kernel, pair.property) == (kernel, prop):
                return pair
        return PairState(kernel, prop)

    def with_pair(self, new: PairState) -> SoakState:
        """The state with ``new`` recorded (replacing its earlier state, else appended)."""
        key = (new.kernel, new.property)
        if all((p.kernel, p.property) != key for p in self.pairs):
            return replace(self, pairs=(*self.pairs, new))
        return replace(
            self, pairs=tuple(new if (p.kernel, p.property) == key else p for p in self.pairs)
        )

    def with_invocation(self, invocation: Invocation, *, new: bool = False) -> SoakState:
        """The state with ``invocation`` appended (``new``) or replacing the last one."""
        kept = self.invocations if new else self.invocations[:-1]
        return replace(self, invocations=(*kept, invocation))

    def to_json(self) -> dict[str, Any]:
        """Return the state document."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "seed": self.seed,
            "wall_seconds": round(self.wall_seconds, 3),
            "pairs": [p.to_json() for p in self.pairs],
            "invocations": [i.to_json() for i in self.invocations],
        }

    @classmethod
    def from_json(cls, data: Any) -> SoakState:
        """Read `to_json`'s output back (raises KeyError, TypeError or ValueError if malformed)."""
        if not isinstance(data, dict):
            raise TypeError(f"the document is a {type(data).__name__}, not an object")
        seed: int = _field(data, "seed", int)
        if seed < 0:
            raise ValueError(f"'seed' is {seed!r}, not >= 0")
        pairs = tuple(PairState.from_json(p) for p in _field(data, "pairs", list))
        if len({(p.kernel, p.property) for p in pairs}) != len(pairs):
            raise ValueError("a (kernel, property) pair is recorded twice")
        return cls(
            seed=seed,
            pairs=pairs,
            invocations=tuple(Invocation.from_json(i) for i in _field(data, "invocations", list)),
        )


def load_state(path: Path) -> SoakState | None:
    """Read the JSON state at ``path``; `None` if there is no file there.

    The JSON state is the state file of before the store, and what ``soak --export`` writes.

    Raises:
        SoakStateError: naming ``path``, if it is not a soak state this version can read.
    """
    if not path.exists():
        return None
    advice = "move it away or pass another --state"
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SoakStateError(
            f"Got --state {path}, but it is not a soak state file ({exc}); {advice}."
        ) from None
    found = document.get("format") if isinstance(document, dict) else None
    if found != STATE_FORMAT:
        raise SoakStateError(
            f"Got --state {path}, but it is not a soak state file (format {found!r}, expected "
            f"{STATE_FORMAT!r}); {advice}."
        )
    if document.get("version") != STATE_VERSION:
        raise SoakStateError(
            f"Got --state {path} of version {document.get('version')!r}, but this version of "
            f"linattn-verify reads version {STATE_VERSION}; {advice}."
        )
    try:
        return SoakState.from_json(document)
    except (KeyError, TypeError, ValueError) as exc:
        raise SoakStateError(
            f"Got --state {path}, but it is corrupt ({type(exc).__name__}: {exc}); {advice}."
        ) from None


def save_state(state: SoakState, path: Path) -> None:
    """Write ``state`` to ``path`` as JSON, atomically (a reader or a kill never sees half a file).

    What ``soak --export`` writes; the soak itself keeps its state in the store.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as out:
        out.write(json.dumps(state.to_json(), indent=1) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


__all__ = [
    "DEFAULT_CHUNK_EXAMPLES",
    "DEFAULT_KERNELS",
    "DEFAULT_STATE",
    "LEGACY_DEFAULT_STATE",
    "STATE_FORMAT",
    "STATE_VERSION",
    "Invocation",
    "PairState",
    "SoakBusy",
    "SoakFailure",
    "SoakState",
    "SoakStateError",
    "SoakStopped",
    "VisitResult",
    "failures_dir_of",
    "load_state",
    "save_state",
    "utc_now",
    "visit_seed",
]
