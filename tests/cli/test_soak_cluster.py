# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``soak --workers N`` on Ray (`linattn_verify.soak.on_ray`, `linattn_verify.cluster`): the same
visits as a sequential soak, none lost and none counted twice when a worker is killed; and the
flags that cannot work are usage errors before any search.

The Ray tests are ``slow``: a local Ray instance and its workers take 10 to 20 s to start on 2
cores. Each soak runs in a process of its own, as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linattn_verify.cli import EXIT_OK, EXIT_USAGE, main
from linattn_verify.cluster import ClusterError, RaySession, check_engine
from linattn_verify.soak import SoakStore, visit_seed

KERNELS = """
import os
import signal
import time
from pathlib import Path

from linattn_verify.linear_attn.reference_kernels import float32_reference

reference = float32_reference("recurrent")
HERE = Path(__file__).parent


def plain(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
    # While the test has armed it, every call says which process it runs in and lingers, so
    # that the test can kill that process in the middle of a visit.
    if (HERE / "armed").exists():
        (HERE / "pids" / str(os.getpid())).touch()
        time.sleep(0.5)
    # A kernel that kills its process, once: the first call to take the file away dies.
    try:
        (HERE / "crash").unlink()
    except FileNotFoundError:
        pass
    else:
        os.kill(os.getpid(), signal.SIGKILL)
    return reference(q, k, v, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state)
"""

MANIFEST = """
[[kernel]]
name = "plain"
target = "kernels.py:plain"
flags = ["--form", "recurrent", "--causal-exact"]
"""

EXAMPLES = 3
SEARCH = ["--properties", "outputs_match_oracle,state_split_composes"]
SEARCH += ["--chunk-examples", str(EXAMPLES), "--max-seq-len", "8", "--max-head-dim", "4"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "mine.toml").write_text(MANIFEST)
    (tmp_path / "pids").mkdir()
    return tmp_path


def _argv(folder: Path, state: str, *flags: str) -> list[str]:
    kernels = ["--kernels", "torch/recurrent", "--manifest", str(folder / "mine.toml")]
    return ["soak", *kernels, *SEARCH, "--state", str(folder / state), *flags]


