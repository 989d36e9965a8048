# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Which files hold a soak state: the SQLite store, the JSON state of before, the lock.

A state is named by its stem: ``soak.sqlite`` is the store (`linattn_verify.soak.store`),
``soak.json`` the JSON state of before the store (migrated once, then left as it was),
``soak.failures/`` the failing cases (`failures_dir_of`), ``soak.sqlite.lock`` the writer's lock.

``--state PATH`` names the store (`store_path_of`) as follows:

- a SQLite file, or a missing path not ending in ``.json``: PATH is the store;
- a path ending in ``.json``, or an existing file that is not SQLite: the store is
  ``PATH.with_suffix(".sqlite")``.

When the store does not exist yet and a JSON state does (PATH itself, or ``<stem>.json`` beside
the store when it is a soak state), the soak migrates it (`open_state`): the new store holds its
counts, failures and invocations, and the JSON file is left as it was. When the store exists,
a JSON state named with it must be the one it was migrated from (same SHA-256): two different
states of one stem would share their failures folder and their visit seeds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from linattn_verify.soak.state import (
    STATE_FORMAT,
    SoakBusy,
    SoakState,
    SoakStateError,
    load_state,
)
from linattn_verify.soak.store import SoakStore, is_sqlite


def store_path_of(path: Path) -> Path:
    """The SQLite store that ``--state path`` names (module docstring)."""
    if is_sqlite(path):
        return path
    if path.suffix == ".json" or path.is_file():
        return path.with_suffix(".sqlite")
    return path


def legacy_json_of(path: Path) -> Path | None:
    """The JSON state of before that ``--state path`` names, if there is one.

    ``path`` itself when it is an existing file that is not SQLite (whatever it holds: reading
    it says whether it is a state); else ``<stem>.json`` beside the store when that file is a
    soak state.
    """
    if path.is_file() and not is_sqlite(path):
        return path
    sibling = store_path_of(path).with_suffix(".json")
    if sibling != path and sibling.is_file():
        try:
            document = json.loads(sibling.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if isinstance(document, dict) and document.get("format") == STATE_FORMAT:
            return sibling
    return None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def migrate(json_path: Path, store_path: Path) -> SoakState:
    """Write the JSON state at ``json_path`` into a new store at ``store_path``.

    The store is built beside it under a temporary name and renamed into place, so a crash
    leaves either no store or a whole one. ``json_path`` is left as it was.

    Raises:
        SoakStateError: naming ``json_path``, if it is not a soak state this version can read;
            naming ``store_path``, if a file is there already.
    """
    state = load_state(json_path)
    if state is None:
        raise SoakStateError(f"Got --state {json_path}, but there is no such file.")
    if store_path.exists():
        raise SoakStateError(f"Got --state {store_path}, but a file is there already.")
    building = store_path.with_name(f".{store_path.name}.{os.getpid()}.tmp")
    for leftover in (building, Path(f"{building}-wal"), Path(f"{building}-shm")):
        leftover.unlink(missing_ok=True)
    try:
        with SoakStore.create(building, seed=state.seed) as store:
            store.import_state(state, source=json_path, digest=_digest(json_path))
        os.replace(building, store_path)
    finally:
        building.unlink(missing_ok=True)
    return state


def open_state(path: Path, *, seed: int | None = None) -> tuple[SoakStore, str | None]:
    """The store of ``--state path`` for writing: opened, migrated from JSON, or created.

    Call it under `locked`. Returns the store and, when it migrated a JSON state, one line
    saying so (else `None`).

    Args:
        path: What ``--state`` named (module docstring).
        seed: The base seed of a new store (`None`: 0); an existing state keeps its own.
            Default: `None`.

    Raises:
        SoakStateError: if the state cannot be read, ``seed`` contradicts it, or a JSON state
            named with an existing store is not the one it was migrated from.
    """
    store_path = store_path_of(path)
    legacy = legacy_json_of(path)
    note = None
    if store_path.exists():
        store = SoakStore.open(store_path)
        if legacy is not None and store.meta("migrated_sha256") != _digest(legacy):
            store.close()
            raise SoakStateError(
                f"Got --state {path}, but {legacy} is not the JSON state {store_path} was "
                f"migrated from (it changed since, or {store_path} was not made from it): they "
                "would share their failures folder and visit seeds; move one of them away."
            )
    elif legacy is not None:
        state = migrate(legacy, store_path)
        examples = sum(p.examples for p in state.pairs)
        note = (
            f"linattn-verify soak: migrated the JSON state {legacy} ({len(state.pairs)} pairs, "
            f"{examples} examples, {len(state.invocations)} invocations) to {store_path}, which "
            f"holds the state from now on; {legacy} is left as it was."
        )
        store = SoakStore.open(store_path)
    else:
        store = SoakStore.create(store_path, seed=0 if seed is None else seed)
    if seed is not None and seed != (started := store.seed):
        store.close()
        raise SoakStateError(
            f"Got --seed {seed}, but --state {store_path} was started with seed {started}: "
            "resume without --seed, or start another state file."
        )
    return store, note


def state_source(path: Path) -> Path | None:
    """The file `read_state` reads for ``--state path``: the store, else a JSON state, or `None`."""
    store_path = store_path_of(path)
    if store_path.exists():
        return store_path
    return legacy_json_of(path)


def read_state(path: Path) -> SoakState | None:
    """The state ``--state path`` names, read without writing anything; `None` if there is none.

    The store when there is one (a snapshot: one read transaction, safe while a soak writes),
    else the JSON state of before, unmigrated.

    Raises:
        SoakStateError: naming the file, if it is not a soak state this version can read.
    """
    source = state_source(path)
    if source is None:
        return None
    if source == store_path_of(path):
        with SoakStore.open(source, readonly=True) as store:
            return store.snapshot()
    return load_state(source)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the state ``--state path`` names (``<store>.lock``).

    Raises:
        SoakBusy: if another process holds it.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock; soak unlocked
        yield
        return
    import fcntl

    store_path = store_path_of(path)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with store_path.with_name(f"{store_path.name}.lock").open("a") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SoakBusy(
                f"Got --state {path}, but another soak is running on it (it holds {lock.name})."
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


__all__ = [
    "legacy_json_of",
    "locked",
    "migrate",
    "open_state",
    "read_state",
    "state_source",
    "store_path_of",
]
