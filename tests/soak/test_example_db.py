# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's shared example database (`linattn_verify.example_db`, ``soak --example-db``).

A failure one soak worker finds is replayed first by another: the second worker, a separate
process, searches one case per visit from a seed of its own, which never draws the failing case
(the control run shows it), and still fails at its first visit, on the first worker's case. The
Redis test starts Debian's ``redis-server`` on a free port; it skips without one unless
``LINATTN_REQUIRE_REDIS=1`` (``.ci/run`` sets it where the server is installed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from linattn_verify.errors import InvalidArgument
from linattn_verify.example_db import (
    SharedDatabase,
    database_key,
    default_example_db,
    open_example_db,
    parse_example_db,
)
from linattn_verify.failures import replay
from linattn_verify.registry import registered_properties
from linattn_verify.soak import SoakFailure, read_state

# `late` is correct but for the outputs of positions 3 on: a case needs T >= 4 to fail, and the
# simplest case, the one a search of one example tries, has T = 1.
KERNELS = """
from linattn_verify.linear_attn.reference_kernels import float32_reference

reference = float32_reference("recurrent")

def plain(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
    return reference(q, k, v, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state)

def late(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
    o, state = plain(q, k, v, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state)
    o = o.clone()
    o[:, 3:] += 1
    return o, state
"""

PROPERTY = "outputs_match_oracle"
LATE = "late/late"  # a manifest's kernels are named <manifest stem>/<name>


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "kernels.py").write_text(KERNELS)
    for name in ("late", "plain"):
        (tmp_path / f"{name}.toml").write_text(
            f'[[kernel]]\nname = "{name}"\ntarget = "kernels.py:{name}"\n'
            'flags = ["--form", "recurrent", "--causal-exact"]\n'
        )
    return tmp_path


def _soak(folder: Path, kernel: str, state: str, *flags: str) -> list[str]:
    """A one-visit soak of ``kernel``'s manifest on PROPERTY with state ``folder/state``."""
    return [
        "soak",
        "--manifest",
        str(folder / f"{kernel}.toml"),
        "--properties",
        PROPERTY,
        "--max-seq-len",
        "8",
        "--max-head-dim",
        "4",
        "--max-visits",
        "1",
        "--state",
        str(folder / state),
        *flags,
    ]


