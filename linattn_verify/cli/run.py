# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify run``: verify the built-in kernels (and FLA's) and write a report."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from linattn_verify.cli._args import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from linattn_verify.core.arguments import csv_of, dtypes_of, globs, nonnegative, positive
from linattn_verify.progress import Progress
from linattn_verify.results import FAIL_THRESHOLD, CaseRecord
from linattn_verify.run_clock import GroupClock
from linattn_verify.typing import GATES, KERNEL_DTYPES

DEFAULT_KERNELS = ("triton/*", "fla/*")
"""What `run` verifies by default: our Triton kernels, and FLA's when it is installed."""


def add_parser(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    run = sub.add_parser("run", help="verify the built-in kernels and write a report")
    run.add_argument(
        "--kernels",
        type=globs,
        default=DEFAULT_KERNELS,
        help="comma-separated globs over kernel names (see `list`); FLA's kernels are included "
        "when FLA is installed. Default: %(default)s",
    )
    run.add_argument(
        "--dtypes",
        type=dtypes_of(KERNEL_DTYPES),
        default=KERNEL_DTYPES,
        help="input dtypes (fp32, fp16, bf16 or the torch names). Default: %(default)s",
    )
    run.add_argument(
        "--gates",
        type=csv_of(GATES),
        default=GATES,
        help="gate shapes of the decay: 'scalar' g [B, T, H], 'vector' g [B, T, H, K]; each "
        "kernel is checked on those it declares, kernels declaring none are left out (kernels "
        "without a data-dependent decay count as scalar). Default: %(default)s",
    )
    run.add_argument(
        "--examples",
        type=positive,
        default=20,
        help="cases per form and dtype. Default: %(default)s",
    )
    run.add_argument(
        "--max-seq-len", type=positive, default=48, help="longest T drawn. Default: %(default)s"
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the case draw. Default: 0")
    run.add_argument("--no-backward", action="store_true", help="check the forward pass only")
    run.add_argument(
        "--side-by-side",
        type=nonnegative,
        default=2,
        help="cases taken from each kernel's draw and run on every other kernel of its family "
        "that takes them, so the report compares kernels on the same cases; 0: none. "
        "Default: %(default)s",
    )
    run.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="(kernel, dtype) groups run at once, each a Ray task (the `cluster` extra: "
        'pip install -e ".[cluster]"): on a local Ray instance of N CPUs, or on the cluster '
        "of --ray-address, one GPU per task where it has GPUs. 1: in this process, without "
        "Ray. Default: %(default)s",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="join the Ray cluster at ADDRESS (host:port, or auto) instead of starting a local "
        "instance; needs --workers N > 1. Every node needs linattn-verify installed",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports/latest"),
        help="report directory. Default: %(default)s",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print a line per case above the progress bar (by default: the bar only)",
    )


def command(args: argparse.Namespace) -> int:
    """``linattn-verify run``."""
    from linattn_verify._device import environment
    from linattn_verify.cluster import ClusterError, check_engine
    from linattn_verify.core.family import family_of
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.running import GroupSettings, select_kernels

    try:
        check_engine(workers=args.workers, address=args.ray_address)
        kernels = select_kernels(args.kernels)
    except InvalidArgument as exc:
        print(f"linattn-verify run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    kernels = [
        k
        for k in kernels
        if family_of(k).narrowed(k, k.capabilities.dtypes[0], args.gates) is not None
    ]
    if not kernels:
        print(
            f"linattn-verify run: error: no kernel matching --kernels {','.join(args.kernels)} "
            f"takes --gates {','.join(args.gates)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # Dtype by dtype, every kernel once per dtype: the costliest kernel is seen (and timed, for
    # the time left: `GroupClock`) within the first pass, not last.
    groups = [(k, d) for d in args.dtypes for k in kernels if d in k.capabilities.dtypes]
    settings = GroupSettings(
        examples=args.examples,
        max_seq_len=args.max_seq_len,
        seed=args.seed,
        backward=not args.no_backward,
        failures_dir=args.out / "failures",
        gates=tuple(args.gates),
        peers=tuple(k.name for k in kernels),
        side_by_side=args.side_by_side,
    )
    from linattn_verify.reporting import RunWriter

    env = environment()
    writer = RunWriter(
        args.out,
        command="run",
        environment=env,
        arguments=_run_arguments(args),
        seed=args.seed,
    )
    for kernel in kernels:
        writer.add_kernel(kernel)
    print(
        f"linattn-verify run: {env['device']} ({env['triton_mode']}), torch {env['torch']}, "
        f"triton {env['triton']}"
    )
    print(
        f"{len(kernels)} kernels, {len(groups)} (kernel, dtype) groups x {args.examples} cases"
        f"{f', {args.workers} at a time on Ray' if args.workers > 1 else ''}; "
        f"writing {writer.lines_path}"
    )
    started = time.perf_counter()
    clock = GroupClock([(k.name, d) for k, d in groups], args.examples, args.workers)
    # The plan: the draws may make fewer cases, the side-by-side ones add some.
    total = len(groups) * args.examples
    try:
        with Progress("run", total, verbose=args.verbose, left=clock.seconds_left) as bar:
            _run_groups(
                groups, settings, args.workers, args.ray_address, writer.add_case, bar, clock
            )
            bar.settle()
    except ClusterError as exc:  # Ray could not be started or joined
        print(f"linattn-verify run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    document = writer.finish()
    print(_summary(document, time.perf_counter() - started))
    print(f"report: {args.out / 'report.md'}, {args.out / 'report.html'}")
    return EXIT_OK if document["totals"]["ok"] else EXIT_FAILED


def _run_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kernels": list(args.kernels),
        "workers": args.workers,
        "ray_address": args.ray_address,
        "dtypes": list(args.dtypes),
        "examples": args.examples,
        "max_seq_len": args.max_seq_len,
        "seed": args.seed,
        "backward": not args.no_backward,
        "gates": list(args.gates),
        "side_by_side": args.side_by_side,
    }


def _run_groups(
    groups: list[tuple[Any, str]],
    settings: Any,
    workers: int,
    address: str | None,
    emit: Any,
    bar: Progress,
    clock: GroupClock,
) -> None:
    """Run every (kernel, dtype) group, in this process or as Ray tasks, ``workers`` at a time.

    Each group is seeded on its own, so the records are the same either way; on Ray they
    arrive a group at a time, as each group finishes. ``bar`` advances case by case either way
    (a task puts word of each case on a queue; it prints nothing).
    """
    from linattn_verify.running import progress_line, run_group

    if workers <= 1:
        for kernel, dtype in groups:
            group = (kernel.name, dtype)

            def emit_and_advance(record: CaseRecord, group: tuple[str, str] = group) -> None:
                emit(record)
                clock.advanced(group)
                bar.advance(failed=not record.ok, line=progress_line(record))

            clock.started(group)
            run_group(kernel, dtype, settings, emit_and_advance)
            clock.finished(group)
        return
    _run_groups_on_ray(groups, settings, workers, address, emit, bar, clock)


def _run_groups_on_ray(
    groups: list[tuple[Any, str]],
    settings: Any,
    workers: int,
    address: str | None,
    emit: Any,
    bar: Progress,
    clock: GroupClock,
) -> None:
    """`_run_groups` as Ray tasks (`linattn_verify.cluster`); the bar follows their queue.

    A group whose worker died is run again by Ray (`RaySession.retries`); its records come
    from the attempt that finished, so each case is written once. Only the bar may have counted
    a dead attempt's cases.
    """
    import importlib

    from linattn_verify.cluster import ray_session
    from linattn_verify.running import progress_line, run_group_reporting

    with ray_session(workers=workers, address=address) as session:
        ray: Any = importlib.import_module("ray")
        queues: Any = importlib.import_module("ray.util.queue")
        news = queues.Queue()
        task = ray.remote(run_group_reporting).options(**session.task_options())
        # Cases the bar has counted, per group; a finished group's late news is not counted.
        counted: dict[tuple[str, str], int] = {}
        finished: set[tuple[str, str]] = set()

        def drain() -> None:
            for name, dtype, ok, line in news.get_nowait_batch(news.qsize()):
                if (name, dtype) not in finished:
                    counted[name, dtype] = counted.get((name, dtype), 0) + 1
                    clock.advanced((name, dtype))
                    bar.advance(failed=not ok, line=line)

        pending = {
            task.remote(kernel.name, dtype, settings, news): (kernel.name, dtype)
            for kernel, dtype in groups
        }
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.1)
            drain()
            for ref in done:
                group = pending.pop(ref)
                records = ray.get(ref)
                # The news of the group's last cases may still be on its way: count them now.
                for record in records[counted.get(group, 0) :]:
                    bar.advance(failed=not record.ok, line=progress_line(record))
                finished.add(group)
                clock.finished(group)
                for record in records:
                    emit(record)


SUMMARY_ROWS = 8
"""Passing (kernel, dtype) rows the terminal summary shows, nearest the fail line first."""


def _summary(document: dict[str, Any], seconds: float) -> str:
    """The terminal summary of a run document: verdict, kernel and dtype rows, findings.

    The rows are every (kernel, dtype) with a failure and the `SUMMARY_ROWS` passing ones
    nearest the fail line; a last line counts the others, which the report lists.

    A kernel's line leads with its worst deciding score r against the oracle (error over bound;
    a case fails past `FAIL_THRESHOLD`), the headroom ``FAIL_THRESHOLD / r`` (how many times the
    error could grow before failing) and the tensor where it is reached; worst first. ρ, which
    explodes on cases of tiny values, is left to the report.
    """
    from linattn_verify.observe import format_headroom, oracle_worst
    from linattn_verify.reporting import cases_of

    totals = document["totals"]
    failed = totals["failed"] + totals["errors"]
    verdict = "PASSED" if totals["ok"] else "FAILED"
    errors = f" ({totals['errors']} harness errors)" if totals["errors"] else ""
    rows = [
        f"\n{verdict}: {totals['cases']} cases, {totals['passed']} passed, {failed} failed"
        f"{errors} in {seconds:.1f} s"
    ]
    # (kernel, dtype) -> [cases, failed, worst score, its tensor]
    groups: dict[tuple[str, str], list[Any]] = {}
    for record in cases_of(document):
        group = groups.setdefault((record.kernel, record.dtype), [0, 0, None, ""])
        group[0] += 1
        group[1] += int(not record.ok)
        worst = oracle_worst(record.result)
        if worst is not None and (group[2] is None or _rank(worst.deciding) > _rank(group[2])):
            group[2], group[3] = worst.deciding, worst.tensor
    if groups:
        rows.append(
            f"worst r = error / bound vs the oracle (fails above {FAIL_THRESHOLD:g}); "
            f"headroom = {FAIL_THRESHOLD:g} / r:"
        )
    width = max([len(kernel) for kernel, _ in groups] + [10])
    ordered = sorted(groups.items(), key=lambda item: -_rank(item[1][2]))
    # Short: every row with a failure, and the nearest of the others; the report has them all.
    shown = [item for item in ordered if item[1][1]]
    shown += [item for item in ordered if not item[1][1]][:SUMMARY_ROWS]
    for (kernel, dtype), (cases, bad, score, tensor) in shown:
        scores = (
            f"r {'-':9s} headroom {'-':6s} {'':12s}"
            if score is None
            else f"r {score:<9.3g} headroom {format_headroom(score):6s} {tensor:12s}"
        )
        tally = f"{cases} cases" + (f", {bad} FAILED" if bad else "")
        rows.append(f"  {kernel:{width}s} {dtype:9s} {scores} {tally}")
    hidden = [item for item in ordered if item not in shown]
    if hidden:
        best = max((item[1][2] for item in hidden if item[1][2] is not None), default=None)
        within = "" if best is None else f", all with r <= {best:.3g}"
        rows.append(f"  ... {len(hidden)} more kernel and dtype rows{within}: see the report")
    for n, finding in enumerate(document["failures"], start=1):
        rows.append(_finding_line(n, finding))
        if finding.get("replay"):
            rows.append(f"     {finding['replay']}")
    return "\n".join(rows)


def _rank(score: float | None) -> float:
    """A score to sort by: NaN is the worst, no score the best."""
    if score is None:
        return -math.inf
    return math.inf if math.isnan(score) else score


def _finding_line(n: int, finding: dict[str, Any]) -> str:
    """One line of a finding: where, what decided it, how often."""
    from linattn_verify.observe import format_headroom
    from linattn_verify.reporting._values import format_finding_score

    properties = ", ".join(finding.get("properties") or [finding["property"]])
    score = finding.get("score")
    if finding.get("tensor") is not None and score is not None:
        if finding.get("score_kind") == "bitwise":
            what = f"{finding['tensor']} {format_finding_score(finding)}, {finding.get('severity')}"
        else:
            what = (
                f"{finding['tensor']} r {float(score):.3g} (headroom "
                f"{format_headroom(float(score))}, {finding.get('severity')})"
            )
    else:
        # The report's first line names the property, the kernel and the whole case: the line
        # after it says what went wrong (the kernel raised, broke the calling convention).
        lines = [line for line in str(finding.get("message") or "").splitlines() if line.strip()]
        said = [line for line in lines if " FAILED for " not in line] or lines or [""]
        what = f"{finding.get('severity') or 'failed'}: {said[0][:100]}"
    count = int(finding.get("occurrences") or 1)
    dtypes = ",".join(finding.get("dtypes") or [finding.get("dtype") or ""])
    declared = "; explained by the declaration" if finding.get("kind") == "declaration" else ""
    return (
        f"FAILED {n}. {finding['kernel']} {dtypes} {properties}: {what}; "
        f"{count} case{'s' * (count != 1)}{declared}"
    )
