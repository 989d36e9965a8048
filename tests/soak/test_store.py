# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's SQLite store (`linattn_verify.soak.store`, `linattn_verify.soak.files`): a visit is
counted once, readers never see half of one, a killed writer loses only what it had not
committed, and a JSON state of before migrates with every count, failure and invocation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from linattn_verify.soak import (
    Invocation,
    SoakFailure,
    SoakStateError,
    SoakStore,
    VisitResult,
    load_state,
    open_state,
    read_state,
    save_state,
    state_source,
    store_path_of,
    visit_seed,
)

LEGACY = Path(__file__).parent / "data" / "legacy-soak-v1.json"
"""A state file written by the soak of before the store (2 kernels x 2 properties of a manifest,
one of them off by one, 2 invocations; `linattn-verify soak --manifest legacy.toml ...`)."""


def result(
    prop: str, number: int, *, examples: int = 3, failure: SoakFailure | None = None
) -> VisitResult:
    return VisitResult(
        kernel="torch/recurrent",
        property=prop,
        number=number,
        seed=visit_seed(0, "torch/recurrent", prop, number),
        examples=examples,
        not_applicable=1,
        within_rounding=0,
        seconds=0.25,
        failure=failure,
    )


def failure(case: str, number: int) -> SoakFailure:
    return SoakFailure(
        visit=number,
        seed=visit_seed(0, "torch/recurrent", "p", number),
        case=case,
        message=f"p FAILED for torch/recurrent [{case}]",
        failure_file=None,
        examples_before=0,
        found_at="2026-01-01T00:00:00Z",
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SoakStore]:
    created = SoakStore.create(tmp_path / "soak.sqlite", seed=0)
    yield created
    created.close()


def test_a_visit_recorded_twice_is_counted_once(store: SoakStore) -> None:
    invocation = store.start_invocation(Invocation(started="2026-01-01T00:00:00Z"))
    first = store.record(result("p", 1, failure=failure("A", 1)), invocation=invocation,
                         invocation_seconds=1.0)  # fmt: skip
    assert first.counted
    assert first.new_failure is not None
    assert first.new_failure.examples_before == 0
    before = store.snapshot()
    # The same visit again (a task that ran twice), even with other numbers: nothing changes.
    again = store.record(result("p", 1, examples=99, failure=failure("B", 1)),
                         invocation=invocation, invocation_seconds=2.0)  # fmt: skip
    assert not again.counted
    assert again.new_failure is None
    assert again.pair == before.pair("torch/recurrent", "p")
    assert store.snapshot() == before
    # The next visit counts; a case already recorded is not recorded twice, a new one is.
    second = store.record(result("p", 2, failure=failure("A", 2)), invocation=invocation,
                          invocation_seconds=3.0)  # fmt: skip
    third = store.record(result("p", 3, failure=failure("C", 3)), invocation=invocation,
                         invocation_seconds=4.0)  # fmt: skip
    assert second.counted
    assert second.new_failure is None
    assert third.new_failure is not None
    assert third.new_failure.examples_before == 6
    pair = store.snapshot().pair("torch/recurrent", "p")
    assert (pair.visits, pair.examples, pair.not_applicable, pair.seconds) == (3, 9, 3, 0.75)
    assert [f.case for f in pair.failures] == ["A", "C"]
    (run,) = store.snapshot().invocations
    assert (run.visits, run.seconds) == (3, 4.0)
    assert [(v.number, v.seed, v.examples) for v in store.visit_log()] == [
        (n, visit_seed(0, "torch/recurrent", "p", n), 3) for n in (1, 2, 3)
    ]


def test_the_snapshot_is_what_the_export_writes(store: SoakStore, tmp_path: Path) -> None:
    invocation = store.start_invocation(
        Invocation(started="2026-01-01T00:00:00Z", versions={"torch": "2"}, settings={"a": [1]})
    )
    for number in (1, 2):
        for prop in ("p", "q"):
            store.record(result(prop, number, failure=failure(f"{prop}{number}", number)),
                         invocation=invocation, invocation_seconds=number / 3)  # fmt: skip
    store.finish_invocation(invocation, seconds=1.23456, stopped="max_visits")
    snapshot = store.snapshot()
    assert [p.property for p in snapshot.pairs] == ["p", "q"], "in the order first visited"
    exported = tmp_path / "export.json"
    save_state(snapshot, exported)
    assert load_state(exported) == snapshot
    document = json.loads(exported.read_text())
    assert document["format"] == "linattn-verify-soak"
    assert document["invocations"][0]["seconds"] == 1.235
    assert read_state(store.path) == snapshot


def test_a_json_state_of_before_migrates_with_equal_counts(tmp_path: Path) -> None:
    legacy = tmp_path / "soak.json"
    legacy.write_bytes(LEGACY.read_bytes())
    original = load_state(legacy)
    assert original is not None
    assert original.pairs
    assert not original.ok
    # A reader reads the JSON as it is, and writes nothing.
    assert read_state(legacy) == original
    assert state_source(legacy) == legacy
    assert not (tmp_path / "soak.sqlite").exists()

    store, note = open_state(legacy)
    with store:
        assert store.path == tmp_path / "soak.sqlite" == store_path_of(legacy)
        assert note is not None
        assert "migrated the JSON state" in note
        assert str(legacy) in note
        migrated = store.snapshot()
        log = store.visit_log()
    assert migrated == original
    assert migrated.to_json() == json.loads(LEGACY.read_text()), "the export is the same file"
    assert legacy.read_bytes() == LEGACY.read_bytes(), "the JSON is left as it was"
    # Every visit of before is in the log, with its seed: no later visit searches it again.
    assert sorted((v.kernel, v.property, v.number, v.seed) for v in log) == sorted(
        (p.kernel, p.property, n, visit_seed(original.seed, p.kernel, p.property, n))
        for p in original.pairs
        for n in range(1, p.visits + 1)
    )
    # Opened again through either name: the store, not a second migration.
    for name in (legacy, tmp_path / "soak.sqlite"):
        again, note = open_state(name)
        with again:
            assert note is None
            assert again.snapshot() == original
    assert read_state(legacy) == original
    assert state_source(legacy) == tmp_path / "soak.sqlite"


