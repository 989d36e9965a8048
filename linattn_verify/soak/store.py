# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's state in SQLite: one transaction per visit, and a log that counts each visit once.

The tables (schema version `STORE_SCHEMA`)::

    meta        (key, value)      format, schema, seed (text: seeds pass 64 bits), created,
                                  migrated_from and migrated_sha256 (a store made from a JSON state)
    pairs       (kernel, property, visits, examples, not_applicable, within_rounding, seconds)
                                  in the order first recorded (rowid)
    visits      (kernel, property, number, seed, examples, seconds, invocation, recorded_at)
                                  the exactly-once log, keyed by (kernel, property, number);
                                  examples is NULL for a visit migrated from a JSON state
    failures    (id, kernel, property, visit, seed, case_text, message, failure_file,
                 examples_before, found_at, error)          in the order found
    invocations (id, started, seconds, visits, stopped, versions, settings)  JSON text columns

`SoakStore.record` writes a visit's result in one transaction: its row in ``visits``, its pair's
counts, its failure when the case is new, and the invocation's totals. A result whose key is in
``visits`` already (a task that ran twice, a driver that retried) changes nothing. The journal is
a write-ahead log (WAL): a reader (`SoakStore.snapshot`, one read transaction) sees the state as
of the last committed visit, never half of one, and does not block the writer; a crash loses at
most the visits whose results were not yet recorded. Each commit is synced to disk
(``synchronous=FULL``), so a power cut loses no recorded visit either.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

from linattn_verify.errors import InvalidArgument
from linattn_verify.soak._sql import (
    SQLITE_HEADER,
    TABLES,
    connect,
    failure_key,
    failure_of,
    failure_row,
    invocation_row,
    is_sqlite,
    read_pair,
    write_pair,
)
from linattn_verify.soak.state import (
    Invocation,
    PairState,
    SoakFailure,
    SoakState,
    SoakStateError,
    VisitResult,
    utc_now,
    visit_seed,
)

STORE_FORMAT = "linattn-verify-soak-store"
"""The ``format`` row of a store's ``meta`` table: anything else is not ours."""

STORE_SCHEMA = 1
"""Version of the tables; bumped when they change."""

_ADVICE = "move it away or pass another --state"


@dataclass(frozen=True)
class Recorded:
    """What `SoakStore.record` did with a visit's result.

    Attributes:
        counted: `False` when the visit was recorded already (nothing changed), else `True`.
        pair: The pair's state after the transaction.
        new_failure: The failure it recorded, or `None` (none found, a case already recorded,
            or not counted).
    """

    counted: bool
    pair: PairState
    new_failure: SoakFailure | None


@dataclass(frozen=True)
class LoggedVisit:
    """One row of the exactly-once log.

    Attributes:
        kernel: The kernel's name.
        property: The property's name.
        number: The pair's visit (from 1).
        seed: Its Hypothesis seed.
        examples: Cases it tried, or `None` for a visit migrated from a JSON state.
        invocation: The id of the invocation that recorded it (from 1, oldest first), or `None`
            for a migrated visit.
    """

    kernel: str
    property: str
    number: int
    seed: int
    examples: int | None
    invocation: int | None