def _in_another_process(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linattn_verify.cli", *argv],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _failures(folder: Path, state: str) -> tuple[SoakFailure, ...]:
    loaded = read_state(folder / state)
    assert loaded is not None, f"no state at {folder / state}"
    (pair,) = loaded.pairs
    return pair.failures


def _replayed_first(folder: Path, example_db: str) -> None:
    """Worker 1 finds the failure; worker 2, another process, replays it first (module doc)."""
    assert main(_soak(folder, "late", "w1.sqlite", "--example-db", example_db)) == EXIT_FAILED
    (found,) = _failures(folder, "w1.sqlite")

    # The control: worker 2's own search (seed 1, one example) does not find the failure.
    control = _soak(folder, "late", "control.sqlite", "--seed", "1", "--chunk-examples", "1")
    assert main([*control, "--example-db", "none"]) == EXIT_OK

    second = _soak(folder, "late", "w2.sqlite", "--seed", "1", "--chunk-examples", "1")
    done = _in_another_process(folder, [*second, "--example-db", example_db])
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    (replayed,) = _failures(folder, "w2.sqlite")
    assert (replayed.visit, replayed.examples_before, replayed.case) == (1, 0, found.case)
    assert f"Replayed first from the shared example database {example_db}" in replayed.message
    # Its saved folder holds the inputs: the failure replays from there.
    assert replayed.failure_file is not None
    properties = {PROPERTY: registered_properties()[PROPERTY]}
    assert not replay(replayed.failure_file, properties=properties, kernels={}).ok


def test_a_failure_one_worker_finds_another_replays_first(folder: Path) -> None:
    shared = folder / "shared-examples"
    _replayed_first(folder, str(shared))
    # One failure under the pair's own key; Hypothesis's sub-keys are not kept.
    database = DirectoryBasedExampleDatabase(shared)
    key = database_key("linear_attn", LATE, PROPERTY)
    assert len(list(database.fetch(key))) == 1
    for sub_key in (b".secondary", b".pareto"):
        assert list(database.fetch(key + sub_key)) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of its own on a free port, in a temporary folder, stopped at the end."""
    required = os.environ.get("LINATTN_REQUIRE_REDIS") == "1"
    server = shutil.which("redis-server")
    if server is None:
        if required:
            pytest.fail(
                "LINATTN_REQUIRE_REDIS=1 but redis-server is not installed (apt: redis-server)"
            )
        pytest.skip("redis-server is not installed (apt: redis-server; .ci/run installs it)")
    try:
        import redis
    except ImportError:
        if required:
            pytest.fail("LINATTN_REQUIRE_REDIS=1 but the redis package is missing (extra dev)")
        pytest.skip("the redis package is missing: pip install 'linattn-verify[cluster]'")
    port = _free_port()
    data = tmp_path / "redis"
    data.mkdir()
    process = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ],
    )
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            log = data / "redis.log"
            pytest.fail(f"redis-server did not answer on port {port}: {log.read_text()}")
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_failure_one_worker_finds_another_replays_first_through_redis(
    folder: Path, redis_url: str
) -> None:
    import redis

    _replayed_first(folder, redis_url)
    # One failure under the pair's own key; Hypothesis's sub-keys are not kept.
    client = redis.Redis.from_url(redis_url)
    key = database_key("linear_attn", LATE, PROPERTY)
    assert len(client.smembers(b"hypothesis-example:" + key)) == 1
    assert client.keys(b"hypothesis-example:*") == [b"hypothesis-example:" + key]
    client.close()


def test_each_pair_has_a_key_of_its_own(folder: Path) -> None:
    shared = str(folder / "shared-examples")
    assert main(_soak(folder, "late", "w1.sqlite", "--example-db", shared)) == EXIT_FAILED
    # Another pair on the same database, in another process (this one has seen late's case),
    # replays nothing: with a key in common it would replay late's case, see it pass on plain,
    # and delete it.
    done = _in_another_process(folder, _soak(folder, "plain", "p.sqlite", "--example-db", shared))
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    database = DirectoryBasedExampleDatabase(shared)
    assert len(list(database.fetch(database_key("linear_attn", LATE, PROPERTY)))) == 1
    keys = {
        database_key(family, kernel, prop)
        for family in ("linear_attn", "delta")
        for kernel in (LATE, "plain/plain", "torch/chunk")
        for prop in (PROPERTY, "chunk_size_invariant")
    }
    assert len(keys) == 12
    assert database_key("delta", "torch/chunk", PROPERTY) == (
        b"linattn-verify/soak/v1/delta/torch/chunk/outputs_match_oracle"
    )


def test_a_process_replays_each_saved_failure_once(tmp_path: Path) -> None:
    database = DirectoryBasedExampleDatabase(tmp_path)
    key = database_key("linear_attn", LATE, PROPERTY)
    database.save(key, b"\x01")
    database.save(key, b"\x00\x02")
    mine = SharedDatabase(database, "test")
    assert mine.unseen(key) == [b"\x01", b"\x00\x02"], "simplest (shortest) first"
    view = mine.pair(key, replay=b"\x01")
    assert list(view.fetch(key)) == [b"\x01"], "one failure per replay"
    assert list(view.fetch(key + b".secondary")) == []
    assert mine.unseen(key) == [b"\x00\x02"]
    # What this process saves it does not replay; another process does. Sub-keys are dropped.
    view.save(key, b"\x03")
    view.save(key + b".pareto", b"\x04")
    view.move(key, key + b".secondary", b"\x00\x02")
    assert mine.unseen(key) == []
    assert sorted(SharedDatabase(database, "test").unseen(key)) == [b"\x01", b"\x03"]
    assert list(database.fetch(key + b".pareto")) == []
    assert list(database.fetch(key + b".secondary")) == []
    # A replayed failure that no longer fails is deleted for everyone.
    view.delete(key, b"\x01")
    assert list(database.fetch(key)) == [b"\x03"]


@pytest.mark.parametrize(
    ("text", "kind", "described"),
    [
        ("none", "none", "none"),
        ("examples", "directory", str(Path.cwd() / "examples")),
        ("~/examples", "directory", str(Path.home() / "examples")),
        ("redis://localhost", "redis", "redis://localhost"),
        ("redis://db.example:6380/3", "redis", "redis://db.example:6380/3"),
        ("redis://:secret@db.example:6380/3", "redis", "redis://db.example:6380/3"),
    ],
)
def test_example_db_values(text: str, kind: str, described: str) -> None:
    spec = parse_example_db(text)
    assert (spec.kind, spec.describe()) == (kind, described)
    # What the workers get: a directory as an absolute path, a Redis URL whole (its password).
    assert spec.canonical() == (described if kind == "directory" else text)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "must be a directory, redis://host"),
        ("http://db.example", "the only URL scheme"),
        ("redis://", "redis://host\\[:port\\]\\[/db\\]"),
        ("redis://db.example:0", "port in \\[1, 65535\\]"),
        ("redis://db.example:port", "port in \\[1, 65535\\]"),
        ("redis://db.example/zero", "db a number"),
        ("redis://db.example/0?x=1", "redis://host"),
    ],
)
def test_bad_example_db_values_name_the_flag(text: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match) as info:
        parse_example_db(text)
    assert str(info.value).startswith(f"Got --example-db {text!r}")


def test_a_file_is_not_a_directory_database(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidArgument, match="is a file, not a directory"):
        open_example_db(str(tmp_path / "file"))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("redis://127.0.0.1:{port}/0", "no Redis server answers there"),
        ("ftp://example", "the only URL scheme"),
        ("{file}", "is a file, not a directory"),
    ],
)
def test_a_bad_or_unreachable_database_is_a_usage_error_before_any_search(
    folder: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    (folder / "file").write_text("")
    value = value.format(port=_free_port(), file=folder / "file")
    assert main(_soak(folder, "late", "w.sqlite", "--example-db", value)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "linattn-verify soak: error: Got --example-db" in err
    assert message in err
    assert "Traceback" not in err
    # Nothing was created: no state, no failures folder.
    assert sorted(p.name for p in folder.iterdir()) == [
        "file",
        "kernels.py",
        "late.toml",
        "plain.toml",
    ]


def test_the_default_database_is_beside_the_state(folder: Path) -> None:
    assert default_example_db(Path("runs/soak.json")) == Path("runs/soak.examples")
    assert main(_soak(folder, "late", "w1.sqlite")) == EXIT_FAILED
    database = DirectoryBasedExampleDatabase(folder / "w1.examples")
    assert len(list(database.fetch(database_key("linear_attn", LATE, PROPERTY)))) == 1


def test_a_saved_failure_replays_on_another_machine(
    folder: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_soak(folder, "late", "w1.sqlite", "--example-db", "none")) == EXIT_FAILED
    (found,) = _failures(folder, "w1.sqlite")
    assert found.failure_file is not None
    # Another machine: the shared failures folder, and a checkout of the kernel elsewhere.
    there = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(folder / "w1.failures", there / "w1.failures")
    shutil.copy(folder / "kernels.py", there / "kernels.py")
    shutil.copy(folder / "late.toml", there / "late.toml")
    (folder / "kernels.py").unlink()
    copied = there / Path(found.failure_file).relative_to(folder)
    capsys.readouterr()
    assert main(["replay", str(copied)]) == EXIT_USAGE
    assert "give the manifest that declares the kernel with --manifest" in capsys.readouterr().err
    assert main(["replay", str(copied), "--manifest", str(there / "late.toml")]) == EXIT_FAILED
    assert f"Reproduces: {PROPERTY} still fails for {LATE}." in capsys.readouterr().out
