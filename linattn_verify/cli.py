# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The ``linattn-verify`` command line.

``run``  verifies the built-in Triton kernels (all three forms) against the oracle on cases drawn
         by the Hypothesis strategies, forward and backward, and writes JSON lines as cases finish.
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
        default=4,
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
    return _run(args)


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
            _run_group(form, dtype, args, records, lines_path)
    summary = _summarize(records, env, args)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(_table(summary))
    failed = [r for r in records if not r["ok"]]
    for r in failed:
        print(f"\nFAILED triton/{r['form']}: {r.get('error') or r.get('report')}")
    return EXIT_FAILED if failed else EXIT_OK


def _run_group(
    form: str, dtype: str, args: argparse.Namespace, records: list[dict[str, Any]], lines_path: Path
) -> None:
    """Verify ``triton/<form>`` on ``args.examples`` drawn cases of one dtype."""
    from hypothesis import Phase, given, seed, settings

    from linattn_verify._runner import verify_case
    from linattn_verify.strategies import problem_specs

    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(spec=problem_specs(max_seq_len=args.max_seq_len, dtypes=(dtype,)))
    def one(spec: Any) -> None:
        started = time.perf_counter()
        try:
            record = verify_case(form, spec, backward=not args.no_backward)
        except Exception as exc:  # the kernel crashed: a failed case, not a harness crash
            record = {
                "form": form,
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
            f"  {status} triton/{form:9s} {dtype:8s} worst r={record.get('worst_r', 0.0):.3g} "
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
        key = f"{r['form']}/{r.get('dtype', '?')}"
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
            f"{'triton/' + key:26s} {g['cases']:5d} {g['passed']:6d} {g['worst_r']:8.3g} "
            f"{g['max_rho']:9.3g} {g['median_rho']:8.3g}  {g['worst_tensor']}"
        )
    rows.append(f"{summary['passed']} passed, {summary['cases'] - summary['passed']} failed")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
