# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's shared Hypothesis example database (``linattn-verify soak --example-db``).

Soak workers that share a database share their failures: a failing case found by one is saved
under its (kernel, property) pair, and every other worker replays it first, at its next visit of
that pair, before its own search (`linattn_verify.soak.replay_first`). The database is

* a directory (Hypothesis's `DirectoryBasedExampleDatabase`): by default ``<stem>.examples/``
  beside the state file (`default_example_db`), so workers whose states share a folder share it;
* ``redis://[user:password@]host[:port][/db]``: Hypothesis's `RedisExampleDatabase` over a
  ``redis.Redis`` client (``pip install 'linattn-verify[cluster]'``);
* ``none``: no database.

Each pair's entries live under a key of its own, `database_key`: the family, the kernel and the
property, and nothing else (not the seed, not the source of the search function), so the same
pair in any process on any machine finds the same entries and two pairs never share one. The
database keeps failures only (`SharedDatabase.pair`): Hypothesis's other entries (failing cases
it shrank past, high scorers of `hypothesis.target`) stay in the process. Workers that share a
database should draw the same sizes (``--max-seq-len``, ``--max-head-dim``): a saved case that a
worker's caps exclude replays as another case, which passes, and Hypothesis deletes the entry.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from linattn_verify.errors import InvalidArgument

KEY_PREFIX = b"linattn-verify/soak/v1"
"""The start of every pair's key; a new version starts a new corpus on purpose."""

REDIS_TIMEOUT = 10.0
"""Seconds a Redis connection or command may take before the worker gives up on it."""


def default_example_db(state_path: Path) -> Path:
    """The soak's default example database: ``soak.json`` -> ``soak.examples/`` beside it."""
    return state_path.with_name(f"{state_path.stem or state_path.name}.examples")


def database_key(family: str, kernel: str, property: str) -> bytes:
    """The database key of one (kernel, property) pair: the same in every process and machine."""
    # Readable in Redis (KEYS hypothesis-example:linattn-verify/*); the property, last, and the
    # family, first, hold no "/", so a kernel name with one ("torch/chunk") is unambiguous.
    return b"/".join([KEY_PREFIX, *(part.encode() for part in (family, kernel, property))])


@dataclass(frozen=True)
class ExampleDbSpec:
    """A parsed ``--example-db`` value.

    Attributes:
        kind: ``directory``, ``redis`` or ``none``.
        location: The directory (absolute), or the Redis URL as given; "" for ``none``.
    """

    kind: Literal["directory", "redis", "none"]
    location: str = ""

    def canonical(self) -> str:
        """The value to hand to another process: a directory as an absolute path."""
        return self.location or "none"

    def describe(self) -> str:
        """The value without a Redis password, for logs and the state file."""
        if self.kind != "redis":
            return self.location or "none"
        url = urllib.parse.urlsplit(self.location)
        host = url.netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit((url.scheme, host, url.path, "", ""))


