# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify soak``: search the catalogue for hours, resumably (`linattn_verify.soak`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from linattn_verify.cli._args import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from linattn_verify.core.arguments import globs, nonnegative, nonnegative_float, positive
from linattn_verify.soak import DEFAULT_CHUNK_EXAMPLES, DEFAULT_KERNELS, DEFAULT_STATE


def _names(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated names but got {text!r}")
    return items


def add_parser(sub: Any) -> None:
    """Add the ``soak`` subcommand."""
    soak = sub.add_parser(
        "soak",
        help="search (kernel, property) pairs for hours, resumably, keeping score in a file",
        description="Visit every (kernel, property) pair round-robin, one Hypothesis search of "
        "--chunk-examples cases per visit with a seed never used before on that pair, until "
        "--budget seconds (default: until SIGINT or SIGTERM). Counts and failures accumulate in "
        "--state across invocations; failing cases are saved beside it for `linattn-verify "
        "replay`. Exit status: 0 no failure recorded, 1 one was, 2 usage error or a state file "
        "that cannot be read.",
    )
    soak.add_argument(
        "--kernels",
        type=globs,
        default=None,
        help="comma-separated globs over kernel names (see `list`); FLA's kernels are included "
        f"when FLA is installed. Default: {DEFAULT_KERNELS} (none with --manifest)",
    )
    soak.add_argument(
        "--manifest",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help="a TOML manifest of third-party kernels, each with the check flags that declare it "
        "(`linattn_verify.cli.manifest`; tests/corpus/*.toml are two); repeatable",
    )
    soak.add_argument(
        "--properties",
        type=_names,
        default=None,
        help="comma-separated property names. Default: every registered property",
    )
    soak.add_argument(
        "--budget",
        type=nonnegative_float,
        default=None,
        help="wall-clock seconds for this invocation; no visit starts after. Default: unlimited",
    )
    soak.add_argument(
        "--state",
        type=Path,
        default=DEFAULT_STATE,
        help="the state: a SQLite store, created if missing; failures go to <stem>.failures/ "
        "beside it. A path ending in .json, or a JSON state file of before, names the store "
        "<stem>.sqlite beside it; a JSON state is migrated into it once (and left as it was). "
        "Default: %(default)s (a JSON state at .linattn-soak.json is migrated into it)",
    )
    soak.add_argument(
        "--example-db",
        default=None,
        metavar="DB",
        help="the Hypothesis example database the workers share: a directory, "
        "redis://host[:port][/db] (pip install 'linattn-verify[cluster]'), or none. A failing "
        "case one worker finds is saved there, and every other replays it first at its next "
        "visit of that kernel and property. Default: <stem>.examples/ beside the state",
    )
    soak.add_argument(
        "--max-seq-len", type=positive, default=32, help="longest T drawn. Default: %(default)s"
    )
    soak.add_argument(
        "--max-head-dim",
        type=positive,
        default=16,
        help="largest K and V drawn. Default: %(default)s",
    )
    soak.add_argument(
        "--chunk-examples",
        type=positive,
        default=DEFAULT_CHUNK_EXAMPLES,
        help="examples in one visit's search. Default: %(default)s",
    )
    soak.add_argument(
        "--max-visits",
        type=positive,
        default=None,
        help="stop after this many visits in this invocation. Default: unlimited",
    )
    soak.add_argument(
        "--seed",
        type=nonnegative,
        default=None,
        help="base seed of a new state file (a resumed one keeps its own). Default: 0",
    )
    soak.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="visits in flight at once: 1 runs them in this process; N > 1 runs each as a Ray "
        'task (pip install -e ".[cluster]"), on a local Ray instance of N CPUs unless '
        "--ray-address; one GPU per task where the cluster has GPUs. Default: %(default)s",
    )
    soak.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="join the Ray cluster at ADDRESS (host:port, or auto) instead of starting a local "
        "instance; needs --workers N > 1, N the visits in flight. Every node needs "
        "linattn-verify and the kernels installed, and the failures folder shared. "
        "Default: a local instance",
    )
    soak.add_argument(
        "--summary",
        action="store_true",
        help="print the table of --state and exit, without running",
    )
    soak.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the state of --state as a JSON document (the state file format of before "
        "the store) to FILE and exit, without running",
    )
    soak.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print a line per visit above the progress bar (by default: the bar only)",
    )


