# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The ``linattn-verify`` command line.

``run``  verifies the built-in Triton kernels (all three forms) against the oracle on cases drawn
         by the Hypothesis strategies, forward and backward, and writes JSON lines as cases finish.
``check TARGET`` validates a third-party kernel (``module:function`` or ``file.py:function``)
         against the property catalogue its declared capabilities allow.
``replay FILE`` re-runs a saved failure (from ``--linattn-failures`` or ``run``) and says
         whether it reproduces.
``list`` shows the registered kernels and their precision recipes.

Exit status: 0 when every case passed, 1 when one failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORM_NAMES = ("parallel", "chunk", "recurrent")
DTYPE_NAMES = ("float32", "float16", "bfloat16")


def _csv(choices: Sequence[str]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [x for x in items if x not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(choices)} but got {text!r}"
            )
        return items

    return parse


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser (exposed for the tests and the docs)."""
    parser = argparse.ArgumentParser(
        prog="linattn-verify", description="Verify linear-attention kernels against oracles."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="verify the built-in kernels and write a report")
    run.add_argument(
        "--forms",
        type=_csv(FORM_NAMES),
        default=FORM_NAMES,
        help="kernel forms to verify. Default: %(default)s",
    )
    run.add_argument(
        "--dtypes",
        type=_csv(DTYPE_NAMES),
        default=DTYPE_NAMES,
        help="input dtypes. Default: %(default)s",
    )
    run.add_argument(
        "--examples",
        type=_positive,
        default=20,
        help="cases per form and dtype. Default: %(default)s",
    )
    run.add_argument(
        "--max-seq-len", type=_positive, default=48, help="longest T drawn. Default: %(default)s"
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the case draw. Default: 0")
    run.add_argument("--no-backward", action="store_true", help="check the forward pass only")
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports/latest"),
        help="report directory. Default: %(default)s",
    )
    _add_check_parser(sub)
    replay = sub.add_parser("replay", help="re-run a saved failure and say if it reproduces")
    replay.add_argument("file", type=Path, help="a saved failure (.json) from a failures directory")
    sub.add_parser("list", help="list the registered kernels and their precision recipes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``linattn-verify`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "replay":
        return _replay(args.file)
    if args.command == "check":
        return _check(args)
    return _run(args)


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number but got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 but got {text!r}")
    return value


def _add_check_parser(sub: Any) -> None:
    check = sub.add_parser(
        "check",
        help="validate a third-party kernel against the property catalogue",
        description="TARGET is 'package.module:function' or 'path/to/file.py:function', a kernel "
        "in the calling convention fn(q, k, v[, g], *, scale, initial_state, "
        "output_final_state[, cu_seqlens]).",
    )
    check.add_argument("target", metavar="TARGET")
    sem = check.add_argument_group("what the kernel computes")
    sem.add_argument("--normalized", action="store_true", help="output is divided by s q·z + eps")
    sem.add_argument(
        "--eps",
        type=_nonnegative_float,
        default=0.0,
        help="eps of the normalizer. Default: %(default)r",
    )
    sem.add_argument(
        "--decay",
        choices=("none", "data"),
        default="none",
        help="'data': the kernel takes g [B, T, H]. Default: %(default)r",
    )
    sem.add_argument(
        "--feature-map",
        choices=("identity", "elu1", "relu"),
        default="identity",
        help="feature map the kernel applies itself. Default: %(default)r",
    )
    cap = check.add_argument_group("what the kernel supports")
    cap.add_argument("--varlen", action="store_true", help="accepts cu_seqlens")
    cap.add_argument("--no-backward", action="store_true", help="not differentiable")
    cap.add_argument("--no-initial-state", action="store_true", help="takes no initial_state")
    cap.add_argument("--no-final-state", action="store_true", help="returns no final state")
    cap.add_argument(
        "--dtypes",
        type=_csv(DTYPE_NAMES),
        default=DTYPE_NAMES,
        help="input dtypes. Default: %(default)s",
    )
    cap.add_argument(
        "--max-head-dim", type=_positive, default=256, help="largest K and V. Default: %(default)r"
    )
    cap.add_argument(
        "--nondeterministic",
        action="store_true",
        help="reruns may differ (within the bound); by default they must be identical",
    )
    rec = check.add_argument_group("precision recipe (how the kernel rounds)")
    rec.add_argument(
        "--form",
        choices=FORM_NAMES,
        default=None,
        help="algorithm; unknown charges the counts of all three. Default: unknown",
    )
    rec.add_argument(
        "--chunk-size",
        type=_positive,
        default=64,
        help="chunk size of a chunked kernel. Default: %(default)r",
    )
    rec.add_argument(
        "--dot-precision",
        choices=("ieee", "tf32", "tf32x3"),
        default=None,
        help="tl.dot input precision for fp32. Default: ieee on a CPU, tf32 on CUDA",
    )
    rec.add_argument(
        "--intermediate-dtype",
        choices=("none", "input", "float16", "bfloat16"),
        default="none",
        help="dtype intermediates are rounded to. Default: none",
    )
    rec.add_argument(
        "--casts",
        type=int,
        default=1,
        help="roundings to it on one term's path. Default: %(default)r",
    )
    run = check.add_argument_group("the search")
    run.add_argument(
        "--budget",
        type=_nonnegative_float,
        default=60.0,
        help="wall-clock seconds for the whole check. Default: %(default)r",
    )
    run.add_argument(
        "--timeout",
        type=_nonnegative_float,
        default=60.0,
        help="seconds one kernel call may take. Default: %(default)r",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the search. Default: 0")
    run.add_argument(
        "--max-seq-len", type=_positive, default=32, help="longest T drawn. Default: %(default)r"
    )
    run.add_argument(
        "--report", type=Path, default=None, help="directory for the results and saved failures"
    )
    run.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _check(args: argparse.Namespace) -> int:
    import tempfile

    from linattn_verify.checking import check_kernel, load_target, with_timeout
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.kernel import Capabilities, Kernel
    from linattn_verify.recipe import PrecisionRecipe
    from linattn_verify.registry import registered_properties

    try:
        import torch

        from linattn_verify import interpreter

        if not torch.cuda.is_available():
            # Third-party Triton kernels are decorated when their module is imported.
            interpreter.enable()
        fn = load_target(args.target)
        on_cuda = torch.cuda.is_available()
        dot = args.dot_precision or ("tf32" if on_cuda else "ieee")
        # argparse restricted these strings to the recipe's choices; PrecisionRecipe rechecks.
        recipe = PrecisionRecipe.from_dict(
            {
                "form": args.form,
                "chunk_size": args.chunk_size,
                "accumulation": "mma" if on_cuda and dot != "ieee" else "ieee",
                "dot_precision": dot,
                "intermediate_dtype": None
                if args.intermediate_dtype == "none"
                else args.intermediate_dtype,
                "casts_on_path": 0 if args.intermediate_dtype == "none" else args.casts,
                "decay_scan": {"recurrent": "per_step", "parallel": "global"}.get(
                    args.form or "", "chunk_local"
                ),
            }
        )
        capabilities = Capabilities(
            normalize=(args.normalized,),
            eps=args.eps if args.normalized else 0.0,
            feature_maps=(args.feature_map,),
            decay=args.decay == "data",
            backward=not args.no_backward,
            varlen=args.varlen,
            initial_state=not args.no_initial_state,
            final_state=not args.no_final_state,
            dtypes=args.dtypes,
            max_head_dim=args.max_head_dim,
            deterministic=not args.nondeterministic,
        )
        kernel = with_timeout(
            Kernel(
                name=args.target, fn=fn, capabilities=capabilities, recipe=recipe, form=args.form
            ),
            args.timeout,
        )
        properties = registered_properties()
    except InvalidArgument as exc:
        print(f"linattn-verify check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = sys.stderr if args.json else sys.stdout
    print(f"linattn-verify check {args.target}", file=out)
    print(f"  assumed: {capabilities}", file=out)
    print(f"  recipe:  {recipe}", file=out)
    print(f"  budget {args.budget:g} s over {len(properties)} properties", file=out)
    report_dir = args.report or Path(tempfile.mkdtemp(prefix="linattn-check-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    report = check_kernel(
        kernel,
        properties,
        budget=args.budget,
        seed=args.seed,
        max_seq_len=args.max_seq_len,
        max_head_dim=min(16, args.max_head_dim),
        failures_dir=report_dir / "failures",
        progress=lambda line: print(line, file=out, flush=True),
    )
    document = {
        **report.to_json(),
        "capabilities": capabilities.__dict__,
        "recipe": recipe.__dict__,
        "arguments": {k: str(v) for k, v in vars(args).items()},
    }
    (report_dir / "check.json").write_text(json.dumps(document, indent=2, default=str))
    if args.json:
        print(json.dumps(document, default=str))
    for outcome in report.outcomes:
        if not outcome.ok:
            print(f"\n{outcome.message}", file=out)
    held = sum(o.ok for o in report.outcomes)
    print(
        f"\n{held} passed, {len(report.outcomes) - held} failed "
        f"({report.seconds:.1f} s; report in {report_dir})",
        file=out,
    )
    return EXIT_OK if report.ok else EXIT_FAILED


def _replay(path: Path) -> int:
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.failures import replay
    from linattn_verify.registry import registered_kernels, registered_properties

    try:
        result = replay(path, properties=registered_properties(), kernels=registered_kernels())
    except (InvalidArgument, FileNotFoundError, ValueError) as exc:
        print(f"linattn-verify replay: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(result.report())
    if result.ok:
        print(f"\nDoes not reproduce: {result.property} now holds for {result.kernel}.")
        return EXIT_OK
    print(f"\nReproduces: {result.property} still fails for {result.kernel}.")
    return EXIT_FAILED


def _list() -> int:
    import torch

    from linattn_verify.registry import registered_kernels

    for name, kernel in registered_kernels().items():
        fn = kernel.fn
        print(f"{name}: {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}")
        print(f"  capabilities: {kernel.capabilities}")
        for dtype in kernel.capabilities.dtypes:
            print(f"  recipe {dtype:9s} {kernel.precision_recipe(getattr(torch, dtype))}")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from linattn_verify._runner import environment
    from linattn_verify.registry import get_kernel

    args.out.mkdir(parents=True, exist_ok=True)
    lines_path = args.out / "results.jsonl"
    lines_path.write_text("")
    env = environment()
    print(
        f"linattn-verify run: {env['device']} ({env['triton_mode']}), torch {env['torch']}, "
        f"triton {env['triton']}"
    )
    print(f"writing {lines_path}")
    records: list[dict[str, Any]] = []
    for form in args.forms:
        for dtype in args.dtypes:
            _run_group(get_kernel(f"triton/{form}"), dtype, args, records, lines_path)
    summary = _summarize(records, env, args)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(_table(summary))
    failed = [r for r in records if not r["ok"]]
    for r in failed:
        print(f"\nFAILED {r['kernel']}: {r.get('error') or r.get('report')}")
    return EXIT_FAILED if failed else EXIT_OK


def _run_group(
    kernel: Any,
    dtype: str,
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    lines_path: Path,
) -> None:
    """Verify ``kernel`` on ``args.examples`` drawn cases of one dtype."""
    from dataclasses import replace

    from hypothesis import Phase, given, seed, settings

    from linattn_verify._runner import verify_case
    from linattn_verify.strategies import kernel_specs

    one_dtype = replace(kernel, capabilities=replace(kernel.capabilities, dtypes=(dtype,)))

    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(spec=kernel_specs(one_dtype, max_seq_len=args.max_seq_len))
    def one(spec: Any) -> None:
        started = time.perf_counter()
        try:
            record = verify_case(kernel, spec, backward=not args.no_backward)
        except Exception as exc:  # a harness error on this case: report it, keep going
            record = {
                "kernel": kernel.name,
                "dtype": dtype,
                "spec": repr(spec),
                "ok": False,
                "error": "".join(traceback.format_exception_only(exc)).strip(),
            }
        record["seconds"] = round(time.perf_counter() - started, 3)
        records.append(record)
        with lines_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        status = "ok  " if record["ok"] else "FAIL"
        print(
            f"  {status} {kernel.name:16s} {dtype:8s} worst r={record.get('worst_r', 0.0):.3g} "
            f"({record['seconds']:.1f}s) {record.get('case', record['spec'])}",
            flush=True,
        )

    one()


def _summarize(
    records: list[dict[str, Any]], env: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    import statistics

    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        key = f"{r['kernel']}/{r.get('dtype', '?')}"
        g = groups.setdefault(
            key, {"cases": 0, "passed": 0, "worst_r": 0.0, "worst_tensor": "", "rho": []}
        )
        g["cases"] += 1
        g["passed"] += int(r["ok"])
        if r.get("worst_r", 0.0) >= g["worst_r"]:
            g["worst_r"], g["worst_tensor"] = r.get("worst_r", 0.0), r.get("worst_tensor", "")
        g["rho"] += [t["max_rho"] for t in r.get("tensors", {}).values()]
    for g in groups.values():
        rho = g.pop("rho")
        g["max_rho"] = max(rho, default=0.0)
        g["median_rho"] = statistics.median(rho) if rho else 0.0
    return {
        "environment": env,
        "arguments": {
            "forms": list(args.forms),
            "dtypes": list(args.dtypes),
            "examples": args.examples,
            "max_seq_len": args.max_seq_len,
            "seed": args.seed,
            "backward": not args.no_backward,
        },
        "python": platform.python_version(),
        "groups": groups,
        "passed": sum(g["passed"] for g in groups.values()),
        "cases": sum(g["cases"] for g in groups.values()),
    }


def _table(summary: dict[str, Any]) -> str:
    rows = [
        f"\n{'kernel':26s} {'cases':>5s} {'passed':>6s} {'worst r':>8s} {'max rho':>9s} "
        f"{'med rho':>8s}  worst tensor"
    ]
    for key, g in summary["groups"].items():
        rows.append(
            f"{key:26s} {g['cases']:5d} {g['passed']:6d} {g['worst_r']:8.3g} "
            f"{g['max_rho']:9.3g} {g['median_rho']:8.3g}  {g['worst_tensor']}"
        )
    rows.append(f"{summary['passed']} passed, {summary['cases'] - summary['passed']} failed")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