def _start(folder: Path, state: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "linattn_verify.cli", *_argv(folder, state, *flags)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _log(path: Path) -> list[tuple[str, str, int, int, int | None]]:
    """The store's visits: (kernel, property, number, seed, examples), sorted."""
    with SoakStore.open(path, readonly=True) as store:
        return sorted(
            (v.kernel, v.property, v.number, v.seed, v.examples) for v in store.visit_log()
        )


def _counts(path: Path) -> dict[tuple[str, str], tuple[int, int, int, int, int]]:
    """Per pair: visits, examples, not applicable, within rounding, failures."""
    with SoakStore.open(path, readonly=True) as store:
        state = store.snapshot()
    return {
        (p.kernel, p.property): (
            p.visits,
            p.examples,
            p.not_applicable,
            p.within_rounding,
            len(p.failures),
        )
        for p in state.pairs
    }


def test_ray_flags_that_cannot_work_are_usage_errors_before_any_search(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(_argv(folder, "s.sqlite", "--ray-address", "10.0.0.1:6379")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--ray-address 10.0.0.1:6379" in err
    assert "--workers" in err
    # An environment without Ray: --workers N > 1 names the extra to install.
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(_argv(folder, "s.sqlite", "--workers", "2")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--workers 2" in err
    assert 'pip install -e ".[cluster]"' in err
    assert not (folder / "s.sqlite").exists(), "refused before the state was touched"
    with pytest.raises(ClusterError, match="Ray is not installed"):
        check_engine(workers=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="--workers"):
            check_engine(workers=bad)  # type: ignore[arg-type]


def test_the_in_process_soak_never_imports_ray(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray unimportable: any import of it on the way would fail the soak.
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(_argv(folder, "s.sqlite", "--workers", "1", "--max-visits", "2")) == EXIT_OK
    assert sum(visits for visits, *_ in _counts(folder / "s.sqlite").values()) == 2


def test_a_task_asks_one_gpu_where_the_cluster_has_gpus() -> None:
    cpus = RaySession("a:1", started_here=True, cpus=2.0, gpus=0.0, nodes=1)
    gpus = RaySession("a:1", started_here=False, cpus=64.0, gpus=8.0, nodes=2)
    assert cpus.task_options()["num_cpus"] == 1
    assert "num_gpus" not in cpus.task_options()
    assert gpus.task_options()["num_gpus"] == 1
    assert gpus.task_options()["max_retries"] == 3
    assert "2 nodes" in gpus.describe()
    assert "8 GPUs" in gpus.describe()
    with pytest.raises(ValueError, match="retries=-1"):
        RaySession("a:1", started_here=True, cpus=2.0, gpus=0.0, nodes=1, retries=-1)


@pytest.mark.slow
def test_workers_visit_what_sequential_invocations_visit(folder: Path) -> None:
    visits = 8  # 2 kernels x 2 properties, twice each
    soak = _start(folder, "ray.sqlite", "--workers", "2", "--max-visits", str(visits), "-v")
    out, _ = soak.communicate(timeout=300)
    assert soak.returncode == EXIT_OK, out
    assert "2 visits at once on a local Ray instance" in out
    # The same length in two sequential invocations, in this process.
    for _ in range(2):
        assert main(_argv(folder, "seq.sqlite", "--max-visits", str(visits // 2))) == EXIT_OK
    parallel, sequential = _log(folder / "ray.sqlite"), _log(folder / "seq.sqlite")
    assert len(parallel) == visits
    assert parallel == sequential, "the same (pair, visit number, seed, examples)"
    assert {seed for *_, seed, _ in parallel} == {
        visit_seed(0, kernel, prop, number) for kernel, prop, number, *_ in sequential
    }
    assert _counts(folder / "ray.sqlite") == _counts(folder / "seq.sqlite")


@pytest.mark.slow
def test_a_worker_killed_mid_visit_loses_no_visit_and_counts_none_twice(folder: Path) -> None:
    visits = 8
    (folder / "armed").touch()
    soak = _start(folder, "ray.sqlite", "--workers", "2", "--max-visits", str(visits))
    try:
        deadline = time.monotonic() + 120
        while not any((folder / "pids").iterdir()):
            assert soak.poll() is None, soak.communicate()[0]
            assert time.monotonic() < deadline, "no worker ran the kernel"
            time.sleep(0.05)
        # A worker inside a visit (inside the kernel's call): kill -9 it.
        victim = int(next((folder / "pids").iterdir()).name)
        assert victim != soak.pid
        os.kill(victim, signal.SIGKILL)
        (folder / "armed").unlink()
        out, _ = soak.communicate(timeout=300)
    finally:
        soak.kill()
    assert soak.returncode == EXIT_OK, out
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    log = _log(folder / "ray.sqlite")
    # Every pair's visits 1 and 2, once each, with their own seeds; each a whole search.
    assert [(kernel, prop, number) for kernel, prop, number, *_ in log] == sorted(
        (kernel, prop, number)
        for kernel in ("mine/plain", "torch/recurrent")
        for prop in ("outputs_match_oracle", "state_split_composes")
        for number in (1, 2)
    )
    assert all(seed == visit_seed(0, k, p, n) for k, p, n, seed, _ in log)
    assert all(examples == EXAMPLES for *_, examples in log), log
    counts = _counts(folder / "ray.sqlite")
    assert sum(c[0] for c in counts.values()) == visits
    assert all(c[4] == 0 for c in counts.values()), "no harness error: the visit ran again"
    with SoakStore.open(folder / "ray.sqlite", readonly=True) as store:
        (invocation,) = store.snapshot().invocations
    assert (invocation.visits, invocation.stopped) == (visits, "max_visits")


CRASHING = """
import sys
from pathlib import Path

from linattn_verify.cli.manifest import load_manifest
from linattn_verify.cluster import ray_session
from linattn_verify.core.family import family_of
from linattn_verify.soak import SoakSettings, soak

(entry,) = load_manifest(Path(sys.argv[1]))
kernel = entry.kernel()
properties = {"outputs_match_oracle": family_of(kernel).properties()["outputs_match_oracle"]}
settings = SoakSettings(chunk_examples=3, max_seq_len=8, max_head_dim=4, max_visits=3)
with ray_session(workers=2, retries=0) as session:
    soak([kernel], properties, Path(sys.argv[2]), settings, workers=2, session=session,
         loaders={entry.name: entry})
"""


@pytest.mark.slow
def test_a_visit_whose_worker_dies_on_every_attempt_is_a_harness_error(folder: Path) -> None:
    (folder / "crash").touch()
    state = folder / "ray.sqlite"
    script = [sys.executable, "-c", CRASHING, str(folder / "mine.toml"), str(state)]
    done = subprocess.run(script, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (folder / "crash").exists(), "the kernel killed its worker"
    with SoakStore.open(state, readonly=True) as store:
        (pair,) = store.snapshot().pairs
        log = store.visit_log()
    # The visit counts once, as the failure it is; the soak went on with the others.
    assert [v.number for v in log] == [1, 2, 3]
    assert pair.visits == 3
    (failure,) = pair.failures
    assert failure.error
    assert "its worker died on each of 1 attempt (" in failure.message
    assert sorted(v.examples for v in log) == [0, EXAMPLES, EXAMPLES]