class SoakStore:
    """A soak state kept in SQLite (module docstring). Open with `create` or `open`; close it.

    One process writes (the soak's driver, under `linattn_verify.soak.files.locked`); any number
    read.
    """

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self.path = path

    @classmethod
    def create(cls, path: Path, *, seed: int) -> SoakStore:
        """Make a new, empty store at ``path`` with base seed ``seed``.

        Raises:
            InvalidArgument: if ``seed`` is not an int >= 0.
            SoakStateError: if there is a file at ``path`` already.
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidArgument(f"Expected an int >= 0 but got seed={seed!r}.")
        if path.exists():
            raise SoakStateError(f"Got --state {path}, but a file is there already; {_ADVICE}.")
        path.parent.mkdir(parents=True, exist_ok=True)
        store = cls(connect(path), path)
        with store._writing() as db:
            for statement in filter(str.strip, TABLES.split(";")):
                db.execute(statement)
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("format", STORE_FORMAT),
                    ("schema", str(STORE_SCHEMA)),
                    ("seed", str(seed)),
                    ("created", utc_now()),
                ],
            )
        return store

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False) -> SoakStore:
        """Open the store at ``path`` (``readonly``: to read, never write).

        Raises:
            SoakStateError: naming ``path``, if there is no file or it is not a store this
                version can read.
        """
        if not path.is_file():
            raise SoakStateError(f"Got --state {path}, but there is no such file.")
        if not is_sqlite(path):
            # Connecting would make an empty file a database: leave what is not ours alone.
            raise SoakStateError(
                f"Got --state {path}, but it is not a soak state (not a SQLite database); "
                f"{_ADVICE}."
            )
        store = cls(connect(path, readonly=readonly), path)
        try:
            meta = store._meta()
        except sqlite3.DatabaseError as exc:
            store.close()
            raise SoakStateError(
                f"Got --state {path}, but it is not a soak state ({exc}); {_ADVICE}."
            ) from None
        problem = None
        if meta.get("format") != STORE_FORMAT:
            problem = f"format {meta.get('format')!r}, expected {STORE_FORMAT!r}"
        elif meta.get("schema") != str(STORE_SCHEMA):
            problem = f"schema {meta.get('schema')!r}; this version reads {STORE_SCHEMA}"
        if problem is not None:
            store.close()
            raise SoakStateError(
                f"Got --state {path}, but it is not a soak state this version can read "
                f"({problem}); {_ADVICE}."
            )
        return store

    def close(self) -> None:
        """Close the connection (a writer's last close folds the WAL back into the file)."""
        self._db.close()

    def __enter__(self) -> SoakStore:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def meta(self, key: str) -> str | None:
        """A row of the ``meta`` table (module docstring), or `None`."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @property
    def seed(self) -> int:
        """The base seed of every visit (`visit_seed`)."""
        return int(self.meta("seed") or 0)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, taken at once (``IMMEDIATE``): all of it commits, or none."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query in it sees the same committed state."""
        self._db.execute("BEGIN")
        try:
            yield self._db
        finally:
            self._db.execute("COMMIT")

    def snapshot(self) -> SoakState:
        """The whole state as one `SoakState`, read in one transaction."""
        with self._reading() as db:
            seed = int(self._meta()["seed"])
            failures: dict[tuple[str, str], list[SoakFailure]] = {}
            for row in db.execute(
                "SELECT kernel, property, visit, seed, case_text, message, failure_file, "
                "examples_before, found_at, error FROM failures ORDER BY id"
            ):
                failures.setdefault((row[0], row[1]), []).append(failure_of(row[2:]))
            pairs = tuple(
                PairState(
                    kernel=row[0],
                    property=row[1],
                    visits=row[2],
                    examples=row[3],
                    not_applicable=row[4],
                    within_rounding=row[5],
                    seconds=row[6],
                    failures=tuple(failures.get((row[0], row[1]), ())),
                )
                for row in db.execute(
                    "SELECT kernel, property, visits, examples, not_applicable, "
                    "within_rounding, seconds FROM pairs ORDER BY rowid"
                )
            )
            invocations = tuple(
                Invocation(
                    started=row[0],
                    seconds=row[1],
                    visits=row[2],
                    stopped=row[3],
                    versions=json.loads(row[4]),
                    settings=json.loads(row[5]),
                )
                for row in db.execute(
                    "SELECT started, seconds, visits, stopped, versions, settings "
                    "FROM invocations ORDER BY id"
                )
            )
        return SoakState(seed=seed, pairs=pairs, invocations=invocations)

    def visit_log(self) -> list[LoggedVisit]:
        """Every visit recorded, by pair (in the order first recorded) and number."""
        rows = self._db.execute(
            "SELECT v.kernel, v.property, v.number, v.seed, v.examples, v.invocation "
            "FROM visits v JOIN pairs p ON (p.kernel, p.property) = (v.kernel, v.property) "
            "ORDER BY p.rowid, v.number"
        )
        return [LoggedVisit(r[0], r[1], r[2], int(r[3]), r[4], r[5]) for r in rows]

    def done_visits(self) -> dict[tuple[str, str], set[int]]:
        """The visit numbers recorded, per (kernel, property)."""
        done: dict[tuple[str, str], set[int]] = {}
        for kernel, prop, number in self._db.execute("SELECT kernel, property, number FROM visits"):
            done.setdefault((kernel, prop), set()).add(number)
        return done

    def start_invocation(self, invocation: Invocation) -> int:
        """Record a new invocation; return its id (for `record` and `finish_invocation`)."""
        with self._writing() as db:
            cursor = db.execute(
                "INSERT INTO invocations (started, seconds, visits, stopped, versions, settings) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                invocation_row(invocation),
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def finish_invocation(self, invocation: int, *, seconds: float, stopped: str) -> None:
        """Say how long invocation ``invocation`` ran and why it stopped."""
        with self._writing() as db:
            db.execute(
                "UPDATE invocations SET seconds = ?, stopped = ? WHERE id = ?",
                (round(seconds, 3), stopped, invocation),
            )

    def record(
        self, result: VisitResult, *, invocation: int, invocation_seconds: float
    ) -> Recorded:
        """Count a visit's result once, in one transaction (module docstring).

        Args:
            result: What the visit found.
            invocation: The id of the invocation recording it (`start_invocation`).
            invocation_seconds: The invocation's wall time so far.

        Returns:
            What was recorded; ``counted`` is `False` when the visit was recorded already.
        """
        key = (result.kernel, result.property)
        with self._writing() as db:
            inserted = db.execute(
                "INSERT INTO visits (kernel, property, number, seed, examples, seconds, "
                "invocation, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (*key, result.number, str(result.seed), result.examples,
                 round(result.seconds, 3), invocation, utc_now()),
            ).rowcount  # fmt: skip
            before = read_pair(db, *key)
            if not inserted:
                return Recorded(False, before, None)
            new_failure = None
            if result.failure is not None and failure_key(result.failure) not in {
                failure_key(f) for f in before.failures
            }:
                new_failure = replace(result.failure, examples_before=before.examples)
                db.execute(
                    "INSERT INTO failures (kernel, property, visit, seed, case_text, message, "
                    "failure_file, examples_before, found_at, error) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, *failure_row(new_failure)),
                )
            after = replace(
                before,
                visits=before.visits + 1,
                examples=before.examples + result.examples,
                not_applicable=before.not_applicable + result.not_applicable,
                within_rounding=before.within_rounding + result.within_rounding,
                seconds=round(before.seconds + result.seconds, 3),
                failures=before.failures
                if new_failure is None
                else (*before.failures, new_failure),
            )
            write_pair(db, after)
            db.execute(
                "UPDATE invocations SET visits = visits + 1, seconds = ? WHERE id = ?",
                (round(invocation_seconds, 3), invocation),
            )
        return Recorded(True, after, new_failure)

    def import_state(self, state: SoakState, *, source: Path, digest: str) -> None:
        """Fill this new store with ``state`` (a JSON state of before), in one transaction.

        Each pair's visits 1..n enter the log (examples unknown: NULL), so that no later visit
        repeats their seeds; ``source`` and ``digest`` (its SHA-256) are kept in ``meta``.

        Raises:
            SoakStateError: if the store is not empty or its seed is not ``state.seed``.
        """
        if self.seed != state.seed or self.snapshot() != SoakState(seed=state.seed):
            raise SoakStateError(
                f"Got --state {self.path}, but it is not a new store of seed {state.seed}."
            )
        with self._writing() as db:
            for pair in state.pairs:
                write_pair(db, pair)
                db.executemany(
                    "INSERT INTO visits (kernel, property, number, seed, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [
                        (pair.kernel, pair.property, n,
                         str(visit_seed(state.seed, pair.kernel, pair.property, n)), utc_now())
                        for n in range(1, pair.visits + 1)
                    ],
                )  # fmt: skip
                db.executemany(
                    "INSERT INTO failures (kernel, property, visit, seed, case_text, message, "
                    "failure_file, examples_before, found_at, error) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(pair.kernel, pair.property, *failure_row(f)) for f in pair.failures],
                )
            db.executemany(
                "INSERT INTO invocations (started, seconds, visits, stopped, versions, settings) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [invocation_row(i) for i in state.invocations],
            )
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("migrated_from", str(source)), ("migrated_sha256", digest)],
            )


__all__ = [
    "SQLITE_HEADER",
    "STORE_FORMAT",
    "STORE_SCHEMA",
    "LoggedVisit",
    "Recorded",
    "SoakStore",
    "is_sqlite",
]
