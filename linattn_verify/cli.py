# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The ``linattn-verify`` command line.

``run``  verifies the built-in Triton kernels (all three forms), and FLA's when it is installed,
         against the oracle on cases drawn by the Hypothesis strategies, forward and backward,
         and writes JSON lines as cases finish.
``check TARGET`` validates a third-party kernel (``module:function`` or ``file.py:function``)
         against the property catalogue its declared capabilities allow.
``replay FILE`` re-runs a saved failure (from ``--linattn-failures`` or ``run``) and says
         whether it reproduces.
``list`` shows the registered kernels and their precision recipes.
``report RUN_DIR`` renders a run's Markdown and HTML report again (``--compare BASELINE_DIR``:
         side by side with an earlier run, regressions flagged; exit 1 when one is).

Exit status: 0 when every case passed, 1 when one failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORM_NAMES = ("parallel", "chunk", "recurrent")
DTYPE_NAMES = ("float32", "float16", "bfloat16")
DEFAULT_RUN_KERNELS = ("triton/*", "fla/*")


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


def _globs(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated globs but got {text!r}")
    return items


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
        "--kernels",
        type=_globs,
        default=DEFAULT_RUN_KERNELS,
        help="comma-separated globs over kernel names (see `list`); FLA's kernels are included "
        "when FLA is installed. Default: %(default)s",
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
        "--workers",
        type=_positive,
        default=1,
        help="worker processes the (kernel, dtype) groups are spread over. Default: 1",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports/latest"),
        help="report directory. Default: %(default)s",
    )
    _add_check_parser(sub)
    _add_report_parser(sub)
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
    if args.command == "report":
        return _report(args)
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
        "--even-head-dims",
        type=_csv(DTYPE_NAMES),
        default=(),
        metavar="DTYPES",
        help="dtypes in which K and V must be even (FLA's 16-bit chunked backward). Default: none",
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
    run.add_argument(
        "--fail-fast", action="store_true", help="stop at the first property that fails"
    )
    run.add_argument(
        "--isolation",
        choices=("auto", "process", "none"),
        default="auto",
        help="'process': check in a child process the kernel may crash (restarted after a "
        "crash or hang); 'auto': a process on CUDA, none on a CPU. Default: %(default)r",
    )


