# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify run``: verify the built-in kernels (and FLA's) and write a report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from linattn_verify.cli._args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    csv_of,
    globs,
    positive,
)
from linattn_verify.results import CaseRecord
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
        type=csv_of(KERNEL_DTYPES),
        default=KERNEL_DTYPES,
        help="input dtypes. Default: %(default)s",
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
        "--workers",
        type=positive,
        default=1,
        help="worker processes the (kernel, dtype) groups are spread over. Default: 1",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports/latest"),
        help="report directory. Default: %(default)s",
    )


def command(args: argparse.Namespace) -> int:
    """``linattn-verify run``."""
    from linattn_verify._device import environment
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.families import family_of
    from linattn_verify.running import GroupSettings, select_kernels

    try:
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
    groups = [(k, d) for k in kernels for d in args.dtypes if d in k.capabilities.dtypes]
    settings = GroupSettings(
        examples=args.examples,
        max_seq_len=args.max_seq_len,
        seed=args.seed,
        backward=not args.no_backward,
        failures_dir=args.out / "failures",
        gates=tuple(args.gates),
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
        f"{f' over {args.workers} worker processes' if args.workers > 1 else ''}; "
        f"writing {writer.lines_path}"
    )
    _run_groups(groups, settings, args.workers, writer.add_case)
    document = writer.finish()
    print(_table(document))
    for failure in document["failures"]:
        print(f"\nFAILED {failure['kernel']}: {failure['message']}")
        if failure["replay"]:
            print(f"Replay: {failure['replay']}")
    print(f"\nreport: {args.out / 'report.md'}, {args.out / 'report.html'}")
    return EXIT_OK if document["totals"]["ok"] else EXIT_FAILED


def _run_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kernels": list(args.kernels),
        "workers": args.workers,
        "dtypes": list(args.dtypes),
        "examples": args.examples,
        "max_seq_len": args.max_seq_len,
        "seed": args.seed,
        "backward": not args.no_backward,
        "gates": list(args.gates),
    }


def _run_groups(
    groups: list[tuple[Any, str]],
    settings: Any,
    workers: int,
    emit: Any,
) -> None:
    """Run every (kernel, dtype) group, in this process or over ``workers`` processes.

    Each group is seeded on its own, so the records are the same either way; with workers they
    arrive a group at a time, as each group finishes.
    """
    from linattn_verify.running import progress_line, run_group, run_group_in_worker

    if workers <= 1:
        for kernel, dtype in groups:

            def emit_and_print(record: CaseRecord) -> None:
                emit(record)
                print(progress_line(record), flush=True)

            run_group(kernel, dtype, settings, emit_and_print)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # Spawned, not forked: a forked child would inherit torch's threads and CUDA state.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [
            pool.submit(run_group_in_worker, kernel.name, dtype, settings)
            for kernel, dtype in groups
        ]
        for future in as_completed(futures):
            for record in future.result():
                emit(record)


def _table(document: dict[str, Any]) -> str:
    """The terminal summary of a run document.

    Per kernel and dtype: the cases and how many passed, and the worst tensor's max r, max ρ and
    median ρ, as the report's score distributions give them.
    """
    from linattn_verify.reporting import cases_of

    counts: dict[tuple[str, str], list[int]] = {}
    for record in cases_of(document):
        tally = counts.setdefault((record.kernel, record.dtype), [0, 0])
        tally[0] += 1
        tally[1] += int(record.ok)
    worst: dict[tuple[str, str], dict[str, Any]] = {}
    for row in document["distributions"]:
        key = (row["kernel"], row["dtype"])
        if key not in worst or row["r"]["max"] >= worst[key]["r"]["max"]:
            worst[key] = row
    rows = [
        f"\n{'kernel':26s} {'cases':>5s} {'passed':>6s} {'worst r':>8s} {'max rho':>9s} "
        f"{'med rho':>8s}  worst tensor"
    ]
    for (kernel, dtype), (cases, passed) in counts.items():
        w = worst.get((kernel, dtype))
        scores = (
            f"{w['r']['max']:8.3g} {w['rho']['max']:9.3g} {w['rho']['median']:8.3g}  {w['tensor']}"
            if w
            else f"{'-':>8s} {'-':>9s} {'-':>8s}"
        )
        rows.append(f"{kernel + '/' + dtype:26s} {cases:5d} {passed:6d} {scores}")
    totals = document["totals"]
    rows.append(
        f"{totals['passed']} passed, {totals['failed'] + totals['errors']} failed"
        + (f" ({totals['errors']} harness errors)" if totals["errors"] else "")
    )
    return "\n".join(rows)
