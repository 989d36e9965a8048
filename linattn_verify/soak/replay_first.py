# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A visit's search, with the failures other workers shared replayed first.

With a shared example database (`linattn_verify.example_db`), a visit first replays, one by
one and simplest first, the failures saved under its (kernel, property) pair that this process
has not replayed yet (`SharedDatabase.unseen`): the first that still fails is the visit's
failure, as a search's failure ends that search. A saved failure that no longer fails is
deleted from the database by Hypothesis (the kernel was fixed). Only when no saved failure
fails does the visit search its own seed, saving what it finds for the others.

A process replays each saved failure once: what it found itself, and what it replayed already,
it does not replay again, so a pair with a known failure is searched afresh at its next visit
instead of reporting that failure at every visit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from linattn_verify.checking import CheckListener
    from linattn_verify.example_db import SharedDatabase
    from linattn_verify.linear_attn.kernel import Kernel
    from linattn_verify.results import PropertyVerdict


def replay_then_search(
    prop: Callable[..., Any],
    kernel: Kernel,
    strategy: Any,
    *,
    database: SharedDatabase | None,
    key: bytes,
    seed: int,
    examples: int,
    verdict: PropertyVerdict,
    failures_dir: Path,
    started: float,
    listener: CheckListener,
    diagnosis_seconds: float | None,
) -> PropertyVerdict:
    """Replay the pair's shared failures (module docstring), then search ``seed`` unless one failed.

    The arguments are `checking.search_property`'s; ``database`` is the shared database (`None`:
    none, a plain search) and ``key`` the pair's key in it (`example_db.database_key`).

    Returns:
        ``verdict`` with every case run counted; a replayed failure's message says it was
        replayed.
    """
    from linattn_verify.checking import search_property

    def search(**database_args: Any) -> PropertyVerdict:
        return search_property(
            prop,
            kernel,
            strategy,
            seed=seed,
            examples=examples,
            verdict=verdict,
            failures_dir=failures_dir,
            started=started,
            listener=listener,
            diagnosis_seconds=diagnosis_seconds,
            **database_args,
        )

    if database is None:
        return search()
    for entry in database.unseen(key):
        verdict = search(
            database=database.pair(key, replay=entry), database_key=key, replay_only=True
        )
        if not verdict.ok:
            return replace(
                verdict,
                message=f"{verdict.message}\n\nReplayed first from the shared example "
                f"database {database.description}: a failing case saved there earlier.",
            )
    return search(database=database.pair(key), database_key=key)


__all__ = ["replay_then_search"]