def parse_example_db(text: str) -> ExampleDbSpec:
    """Parse an ``--example-db`` value: a directory, ``redis://host[:port][/db]`` or ``none``.

    Raises:
        InvalidArgument: naming ``--example-db``, if the value is none of those.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(
            f"Got --example-db {text!r}, but it must be a directory, "
            "redis://host[:port][/db] or none."
        )
    if text == "none":
        return ExampleDbSpec("none")
    if "://" not in text:
        path = Path(text).expanduser()
        if path.exists() and not path.is_dir():
            raise InvalidArgument(f"Got --example-db {text!r}, but it is a file, not a directory.")
        return ExampleDbSpec("directory", str(path.absolute()))
    url = urllib.parse.urlsplit(text)
    if url.scheme != "redis":
        raise InvalidArgument(
            f"Got --example-db {text!r}, but the only URL scheme it takes is redis:// "
            "(else a directory, or none)."
        )
    try:
        port = url.port
    except ValueError:  # not a number, or out of range
        port = 0
    db = url.path.strip("/")
    if not url.hostname or port == 0 or not (db == "" or db.isdigit()) or url.query:
        raise InvalidArgument(
            f"Got --example-db {text!r}, but a Redis database is redis://host[:port][/db], "
            "with a port in [1, 65535] and db a number."
        )
    return ExampleDbSpec("redis", text)


@functools.cache
def open_example_db(text: str) -> SharedDatabase | None:
    """The database of an ``--example-db`` value, opened once per process (`None` for none).

    A directory is created if missing; a Redis server must answer a ping.

    Raises:
        InvalidArgument: naming ``--example-db``, if the value is malformed, the directory
            cannot be created, the redis package is missing or the server does not answer.
    """
    spec = parse_example_db(text)
    if spec.kind == "none":
        return None
    if spec.kind == "directory":
        try:
            Path(spec.location).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgument(
                f"Got --example-db {text!r}, but the directory cannot be created: {exc}."
            ) from None
        return SharedDatabase(DirectoryBasedExampleDatabase(spec.location), spec.describe())
    return SharedDatabase(_redis_database(spec), spec.describe())


def _redis_database(spec: ExampleDbSpec) -> ExampleDatabase:
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise InvalidArgument(
            f"Got --example-db {spec.describe()}, but the redis package is not installed: "
            "pip install 'linattn-verify[cluster]'."
        ) from None
    client = redis.Redis.from_url(
        spec.location, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        raise InvalidArgument(
            f"Got --example-db {spec.describe()}, but no Redis server answers there: {exc}"
        ) from None
    return RedisExampleDatabase(client)


@dataclass
class SharedDatabase:
    """A shared example database as one process sees it: which entries it has replayed.

    Attributes:
        database: The Hypothesis database.
        description: What ``--example-db`` named (without a password).
        seen: Per key, the entries this process replayed or saved itself.
    """

    database: ExampleDatabase
    description: str
    seen: dict[bytes, set[bytes]] = field(default_factory=dict)

    def unseen(self, key: bytes) -> list[bytes]:
        """The failures saved under ``key`` that this process has not replayed, simplest first."""
        known = self.seen.get(key, set())
        # Hypothesis's own order: shorter choice sequences are simpler cases.
        return sorted((v for v in self.database.fetch(key) if v not in known), key=_shortlex)

    def pair(self, key: bytes, *, replay: bytes | None = None) -> ExampleDatabase:
        """The database of one search of the pair ``key``: it replays ``replay``, if given."""
        if replay is not None:
            self.seen.setdefault(key, set()).add(replay)
        return _PairFailures(self, key, replay)


def _shortlex(value: bytes) -> tuple[int, bytes]:
    return (len(value), value)


class _PairFailures(ExampleDatabase):
    """One search's view of a pair's failures in a `SharedDatabase`.

    Hypothesis asks for what to replay by the pair's key and gets ``replay`` only: one failure
    per search, so two saved failures of one property are never reported as one. It saves what
    it found under the pair's key; its own sub-keys (``<key>.secondary`` for the cases it shrank
    past, ``<key>.pareto`` for `hypothesis.target`'s best) are dropped, so the shared database
    holds failures only.
    """

    def __init__(self, shared: SharedDatabase, key: bytes, replay: bytes | None) -> None:
        super().__init__()
        self.shared, self.key, self.replay = shared, key, replay

    def fetch(self, key: bytes) -> Iterable[bytes]:
        if key == self.key and self.replay is not None:
            yield self.replay

    def save(self, key: bytes, value: bytes) -> None:
        if key == self.key:
            # What this process found it need not replay.
            self.shared.seen.setdefault(key, set()).add(value)
            self.shared.database.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        # Hypothesis deletes a replayed failure that no longer fails: the kernel was fixed.
        if key == self.key:
            self.shared.database.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        # A failure shrunk past moves to a sub-key, which is not kept.
        if src == self.key:
            self.delete(src, value)
        if dest == self.key:
            self.save(dest, value)


__all__ = [
    "KEY_PREFIX",
    "ExampleDbSpec",
    "SharedDatabase",
    "database_key",
    "default_example_db",
    "open_example_db",
    "parse_example_db",
]
