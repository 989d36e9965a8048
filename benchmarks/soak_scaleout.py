# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soak's scale-out: throughput with 1 and N workers, and the driver's cost per visit.

    python benchmarks/soak_scaleout.py [--kernels 'torch/*'] [--max-visits 40] [--workers 1 2]

For each worker count, one ``linattn-verify soak --kernels K --max-visits V --workers N`` on a
fresh state (``--workers 1``: in this process; more: a local Ray instance), timed from outside
(wall time, Ray's start and stop included) and from the store (the invocation's seconds, from
the first visit taken to the last recorded: the soak's throughput). Then the driver's own cost
per visit, measured in this process: taking the next visit from the `Schedule` and recording
its result in the SQLite store (one synced transaction), over ``--driver-visits`` visits of the
same pairs; and a no-op Ray task's round trip as the driver dispatches them. Prints a Markdown
table and writes it with the numbers to
``benchmarks/soak_scaleout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "benchmarks" / "soak_scaleout.json"


def soak_throughput(kernels: str, visits: int, workers: int, folder: Path) -> dict[str, Any]:
    """One soak of ``visits`` visits with ``workers`` workers, timed from outside and inside."""
    from linattn_verify.soak import SoakStore

    state = folder / f"workers-{workers}.sqlite"
    argv = [sys.executable, "-m", "linattn_verify.cli", "soak", "--kernels", kernels]
    argv += ["--max-visits", str(visits), "--workers", str(workers), "--state", str(state)]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    with SoakStore.open(state, readonly=True) as store:
        snapshot = store.snapshot()
    (invocation,) = snapshot.invocations
    examples = sum(p.examples for p in snapshot.pairs)
    # The visits' own search time, summed: against workers x soak seconds, how busy they were.
    searching = sum(p.seconds for p in snapshot.pairs)
    return {
        "workers": workers,
        "command": " ".join(["linattn-verify", *argv[3:]]),
        "visits": invocation.visits,
        "examples": examples,
        "soak_seconds": invocation.seconds,
        "wall_seconds": round(wall, 2),
        "examples_per_second": round(examples / invocation.seconds, 2),
        "visits_per_second": round(invocation.visits / invocation.seconds, 3),
        "search_seconds": round(searching, 2),
        "busy": round(searching / (workers * invocation.seconds), 3),
    }


def driver_cost(kernels: str, visits: int, folder: Path) -> dict[str, Any]:
    """Seconds the driver spends per visit: `Schedule.take` and `SoakStore.record`."""
    from linattn_verify.core.family import family_of
    from linattn_verify.running import select_kernels
    from linattn_verify.soak import Invocation, SoakStore, VisitResult, visit_seed
    from linattn_verify.soak.schedule import Schedule

    chosen = select_kernels([kernels])
    pairs = [(k, name) for k in chosen for name in family_of(k).properties()]
    store = SoakStore.create(folder / "driver.sqlite", seed=0)
    invocation = store.start_invocation(Invocation(started="now"))
    schedule = Schedule(pairs, store.done_visits())
    take = record = 0.0
    for _ in range(visits):
        started = time.perf_counter()
        planned = schedule.take()
        taken = time.perf_counter()
        name = planned.kernel.name
        seed = visit_seed(0, name, planned.property, planned.number)
        result = VisitResult(name, planned.property, planned.number, seed, 10, 0, 0, 1.0)
        store.record(result, invocation=invocation, invocation_seconds=1.0)
        take += taken - started
        record += time.perf_counter() - taken
    started = time.perf_counter()
    store.snapshot()
    snapshot = time.perf_counter() - started
    store.close()
    return {
        "pairs": len(pairs),
        "visits": visits,
        "take_us": round(take / visits * 1e6, 1),
        "record_us": round(record / visits * 1e6, 1),
        "snapshot_ms": round(snapshot * 1e3, 2),
    }


def ray_round_trip(workers: int, tasks: int) -> dict[str, Any]:
    """Seconds per no-op task on a local Ray, ``workers`` in flight, as the soak dispatches."""
    import ray

    from linattn_verify.cluster import ray_session

    def nothing() -> None:
        return None

    with ray_session(workers=workers) as session:
        # Nested: Ray ships it by value, whatever module this file is imported as.
        task = ray.remote(nothing).options(**session.task_options())
        ray.get([task.remote() for _ in range(workers)])  # the workers started
        in_flight = [task.remote() for _ in range(workers)]
        started = time.perf_counter()
        for _ in range(tasks):
            ready, in_flight = ray.wait(in_flight, num_returns=1)
            ray.get(ready)
            in_flight.append(task.remote())
        seconds = time.perf_counter() - started
        ray.get(in_flight)
    return {"workers": workers, "tasks": tasks, "per_task_us": round(seconds / tasks * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="torch/*")
    parser.add_argument("--max-visits", type=int, default=40)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--driver-visits", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = [soak_throughput(args.kernels, args.max_visits, n, folder) for n in args.workers]
        cost = driver_cost(args.kernels, args.driver_visits, folder)
    trip = ray_round_trip(max(args.workers), 500) if max(args.workers) > 1 else None
    base = runs[0]["examples_per_second"]
    rows = [
        "| workers | visits | examples | soak s | examples/s | visits/s | ratio | search s | busy "
        "| wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        ratio = run["examples_per_second"] / base
        rows.append(
            f"| {run['workers']} | {run['visits']} | {run['examples']} | {run['soak_seconds']} "
            f"| {run['examples_per_second']} | {run['visits_per_second']} | {ratio:.2f} "
            f"| {run['search_seconds']} | {run['busy']:.0%} | {run['wall_seconds']} |"
        )
    rows.append("")
    rows.append(
        f"Driver per visit over {cost['visits']} visits of {cost['pairs']} pairs: take "
        f"{cost['take_us']} µs, record {cost['record_us']} µs; a snapshot {cost['snapshot_ms']} ms."
    )
    if trip is not None:
        rows.append(
            f"Ray per task (no-op, {trip['workers']} in flight, dispatch, wait and get): "
            f"{trip['per_task_us']} µs."
        )
    table = "\n".join(rows)
    print(table)
    SUMMARY.write_text(
        json.dumps(
            {
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
                "date": time.strftime("%Y-%m-%d"),
                "runs": runs,
                "driver": cost,
                "ray_round_trip": trip,
                "table": table,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