def test_the_default_state_of_before_migrates_into_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from linattn_verify.soak import DEFAULT_STATE, LEGACY_DEFAULT_STATE

    monkeypatch.chdir(tmp_path)
    LEGACY_DEFAULT_STATE.write_bytes(LEGACY.read_bytes())
    store, note = open_state(DEFAULT_STATE)
    with store:
        assert note is not None
        assert store.path == DEFAULT_STATE
        assert store.snapshot() == load_state(LEGACY_DEFAULT_STATE)


def test_a_json_state_that_changed_after_its_migration_is_refused(tmp_path: Path) -> None:
    legacy = tmp_path / "soak.json"
    legacy.write_bytes(LEGACY.read_bytes())
    open_state(legacy)[0].close()
    document = json.loads(legacy.read_text())
    document["pairs"][0]["visits"] += 1  # the soak of before ran on it again
    legacy.write_text(json.dumps(document))
    for name in (legacy, tmp_path / "soak.sqlite"):
        with pytest.raises(SoakStateError, match=r"is not the JSON state .* was migrated from"):
            open_state(name)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("soak.sqlite", b""),
        ("soak.sqlite", b"{not json"),
        ("soak.json", b"[1, 2, 3]"),
        ("soak.db", b"SQLite format 3\x00" + b"\x00" * 100),
    ],
)
def test_a_file_that_is_not_a_state_is_refused_and_left_alone(
    tmp_path: Path, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SoakStateError, match="not a soak state"):
        open_state(path)
    with pytest.raises(SoakStateError, match="not a soak state"):
        read_state(path)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "no store beside it"


def test_a_sqlite_database_of_another_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('format', 'something-else')")
        db.commit()
    with pytest.raises(SoakStateError, match="format 'something-else'"):
        open_state(path)


def test_a_seed_contradicting_the_store_is_refused(tmp_path: Path) -> None:
    open_state(tmp_path / "s.sqlite", seed=7)[0].close()
    with pytest.raises(SoakStateError, match="started with seed 7"):
        open_state(tmp_path / "s.sqlite", seed=8)
    store, _ = open_state(tmp_path / "s.sqlite")
    with store:
        assert store.seed == 7


def test_readers_see_a_visit_whole_or_not_at_all(store: SoakStore) -> None:
    invocation = store.start_invocation(Invocation(started="2026-01-01T00:00:00Z"))
    done = threading.Event()
    totals: list[int] = []
    torn: list[str] = []

    def read() -> None:
        with SoakStore.open(store.path, readonly=True) as reader:
            while not done.is_set():
                state = reader.snapshot()
                visits = sum(p.visits for p in state.pairs)
                # One transaction writes a visit's pair counts, its failure and the
                # invocation's total: a reader sees all of them or none.
                if visits != state.invocations[0].visits:
                    torn.append(f"{visits} pair visits, invocation says {state.invocations[0]}")
                for pair in state.pairs:
                    if pair.examples != 3 * pair.visits or len(pair.failures) != pair.visits:
                        torn.append(f"{pair}")
                totals.append(visits)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for number in range(1, 101):
            for prop in ("p", "q"):
                store.record(result(prop, number, failure=failure(f"{prop}{number}", number)),
                             invocation=invocation, invocation_seconds=number)  # fmt: skip
    finally:
        done.set()
        reader.join()
    assert not torn, torn[:3]
    assert len(set(totals)) > 3, "the reader read while the writer wrote"


WRITER = """
import sys
from pathlib import Path
from linattn_verify.soak import Invocation, SoakStore, VisitResult, SoakFailure

store = SoakStore.create(Path(sys.argv[1]), seed=0)
invocation = store.start_invocation(Invocation(started="2026-01-01T00:00:00Z"))
number = 0
while True:
    number += 1
    failure = SoakFailure(number, number, f"case {number}", "m", None, 0, "t")
    result = VisitResult("k", "p", number, number, 3, 0, 0, 0.1, failure)
    store.record(result, invocation=invocation, invocation_seconds=number)
"""


def test_a_writer_killed_mid_visit_loses_only_that_visit(tmp_path: Path) -> None:
    path = tmp_path / "soak.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(path)])
    try:
        deadline = time.monotonic() + 60
        recorded = 0
        while recorded < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            if path.exists() and writer.poll() is None:
                with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                    try:
                        recorded = db.execute("SELECT count(*) FROM visits").fetchone()[0]
                    except sqlite3.OperationalError:  # the tables are not there yet
                        recorded = 0
        assert writer.poll() is None, "the writer is still writing"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with SoakStore.open(path) as store:
        state = store.snapshot()
        log = store.visit_log()
    (pair,) = state.pairs
    assert pair.visits >= 200
    # Every committed visit whole: the log, the pair, its failures and the invocation agree.
    assert [v.number for v in log] == list(range(1, pair.visits + 1))
    assert (pair.examples, len(pair.failures), state.invocations[0].visits) == (
        3 * pair.visits,
        pair.visits,
        pair.visits,
    )
