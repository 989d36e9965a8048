# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify drift KERNEL``: error and bound of o and the final state as T grows."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from linattn_verify.cli._args import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from linattn_verify.core.arguments import dtypes_of, positive, seconds
from linattn_verify.typing import KERNEL_DTYPES


def power_of_two(text: str) -> int:
    """Parse a positive power of two."""
    value = positive(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected a power of two but got {text!r}")
    return value


def add_parser(sub: Any, family: str) -> None:
    """Add the ``drift`` subcommand."""
    drift = sub.add_parser(
        "drift",
        help="measure a kernel's error and bound as T grows (to 65,536 tokens)",
        description="Measure, on realistic inputs, the error of o and of the final state "
        "against the float64 oracle and the bound of the kernel's declared recipe for T = "
        "START_T, 2 START_T, ... MAX_T (prefixes of one draw), per input dtype and state "
        "dtype, within a time budget. KERNEL is a registered name (see `list`) or a "
        "'module:function' / 'file.py:function' target described by check's flags.",
    )
    drift.add_argument("kernel", metavar="KERNEL", help="a registered kernel or a target")
    drift.add_argument(
        "--dtypes",
        type=dtypes_of(KERNEL_DTYPES),
        default=("float32",),
        help="input dtypes (fp32, fp16, bf16 or the torch names). Default: float32",
    )
    drift.add_argument(
        "--state-dtypes",
        type=dtypes_of(KERNEL_DTYPES),
        default=("float32",),
        help="dtypes the state is read in: float32 (the kernel as declared) and, for kernels "
        "with a state_dtype= option (torch/chunk, torch/delta.chunk), float16, bfloat16 (or "
        "fp32, fp16, bf16). Default: float32",
    )
    drift.add_argument(
        "--start-T", type=power_of_two, default=64, help="first T. Default: %(default)r"
    )
    drift.add_argument(
        "--max-T", type=power_of_two, default=65536, help="last T. Default: %(default)r"
    )
    drift.add_argument(
        "--budget",
        type=seconds,
        default=300.0,
        help="wall-clock seconds; no T is started that is predicted to end past it. "
        "Default: %(default)r",
    )
    drift.add_argument(
        "--gate",
        choices=("auto", "scalar", "vector", "none"),
        default="auto",
        help="the decay drawn: a scalar gate logsigmoid(N(6, 1)), a vector gate (one per key "
        "dimension, linear family) or none; auto: scalar where the kernel takes one, vector "
        "where it requires one. Default: %(default)s",
    )
    drift.add_argument("--batch", type=positive, default=1, help="B. Default: %(default)r")
    drift.add_argument("--heads", type=positive, default=2, help="H. Default: %(default)r")
    drift.add_argument("--head-dim", type=positive, default=32, help="K. Default: %(default)r")
    drift.add_argument("--value-dim", type=positive, default=32, help="V. Default: %(default)r")
    drift.add_argument("--seed", type=int, default=0, help="seed of the inputs. Default: 0")
    drift.add_argument(
        "--out",
        type=Path,
        default=Path("reports/drift"),
        help="directory for drift.json, drift.md, drift.png. Default: %(default)s",
    )
    drift.add_argument("-v", "--verbose", action="store_true", help="print a line per point")
    from linattn_verify.cli.check import add_target_flags

    # check's own flags describe a target, parsed and defaulted alike; drift has its --dtypes.
    add_target_flags(drift, family, dtypes=False)


def _target_flags_given(args: argparse.Namespace, parser_defaults: dict[str, Any]) -> list[str]:
    return [f"--{k.replace('_', '-')}" for k, v in parser_defaults.items() if getattr(args, k) != v]


def load_kernel(args: argparse.Namespace) -> Any:
    """The kernel KERNEL names: registered, or a target as check's flags describe it.

    Raises:
        InvalidArgument: for an unknown name, a target that cannot be loaded, or target flags
            given with a registered name.
    """
    import torch

    from linattn_verify.core.family import family_named
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.registry import get_kernel

    if ":" not in args.kernel:
        defaults = _target_defaults(args.family)
        if given := _target_flags_given(args, defaults):
            raise InvalidArgument(
                f"Got {', '.join(given)} with the registered kernel {args.kernel!r}: those flags "
                "describe a module:function target (a registered kernel declares itself)."
            )
        return get_kernel(args.kernel)
    target_args = argparse.Namespace(**vars(args))
    target_args.target = args.kernel
    # The budget governs a drift; a call is not cut short on its own (0: no per-call limit).
    target_args.timeout = 0.0
    source = family_named(args.family).source_from_args(
        target_args, on_cuda=torch.cuda.is_available()
    )
    return source.load()


def _target_defaults(family: str) -> dict[str, Any]:
    """The defaults of the target flags: a registered kernel must leave them all as they are."""
    from linattn_verify.cli.check import add_target_flags

    scratch = argparse.ArgumentParser(add_help=False)
    add_target_flags(scratch, family, dtypes=False)
    return vars(scratch.parse_args([])) | {"family": "linear_attn"}


def command(args: argparse.Namespace) -> int:
    """``linattn-verify drift KERNEL``."""
    from linattn_verify._device import environment
    from linattn_verify.drift import DriftPoint, DriftSettings, measure_drift, prepare_drift
    from linattn_verify.drift_report import drift_document, summary_lines, write_drift
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.progress import Progress
    from linattn_verify.typing import torch_dtype

    try:
        if args.max_T < args.start_T:
            raise InvalidArgument(
                f"Got --max-T {args.max_T} < --start-T {args.start_T}; --max-T must be >= "
                "--start-T."
            )
        settings = DriftSettings(
            dtypes=args.dtypes,
            state_dtypes=args.state_dtypes,
            start_T=args.start_T,
            max_T=args.max_T,
            budget=args.budget,
            batch=args.batch,
            heads=args.heads,
            head_dim=args.head_dim,
            value_dim=args.value_dim,
            gate=args.gate,
            seed=args.seed,
        )
        kernel = load_kernel(args)
        _, variants = prepare_drift(kernel, settings)
    except InvalidArgument as exc:
        print(f"linattn-verify drift: error: {_flagged(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    recipes = {
        f"{v.dtype}/{v.state_dtype}": repr(v.kernel.precision_recipe(torch_dtype(v.dtype)))
        for v in variants
    }
    print(
        f"linattn-verify drift {kernel.name}: T {settings.start_T}..{settings.max_T}, "
        f"{len(variants)} (dtype, state dtype) variants, budget {settings.budget:g} s"
    )
    total = len(variants) * len(settings.lengths)
    with Progress("drift", total, verbose=args.verbose, unit="points") as bar:

        def on_point(p: DriftPoint) -> None:
            parts = ", ".join(
                f"{n} err {t.max_err:.2e} B {t.max_bound:.2e} r {t.max_r:.3g}"
                for n, t in p.tensors.items()
            )
            bar.advance(
                failed=p.failed,
                line=f"{p.dtype}/{p.state_dtype} T={p.T}: {parts} "
                f"({p.kernel_seconds:.1f} s kernel, {p.oracle_seconds:.1f} s oracle+bound)",
            )

        try:
            result = measure_drift(kernel, settings, on_point=on_point)
        except InvalidArgument as exc:
            bar.print(f"linattn-verify drift: error: {exc}")
            return EXIT_USAGE
    arguments = {
        k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
    }
    document = drift_document(
        result, arguments=arguments, environment=environment(), recipes=recipes
    )
    paths = write_drift(args.out, document)
    print("\n".join(summary_lines(document)))
    print(f"\nreached T = {document['reached_T']} in {result.seconds:.0f} s: {result.reason}")
    for failure in document["failures"]:
        r = failure["max_r"]
        print(
            f"FAILED {kernel.name} {failure['dtype']}/{failure['state_dtype']} T={failure['T']} "
            f"{failure['tensor']}: r = {'inf (non-finite)' if r is None else f'{r:.3g}'} > 2, "
            "the kernel exceeded its declared bound"
        )
    print(f"written: {paths['json']}, {paths['md']}, {paths['png']}")
    return EXIT_OK if document["ok"] else EXIT_FAILED


def _flagged(message: str) -> str:
    """Name the command-line flag where a message names a setting (``dtypes=`` -> --dtypes)."""
    settings = "state_dtypes|dtypes|gate|start_T|max_T|budget|batch|heads|head_dim|value_dim"
    return re.sub(rf"\b({settings})=", lambda m: f"--{m.group(1).replace('_', '-')} ", message)


__all__ = ["add_parser", "command", "load_kernel", "power_of_two"]