def _check(args: argparse.Namespace) -> int:
    import tempfile

    from linattn_verify.checking import CheckListener, SearchSettings, check_kernel
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.isolation import check_isolated
    from linattn_verify.registry import registered_properties

    try:
        import torch

        source = _kernel_source(args, on_cuda=torch.cuda.is_available())
        isolate = args.isolation == "process" or (
            args.isolation == "auto" and torch.cuda.is_available()
        )
        # Load once here even when isolated: a target that cannot be loaded is a usage error.
        kernel = source.load()
        properties = registered_properties()
    except InvalidArgument as exc:
        print(f"linattn-verify check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = sys.stderr if args.json else sys.stdout
    print(f"linattn-verify check {args.target}", file=out)
    print(f"  assumed: {source.capabilities}", file=out)
    print(f"  recipe:  {source.recipe}", file=out)
    print(
        f"  budget {args.budget:g} s over {len(properties)} properties"
        f"{', each kernel process isolated' if isolate else ''}",
        file=out,
    )
    report_dir = args.report or Path(tempfile.mkdtemp(prefix="linattn-check-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    writer = _check_writer(args, report_dir, kernel)

    class Printer(CheckListener):
        def progress(self, line: str) -> None:
            print(line, file=out, flush=True)

        def case_finished(self, record: dict[str, Any]) -> None:
            writer.add_case(record)

    search = SearchSettings(
        budget=args.budget,
        seed=args.seed,
        max_seq_len=args.max_seq_len,
        max_head_dim=min(16, args.max_head_dim),
        failures_dir=report_dir / "failures",
        fail_fast=args.fail_fast,
    )
    if isolate:
        report = check_isolated(source, list(properties), search, listener=Printer())
    else:
        report = check_kernel(kernel, properties, search, listener=Printer())
    document = {
        **report.to_json(),
        "source": source.to_json(),
        "isolated": isolate,
        "arguments": {k: str(v) for k, v in vars(args).items()},
    }
    (report_dir / "check.json").write_text(json.dumps(document, indent=2, default=str))
    for outcome in report.outcomes:
        writer.add_verdict(
            outcome.property,
            kernel=kernel.name,
            ok=outcome.ok,
            examples=outcome.examples,
            skipped=outcome.skipped,
            seconds=outcome.seconds,
            message=outcome.message,
            failure_file=outcome.failure_file,
            not_run=outcome.not_run,
        )
    writer.finish()
    if args.json:
        print(json.dumps(document, default=str))
    for outcome in report.outcomes:
        if not outcome.ok:
            print(f"\n{outcome.message}", file=out)
    counts = {s: sum(o.status() == s for o in report.outcomes) for s in ("held", "n/a", "not run")}
    failed = sum(not o.ok for o in report.outcomes)
    first = report.first_failure_seconds
    when = "" if first is None else f"; first failure at {first:.1f} s"
    print(
        f"\n{counts['held']} held, {failed} failed, {counts['n/a']} not applicable, "
        f"{counts['not run']} not run ({report.seconds:.1f} s{when}; report in {report_dir})",
        file=out,
    )
    return EXIT_OK if report.ok else EXIT_FAILED


def _add_report_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="render a run's report (Markdown, HTML with plots), or compare two runs",
        description="RUN_DIR is a directory written by `run` or `check --report`; an "
        "interrupted run is rebuilt from its results.jsonl. Exit status: 0 when the report was "
        "written, 1 when --compare flags a regression, 2 when a directory holds no run.",
    )
    report.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run to report on")
    report.add_argument(
        "--out", type=Path, default=None, help="where to write the report. Default: RUN_DIR"
    )
    report.add_argument(
        "--compare",
        metavar="BASELINE_DIR",
        type=Path,
        default=None,
        help="also compare RUN_DIR with this earlier run (comparison.md, comparison.html): a "
        "10x jump in max r or max rho on an unchanged precision recipe, or a property that "
        "newly fails, is a regression",
    )


def _report(args: argparse.Namespace) -> int:
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.reporting import (
        compare_runs,
        load_run,
        render_comparison_html,
        render_comparison_markdown,
        render_report,
    )

    try:
        document = load_run(args.run_dir)
        baseline = None if args.compare is None else load_run(args.compare)
    except InvalidArgument as exc:
        print(f"linattn-verify report: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = args.out or args.run_dir
    files = render_report(document, out)
    if document["status"] != "complete":
        print(f"{args.run_dir} did not finish: reporting the cases in its results.jsonl")
    print(f"wrote {files.markdown} and {files.html}")
    if baseline is None:
        return EXIT_OK
    comparison = compare_runs(
        baseline, document, before_label=str(args.compare), after_label=str(args.run_dir)
    )
    (out / "comparison.md").write_text(render_comparison_markdown(comparison))
    (out / "comparison.html").write_text(render_comparison_html(comparison))
    for row in comparison.scores:
        if row.regression:
            print(f"REGRESSION {row.kernel} {row.dtype} {row.tensor}: {'; '.join(row.notes)}")
    for change in comparison.verdicts:
        if change.regression:
            print(f"REGRESSION {change.kernel} {change.property}: {change.before} -> failed")
    print(
        f"{comparison.regressions} regressions against {args.compare}; wrote "
        f"{out / 'comparison.md'} and {out / 'comparison.html'}"
    )
    return EXIT_FAILED if comparison.regressed else EXIT_OK


def _check_writer(args: argparse.Namespace, report_dir: Path, kernel: Any) -> Any:
    """The `RunWriter` of a check: cases as they finish, the report (run.json, report.*) after."""
    from linattn_verify._runner import environment
    from linattn_verify.reporting import RunWriter

    arguments = {
        k: v if isinstance(v, int | float | bool) else str(v) for k, v in vars(args).items()
    }
    writer = RunWriter(
        report_dir, command="check", environment=environment(), arguments=arguments, seed=args.seed
    )
    writer.add_kernel(kernel)
    return writer


def _kernel_source(args: argparse.Namespace, *, on_cuda: bool) -> Any:
    """The kernel under test as ``check``'s flags describe it (a `KernelSource`)."""
    from linattn_verify.kernel import Capabilities
    from linattn_verify.recipe import PrecisionRecipe
    from linattn_verify.targets import KernelSource

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
        even_head_dims=args.even_head_dims,
        deterministic=not args.nondeterministic,
    )
    return KernelSource(
        target=args.target,
        capabilities=capabilities,
        recipe=recipe,
        form=args.form,
        timeout=args.timeout,
    )


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

    from linattn_verify._runner import select_kernels

    for kernel in select_kernels(["*"]):
        name = kernel.name
        fn = kernel.fn
        print(f"{name}: {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}")
        print(f"  capabilities: {kernel.capabilities}")
        for dtype in kernel.capabilities.dtypes:
            print(f"  recipe {dtype:9s} {kernel.precision_recipe(getattr(torch, dtype))}")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from linattn_verify._runner import GroupSettings, environment, select_kernels
    from linattn_verify.errors import InvalidArgument

    try:
        kernels = select_kernels(args.kernels)
    except InvalidArgument as exc:
        print(f"linattn-verify run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    groups = [(k, d) for k in kernels for d in args.dtypes if d in k.capabilities.dtypes]
    settings = GroupSettings(
        examples=args.examples,
        max_seq_len=args.max_seq_len,
        seed=args.seed,
        backward=not args.no_backward,
        failures_dir=args.out / "failures",
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
    from linattn_verify._runner import progress_line, run_group, run_group_in_worker

    if workers <= 1:
        for kernel, dtype in groups:

            def emit_and_print(record: dict[str, Any]) -> None:
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
    counts: dict[tuple[str, str], list[int]] = {}
    for case in document["cases"]:
        tally = counts.setdefault((case["kernel"], case["dtype"]), [0, 0])
        tally[0] += 1
        tally[1] += int(case["ok"])
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
    rows.append(f"{totals['passed']} passed, {totals['cases'] - totals['passed']} failed")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