def _error(message: object) -> int:
    print(f"linattn-verify soak: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def command(args: argparse.Namespace) -> int:
    """``linattn-verify soak``."""
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.soak import read_state, save_state, state_source, summary

    if args.summary or args.export is not None:
        # Read, never written: a snapshot of the store (safe while a soak runs), or a JSON
        # state not yet migrated.
        try:
            state = read_state(args.state)
        except InvalidArgument as exc:
            return _error(exc)
        source = state_source(args.state)
        if state is None or source is None:
            return _error(f"Got --state {args.state}, but there is no such file.")
        if args.export is not None:
            try:
                save_state(state, args.export)
            except OSError as exc:
                return _error(f"Got --export {args.export}, but it cannot be written: {exc}")
            print(f"linattn-verify soak: wrote the state of {source} to {args.export}")
        if args.summary:
            print(summary(state, source))
        return EXIT_OK if state.ok else EXIT_FAILED
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from linattn_verify.cli.manifest import load_manifest, manifest_kernels
    from linattn_verify.cluster import check_engine, ray_session
    from linattn_verify.core.family import family_of
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.example_db import (
        default_example_db,
        open_example_db,
        parse_example_db,
    )
    from linattn_verify.progress import Progress
    from linattn_verify.running import select_kernels
    from linattn_verify.soak import (
        SoakSettings,
        Stopper,
        VisitOutcome,
        failures_dir_of,
        locked,
        open_state,
        progress_line,
        soak,
        store_path_of,
        summary,
    )

    try:
        # Before anything else: a cluster flag that cannot work is a usage error at once.
        check_engine(workers=args.workers, address=args.ray_address)
        manifests = args.manifest or []
        chosen = args.kernels or (() if manifests else DEFAULT_KERNELS)
        kernels = [*(select_kernels(chosen) if chosen else []), *manifest_kernels(manifests)]
        # The catalogues of the kernels' families (a name may be in several).
        available: dict[str, None] = {}
        for kernel in kernels:
            available.update(dict.fromkeys(family_of(kernel).properties()))
        wanted = args.properties or tuple(available)
        if unknown := [name for name in wanted if name not in available]:
            raise InvalidArgument(
                f"Got --properties {','.join(wanted)}, but {unknown} "
                f"{'is' if len(unknown) == 1 else 'are'} not in the catalogue of the kernels' "
                f"families; available: {sorted(available)}."
            )

        def properties(kernel: Any) -> dict[str, Any]:
            # Each kernel is visited on the wanted properties of its own family's catalogue.
            catalogue = family_of(kernel).properties()
            return {name: catalogue[name] for name in wanted if name in catalogue}

        # Opened (a directory created, a Redis server pinged) before any search: a bad value is
        # a usage error now, not a harness error at every visit. A directory goes to the
        # workers as an absolute path: a Ray task's working directory is not this one.
        example_db = parse_example_db(
            args.example_db or str(default_example_db(args.state))
        ).canonical()
        shared = open_example_db(example_db)
        settings = SoakSettings(
            chunk_examples=args.chunk_examples,
            max_seq_len=args.max_seq_len,
            max_head_dim=args.max_head_dim,
            budget=args.budget,
            max_visits=args.max_visits,
            seed=args.seed,
            example_db=example_db,
        )
        with locked(args.state):
            store, migrated = open_state(args.state, seed=args.seed)
            with store:
                before = store.snapshot()
            if migrated is not None:
                print(migrated, flush=True)
            state_path = store_path_of(args.state)
            resumed = (
                "new state"
                if not before.invocations
                else f"resuming {sum(p.examples for p in before.pairs)} examples over "
                f"{len(before.invocations)} invocation(s)"
            )
            budget = "unlimited" if args.budget is None else f"{args.budget:g} s"
            print(
                f"linattn-verify soak: {len(kernels)} kernels x {len(wanted)} properties, "
                f"{args.chunk_examples} examples per visit, budget {budget}; state {state_path} "
                f"({resumed}), failures in {failures_dir_of(state_path)}/, shared examples in "
                f"{'none' if shared is None else shared.description}",
                flush=True,
            )
            # Examples done against the budget's seconds; with no budget, a count of them.
            bar = Progress(
                "soak",
                None,
                verbose=args.verbose,
                unit="examples",
                budget=args.budget or None,
            )

            def visited(outcome: VisitOutcome, seconds: float) -> None:
                line = progress_line(outcome, seconds)
                bar.advance(outcome.examples, failed=outcome.failed, line=line)

            # A manifest's kernel travels to a worker as its entry (a `KernelLoader`).
            loaders = {entry.name: entry for path in manifests for entry in load_manifest(path)}
            with contextlib.ExitStack() as engine:
                session = None
                if args.workers > 1:
                    session = engine.enter_context(
                        ray_session(workers=args.workers, address=args.ray_address)
                    )
                    print(
                        f"linattn-verify soak: {args.workers} visits at once on "
                        f"{session.describe()}",
                        flush=True,
                    )
                # Inside the session: Ray takes SIGTERM when it starts, the stopper takes it back.
                with Stopper().installed() as stopper, bar:
                    state = soak(
                        kernels,
                        properties,
                        args.state,
                        settings,
                        stopper=stopper,
                        visited=visited,
                        workers=args.workers,
                        session=session,
                        loaders=loaders,
                    )
    except InvalidArgument as exc:
        return _error(exc)
    print(f"\nstopped: {state.invocations[-1].stopped}\n", flush=True)
    print(summary(state, state_path), flush=True)
    return EXIT_OK if state.ok else EXIT_FAILED
