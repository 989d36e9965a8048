# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The ``linattn-verify`` command line.

``run``  verifies the built-in Triton kernels (all three forms), and FLA's when it is installed,
         against the oracle on cases drawn by the Hypothesis strategies, forward and backward,
         and writes JSON lines as cases finish.
``check TARGET`` validates a third-party kernel (``module:function`` or ``file.py:function``)
         against the property catalogue its declared capabilities allow.
``replay FILE`` re-runs a saved failure (from ``--linattn-failures``, ``run`` or ``check``) and
         says whether it reproduces.
``list`` shows the registered kernels and their precision recipes.
``soak`` searches (kernel, property) pairs round-robin for hours, across invocations, keeping
         counts and failures in a state file (``--summary``: print its table).
``drift KERNEL`` measures the error of o and the final state, and their bound, as T grows to
         65,536 (per input dtype and state dtype, within a budget) and plots error vs T.
``report RUN_DIR`` renders a run's Markdown and HTML report again (``--compare BASELINE_DIR``:
         side by side with an earlier run, regressions flagged; exit 1 when one is).

Exit status: 0 when every case passed, 1 when one failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from linattn_verify.cli import check, drift, report, run, soak
from linattn_verify.cli._args import (
    DEFAULT_FAMILY,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    family_in,
    foreign_flags,
)
from linattn_verify.cli.inspect import list_kernels, replay_command
from linattn_verify.interpreter import InterpreterPatchError


def build_parser(family: str = DEFAULT_FAMILY) -> argparse.ArgumentParser:
    """Return the argument parser (exposed for the tests and the docs).

    Args:
        family: The family whose flags ``check`` and ``drift`` take (`family_in` of the command
            line). Default: ``linear_attn``.
    """
    parser = argparse.ArgumentParser(
        prog="linattn-verify", description="Verify linear-attention kernels against oracles."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_parser(sub)
    check.add_parser(sub, family)
    report.add_parser(sub)
    soak.add_parser(sub)
    drift.add_parser(sub, family)
    replay = sub.add_parser("replay", help="re-run a saved failure and say if it reproduces")
    replay.add_argument("file", type=Path, help="a saved failure (.json) from a failures directory")
    replay.add_argument(
        "--manifest",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help="a kernel manifest declaring the failure's kernel (as given to soak): the kernel is "
        "loaded from it by name, not from the file path saved with the failure, which is the "
        "path on the machine that found it; repeatable",
    )
    sub.add_parser("list", help="list the registered kernels and their precision recipes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``linattn-verify`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    family = family_in(argv)
    if argv and argv[0] in ("check", "drift") and (foreign := foreign_flags(argv, family)):
        print(
            f"linattn-verify {argv[0]}: error: Got {', '.join(foreign)} with --family {family}: "
            "each flag describes a kernel of the family named after it.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    args = build_parser(family).parse_args(argv)
    try:
        return _dispatch(args)
    except InterpreterPatchError as exc:
        # Raised loading a kernel, before any search: the installed Triton is not one the
        # interpreter's fixes were written for. One line, exit 2 (the environment, not a kernel).
        wanted = f"triton {exc.supported}" if exc.supported else "a triton whose internals match"
        print(
            f"linattn-verify {args.command}: error: triton {exc.installed} is installed, but "
            f"running kernels under the Triton interpreter (no CUDA) needs {wanted}: install "
            "that, or run on a CUDA GPU.",
            file=sys.stderr,
        )
        return EXIT_USAGE


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command."""
    if args.command == "list":
        return list_kernels()
    if args.command == "replay":
        return replay_command(args.file, manifests=args.manifest or [])
    if args.command == "check":
        return check.command(args)
    if args.command == "report":
        return report.command(args)
    if args.command == "soak":
        return soak.command(args)
    if args.command == "drift":
        return drift.command(args)
    return run.command(args)


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]
