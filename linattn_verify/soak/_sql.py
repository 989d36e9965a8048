# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The SQL of the soak's store (`linattn_verify.soak.store`): tables, connections, rows."""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

from linattn_verify.soak.state import Invocation, PairState, SoakFailure

TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE pairs (
    kernel TEXT NOT NULL, property TEXT NOT NULL, visits INTEGER NOT NULL,
    examples INTEGER NOT NULL, not_applicable INTEGER NOT NULL,
    within_rounding INTEGER NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (kernel, property));
CREATE TABLE visits (
    kernel TEXT NOT NULL, property TEXT NOT NULL, number INTEGER NOT NULL, seed TEXT NOT NULL,
    examples INTEGER, seconds REAL, invocation INTEGER, recorded_at TEXT NOT NULL,
    PRIMARY KEY (kernel, property, number)) WITHOUT ROWID;
CREATE TABLE failures (
    id INTEGER PRIMARY KEY, kernel TEXT NOT NULL, property TEXT NOT NULL,
    visit INTEGER NOT NULL, seed TEXT NOT NULL, case_text TEXT NOT NULL, message TEXT NOT NULL,
    failure_file TEXT, examples_before INTEGER NOT NULL, found_at TEXT NOT NULL,
    error INTEGER NOT NULL);
CREATE TABLE invocations (
    id INTEGER PRIMARY KEY, started TEXT NOT NULL, seconds REAL NOT NULL,
    visits INTEGER NOT NULL, stopped TEXT NOT NULL, versions TEXT NOT NULL,
    settings TEXT NOT NULL);
"""

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a file that begins as a SQLite database does."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def failure_key(failure: SoakFailure) -> tuple[bool, str]:
    """What makes a failure distinct: its case; for a harness error, the error."""
    return (failure.error, failure.message if failure.error else failure.case)


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL for a writer."""
    if readonly:
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro"
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
    db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
    except sqlite3.DatabaseError:
        # Not a database at all: `SoakStore.open` says so, naming the file.
        pass
    return db


def failure_of(row: Any) -> SoakFailure:
    """A `SoakFailure` from a row of ``failures``, from its ``visit`` column on."""
    visit, seed, case, message, failure_file, examples_before, found_at, error = row
    return SoakFailure(
        visit=visit,
        seed=int(seed),
        case=case,
        message=message,
        failure_file=failure_file,
        examples_before=examples_before,
        found_at=found_at,
        error=bool(error),
    )


def failure_row(failure: SoakFailure) -> tuple[Any, ...]:
    return (
        failure.visit,
        str(failure.seed),
        failure.case,
        failure.message,
        failure.failure_file,
        failure.examples_before,
        failure.found_at,
        int(failure.error),
    )


def invocation_row(invocation: Invocation) -> tuple[Any, ...]:
    return (
        invocation.started,
        round(invocation.seconds, 3),
        invocation.visits,
        invocation.stopped,
        json.dumps(dict(invocation.versions)),
        json.dumps(dict(invocation.settings)),
    )


def read_pair(db: sqlite3.Connection, kernel: str, prop: str) -> PairState:
    """The recorded state of (kernel, prop), a fresh one if there is none."""
    row = db.execute(
        "SELECT visits, examples, not_applicable, within_rounding, seconds FROM pairs "
        "WHERE kernel = ? AND property = ?",
        (kernel, prop),
    ).fetchone()
    failures = tuple(
        failure_of(r)
        for r in db.execute(
            "SELECT visit, seed, case_text, message, failure_file, examples_before, found_at, "
            "error FROM failures WHERE kernel = ? AND property = ? ORDER BY id",
            (kernel, prop),
        )
    )
    if row is None:
        return PairState(kernel, prop, failures=failures)
    visits, examples, not_applicable, within_rounding, seconds = row
    return PairState(
        kernel,
        prop,
        visits=visits,
        examples=examples,
        not_applicable=not_applicable,
        within_rounding=within_rounding,
        seconds=seconds,
        failures=failures,
    )


def write_pair(db: sqlite3.Connection, pair: PairState) -> None:
    """Record ``pair``'s counts (its failures are rows of their own)."""
    db.execute(
        "INSERT INTO pairs (kernel, property, visits, examples, not_applicable, "
        "within_rounding, seconds) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (kernel, property) DO UPDATE SET visits = excluded.visits, "
        "examples = excluded.examples, not_applicable = excluded.not_applicable, "
        "within_rounding = excluded.within_rounding, seconds = excluded.seconds",
        (pair.kernel, pair.property, pair.visits, pair.examples, pair.not_applicable,
         pair.within_rounding, pair.seconds),
    )  # fmt: skip


__all__ = [
    "SQLITE_HEADER",
    "TABLES",
    "connect",
    "failure_key",
    "failure_of",
    "failure_row",
    "invocation_row",
    "is_sqlite",
    "read_pair",
    "write_pair",
]
