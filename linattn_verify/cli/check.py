# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify check TARGET``: validate a third-party kernel against the catalogue."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from linattn_verify.cli._args import (
    DEFAULT_FAMILY,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from linattn_verify.core.arguments import (
    dtype_name,
    dtypes_of,
    nonnegative_float,
    positive,
    seconds,
)
from linattn_verify.core.convention import AXIS_ORDERS, STATE_ORDERS
from linattn_verify.core.family import families
from linattn_verify.typing import (
    FINAL_STATE_DTYPES,
    FORMS,
    KERNEL_DTYPES,
    ScaleConvention,
)

if TYPE_CHECKING:
    import torch


def add_target_flags(parser: Any, family: str, *, dtypes: bool = True) -> None:
    """Add the flags that describe a ``module:function`` target (``check``, ``drift``, manifests).

    ``--family``, what every family's kernel supports and promises, its precision recipe, and
    the flags of ``family`` only (`Family.add_flags`): a flag of another family is unknown.

    Args:
        parser: The subcommand's parser.
        family: The family the command line names (`family_in`); an unknown name adds no
            family's flags, and ``--family``'s choices reject it.
        dtypes: Add ``--dtypes`` too (``drift`` has its own). Default: `True`.
    """
    known = families()
    parser.add_argument(
        "--family",
        choices=sorted(known),
        default=DEFAULT_FAMILY,
        help="the function the kernel computes: "
        + ", ".join(f"'{name}' ({f.description})" for name, f in sorted(known.items()))
        + ". Each family adds its own flags (see --family NAME --help). Default: %(default)s",
    )
    if family in known:
        known[family].add_flags(parser)
    cap = parser.add_argument_group("what the kernel supports")
    cap.add_argument("--varlen", action="store_true", help="accepts cu_seqlens")
    cap.add_argument("--no-backward", action="store_true", help="not differentiable")
    cap.add_argument("--no-initial-state", action="store_true", help="takes no initial_state")
    cap.add_argument(
        "--no-final-state",
        action="store_true",
        help="returns no final state (o alone, or (o, None))",
    )
    cap.add_argument(
        "--layout",
        choices=AXIS_ORDERS,
        default="token-major",
        help="order of its per-token tensors' axes (q, k, v, g, beta, o): 'token-major' "
        "[B, T, H, D] or 'heads-first' [B, H, T, D]. Default: %(default)s",
    )
    cap.add_argument(
        "--state-layout",
        choices=STATE_ORDERS,
        default="kv",
        help="order of its state's last two axes: 'kv' [N, H, K, V] or 'vk' [N, H, V, K]. "
        "Default: %(default)s",
    )
    cap.add_argument(
        "--value-gate",
        action="store_true",
        help="it takes a value gate gv=[B, T, H, V] (FLA's GLA and gated delta rule): the state "
        "decays S' = diag(exp(g)) S diag(exp(gv)); judged forward only (--no-backward), "
        "unnormalized, and for the delta family under --form recurrent",
    )
    cap.add_argument(
        "--seq-len-at-least-heads",
        action="store_true",
        help="refuses T < H (some FLA releases take such a call for a heads-first one): no such "
        "case is drawn",
    )
    if dtypes:
        cap.add_argument(
            "--dtypes",
            type=dtypes_of(KERNEL_DTYPES),
            default=KERNEL_DTYPES,
            help="input dtypes (fp32, fp16, bf16 or the torch names). Default: %(default)s",
        )
    cap.add_argument(
        "--max-head-dim", type=positive, default=256, help="largest K and V. Default: %(default)r"
    )
    cap.add_argument(
        "--scale",
        choices=get_args(ScaleConvention),
        default=None,
        help="how it gets its scale: 'arg' it takes scale=, 'fixed' it applies K^-1/2 itself, "
        "'one' it applies none. Default: 'arg' when its signature names a scale parameter, "
        "else 'fixed'",
    )
    cap.add_argument(
        "--final-state-dtype",
        type=dtype_name,
        choices=FINAL_STATE_DTYPES,
        default="float32",
        help="dtype of the final state it returns: float32 (or wider), or the input dtype (the "
        "bound charges that rounding). Default: %(default)s",
    )
    exact = parser.add_argument_group(
        "exactness it promises (judged bit for bit; by default within the error bound)"
    )
    exact.add_argument(
        "--deterministic",
        action="store_true",
        help="reruns on the same inputs are bit-identical",
    )
    exact.add_argument(
        "--causal-exact",
        action="store_true",
        help="outputs (and gradients) at positions <= t are bitwise unchanged when only later "
        "inputs change; without it they may move within the rounding of the tokens its form "
        "touches (reported 'within rounding')",
    )
    exact.add_argument(
        "--layout-exact",
        action="store_true",
        help="results are bit-identical whatever the memory layout of the inputs and the "
        "cotangents (strided, sliced, expanded); plain PyTorch reductions are not (their order "
        "follows the strides)",
    )
    rec = parser.add_argument_group("precision recipe (how the kernel rounds)")
    rec.add_argument(
        "--form",
        choices=FORMS,
        default=None,
        help="algorithm; unknown charges the counts of all three. Default: unknown",
    )
    rec.add_argument(
        "--chunk-size",
        type=positive,
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
        "--accumulation",
        choices=("ieee", "mma", "float64", "input"),
        default=None,
        help="how sums round: fp32 adds, tensor-core accumulation, float64 throughout, or "
        "(the delta family) every product and sum in the input dtype. Default: mma on CUDA "
        "with tf32 dots, else ieee",
    )
    rec.add_argument(
        "--intermediate-dtype",
        type=dtype_name,
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


CONVENTION = """\
the calling convention, in full:
  layout      token-major: q, k [B, T, H, K]; v, o [B, T, H, V]; g [B, T, H] (scalar gate,
              log-decay <= 0) or [B, T, H, K] (vector gate); beta [B, T, H] (delta rule).
              With cu_seqlens [N+1] (int64) B is 1 and T packs N sequences. --layout
              heads-first: q, k, v, g, beta and o with T and H swapped ([B, H, T, D]).
  scale       scale=None means K^-1/2 (--scale fixed: the kernel applies K^-1/2 itself and
              takes no scale; --scale one: it applies none).
  states      initial_state [N, H, K, V] (N = B, or the number of packed sequences), in
              float32 (--state-layout vk: [N, H, V, K]); a normalized kernel takes and returns
              (S, z) with z [N, H, K]. A kernel without initial_state/output_final_state
              parameters is taken to have none.
  returns     the pair (o, final_state): o in the input dtype; final_state [N, H, K, V] in
              float32 (--final-state-dtype input: the input dtype) when output_final_state=True,
              else anything (None is usual): it is not read. A kernel asked for no final state
              may return o alone.
  normalizer  o = s φ(q)·S / (s φ(q)·z + eps) (--normalizer in-dot: s φ(q)·(z + eps);
              clamp: max(s φ(q)·z, eps)); eps added in float32 (--eps-dtype).
  value gate  --value-gate: gv=[B, T, H, V] by keyword, S' = diag(e^g) S diag(e^gv) (GLA, the
              gated delta rule; forward only, unnormalized; the delta rule's under --form
              recurrent). An argument the signature names at another position (FLA's beta
              after g, gk, gv) is passed by keyword.
  maps        φ applied by the kernel itself (--feature-map; queries' own: --query-feature-map,
              e.g. softmax queries with exp keys); none by default: the harness passes features.
"""
"""What ``check --help`` says about the convention besides the signature (its epilog)."""


def add_parser(sub: Any, family: str) -> None:
    """Add the ``check`` subcommand, with the flags of ``family`` (`family_in`)."""
    check = sub.add_parser(
        "check",
        help="validate a third-party kernel against the property catalogue",
        # Line breaks written out: the formatter keeps the epilog's layout, and this text's.
        description="TARGET is 'package.module:function' or 'path/to/file.py:function', a "
        "kernel in the calling\nconvention fn(q, k, v[, g], *, scale, initial_state, "
        "output_final_state[, cu_seqlens])\n(linear attention), or, with --family delta, "
        "fn(q, k, v[, g], beta, *, scale, initial_state,\noutput_final_state, cu_seqlens, "
        "use_qk_l2norm_in_kernel) (the delta rule, FLA's convention).",
        epilog=CONVENTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("target", metavar="TARGET")
    add_target_flags(check, family)
    run = check.add_argument_group("the search")
    run.add_argument(
        "--budget",
        type=seconds,
        default=60.0,
        help="wall-clock seconds for the whole check. Default: %(default)r",
    )
    run.add_argument(
        "--timeout",
        type=nonnegative_float,
        default=60.0,
        help="seconds one kernel call may take. Default: %(default)r",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the search. Default: 0")
    run.add_argument(
        "--max-seq-len",
        type=positive,
        default=None,
        help="longest T of any case: the search draws T up to 32 and the size reach checks T "
        "around chunk multiples and 256..4096 as far as the budget allows. Default: no cap",
    )
    run.add_argument(
        "--report", type=Path, default=None, help="directory for the results and saved failures"
    )
    run.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the search's progress (rounds, properties failing, each case) above the "
        "progress bar (by default: the bar only)",
    )
    run.add_argument(
        "--no-render",
        action="store_true",
        help="write the results (run.json) but not the Markdown and HTML report with its plots "
        "(about 3 s); `linattn-verify report DIR` renders them later",
    )
    run.add_argument(
        "--fail-fast", action="store_true", help="stop at the first property that fails"
    )
    run.add_argument(
        "--device",
        default="auto",
        help="where the kernel computes and its oracles and bounds run (float64): 'cpu', "
        "'cuda', 'cuda:N', or 'auto': cuda where torch sees a CUDA device, else cpu. The cases "
        "are drawn on the CPU and moved. Default: %(default)r",
    )
    run.add_argument(
        "--isolation",
        choices=("auto", "process", "none"),
        default="auto",
        help="'process': check in a child process the kernel may crash (restarted after a "
        "crash or hang); 'auto': a process on CUDA, none on a CPU. Default: %(default)r",
    )


def _device(name: str) -> torch.device:
    """``--device``, resolved; a device torch cannot use is a usage error.

    Raises:
        InvalidArgument: for a name that is no device, or a CUDA device torch does not see.
    """
    import torch

    from linattn_verify.errors import InvalidArgument

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InvalidArgument(f"Got --device {name!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'.")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise InvalidArgument(
                f"Got --device {name!r}, but torch sees {count} CUDA device"
                f"{'s' if count != 1 else ''} here."
            )
    return device


def _placed(source: Any, device: torch.device) -> Any:
    """``source`` computing on ``device``.

    Raises:
        InvalidArgument: for a family whose kernel source cannot be placed (not a
            `TargetSource`).
    """
    from dataclasses import replace

    from linattn_verify.core.source import TargetSource
    from linattn_verify.errors import InvalidArgument

    if not isinstance(source, TargetSource):
        raise InvalidArgument(
            f"Got --device {device}, but the {type(source).__name__} of this family cannot "
            "place its kernel on a device; use --device cpu."
        )
    return replace(source, device=str(device))


@contextmanager
def _judged_on(device: torch.device) -> Iterator[None]:
    """Judge on ``device`` inside the block, here and in the isolated child processes.

    The environment carries it to the children; a choice the user made there stays, and the
    process's environment is restored afterwards.
    """
    from linattn_verify.core.judging import ENVIRONMENT

    if device.type == "cpu" or ENVIRONMENT in os.environ:
        yield
        return
    os.environ[ENVIRONMENT] = str(device)
    try:
        yield
    finally:
        del os.environ[ENVIRONMENT]


def command(args: argparse.Namespace) -> int:
    """``linattn-verify check TARGET``."""
    import shutil
    import tempfile

    from linattn_verify.core.family import family_named
    from linattn_verify.errors import InvalidArgument

    try:
        device = _device(args.device)
        family = family_named(args.family)
        source = family.source_from_args(args, on_cuda=device.type == "cuda")
        if device.type != "cpu":
            source = _placed(source, device)
        isolate = args.isolation == "process" or (
            args.isolation == "auto" and device.type == "cuda"
        )
        # Load once here even when isolated: a target that cannot be loaded is a usage error.
        kernel = source.load()
        properties = family.properties()
    except InvalidArgument as exc:
        print(f"linattn-verify check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = sys.stderr if args.json else sys.stdout
    print(f"linattn-verify check {args.target}", file=out)
    print(f"  assumed: {source.capabilities}", file=out)
    for note in source.inferred:
        print(f"  from its signature: {note}", file=out)
    print(f"  recipe:  {source.recipe}", file=out)
    if device.type != "cpu":
        print(f"  device:  {device} (the kernel, the oracles and the bounds)", file=out)
    print(
        f"  budget {args.budget:g} s over {len(properties)} properties"
        f"{', each kernel process isolated' if isolate else ''}",
        file=out,
    )
    # Without --report the run document lives in a temporary folder, removed at the end, and
    # failing cases go where `replay` and the pytest plugin look (.linattn-failures).
    keep = args.report is not None
    report_dir = args.report or Path(tempfile.mkdtemp(prefix="linattn-check-"))
    try:
        return _checked(args, source, kernel, properties, isolate, device, report_dir, keep, out)
    finally:
        if not keep:
            shutil.rmtree(report_dir, ignore_errors=True)


def _checked(
    args: argparse.Namespace,
    source: Any,
    kernel: Any,
    properties: Any,
    isolate: bool,
    device: Any,
    report_dir: Path,
    keep: bool,
    out: Any,
) -> int:
    """The search, the run document and the summary of `command` (exit status)."""
    from linattn_verify.checking import CheckListener, CheckReport, SearchSettings, check_kernel
    from linattn_verify.failures import failures_directory
    from linattn_verify.isolation import check_isolated
    from linattn_verify.progress import Progress
    from linattn_verify.results import CaseRecord, PropertyVerdict
    from linattn_verify.running import progress_line

    report_dir.mkdir(parents=True, exist_ok=True)
    writer = _check_writer(args, report_dir, kernel, source)

    # The bar counts the budget's seconds (the search is driven by time, not by a count).
    bar = Progress("check", None, verbose=args.verbose, unit="examples", budget=args.budget)

    # The last verdict delivered per property: written as they settle, and what an interrupted
    # check reports.
    latest: dict[str, PropertyVerdict] = {}

    class Printer(CheckListener):
        def progress(self, line: str) -> None:
            if args.verbose:
                bar.print(line)

        def case_finished(self, record: CaseRecord) -> None:
            writer.add_case(record)
            bar.advance(failed=not record.ok, line=progress_line(record))

        def verdict(self, verdict: PropertyVerdict) -> None:
            # As they settle, so the document on disk is live during a long check.
            writer.add_verdict(verdict)
            latest[verdict.property] = verdict

    search = SearchSettings(
        budget=args.budget,
        seed=args.seed,
        max_seq_len=args.max_seq_len,
        max_head_dim=min(16, args.max_head_dim),
        failures_dir=report_dir / "failures" if keep else failures_directory(),
        fail_fast=args.fail_fast,
    )
    started = time.perf_counter()
    interrupted = False
    try:
        with bar, _judged_on(device):
            if isolate:
                report = check_isolated(source, list(properties), search, listener=Printer())
            else:
                report = check_kernel(kernel, properties, search, listener=Printer())
    except KeyboardInterrupt:
        # Ctrl-C: what was decided so far is the result (written and summarised as usual); a
        # property interrupted keeps what its earlier searches found, one never reached is
        # not_run. No traceback: the user asked for the stop.
        interrupted = True
        report = CheckReport(
            kernel=kernel.name,
            verdicts=tuple(
                latest.get(name, PropertyVerdict(kernel.name, name, "held")).settled()
                for name in properties
            ),
            seconds=time.perf_counter() - started,
        )
    for verdict in report.verdicts:
        # Those decided at the end ("not_run", "not_applicable"), each verdict once.
        if latest.get(verdict.property) != verdict:
            writer.add_verdict(verdict)
    document = writer.finish(render=keep and not args.no_render)
    if args.json:
        print(json.dumps(document, default=str))
    findings, declared = _print_findings(document, report.verdicts, out)
    _print_within_rounding(report.verdicts, out)
    count = Counter(v.status for v in report.verdicts)
    first = report.first_failure_seconds
    when = "" if first is None else f"; first failure at {first:.1f} s"
    explained = f", {declared} explained by the declaration" if declared else ""
    grouped = f" ({findings} finding{'s' if findings != 1 else ''}{explained})"
    grouped = grouped if count["failed"] else ""
    rounding = f", {count['within_rounding']} within rounding" if count["within_rounding"] else ""
    totals = document["totals"]
    where = f"report in {report_dir}" if keep else "no report kept: --report DIR keeps one"
    if not keep and count["failed"]:
        where += f"; failing cases in {failures_directory().resolve()}"
    stop = "interrupted (Ctrl-C): " if interrupted else ""
    print(
        f"\n{stop}{count['held']} held{rounding}, {count['failed']} failed{grouped}, "
        f"{count['not_applicable']} not applicable, {count['not_run']} not run; largest T "
        f"{totals['largest_T']}, largest head dim {totals['largest_head_dim']} "
        f"({report.seconds:.1f} s{when}; {where})",
        file=out,
    )
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.ok else EXIT_FAILED


def _print_findings(document: dict[str, Any], verdicts: Any, out: Any) -> tuple[int, int]:
    """Print the failures grouped by root cause (the run document's findings).

    Each finding names every property it broke and shows its message (with its repro and
    replay lines; the verdict's, richer, where the finding is its property's first failure).
    Defects come first; the findings a change to the declaration explains (``kind``
    ``declaration``) come after them, apart. Returns (findings, declaration findings); the
    per-property verdicts stay in run.json.
    """
    from linattn_verify.diagnosis import SHAPE_NOTE

    by_property = {v.property: v for v in verdicts}
    found = document.get("failures") or []
    findings = [f for f in found if f.get("kind") != "declaration"]
    declared = [f for f in found if f.get("kind") == "declaration"]
    for n, finding in enumerate(findings + declared, start=1):
        if n == len(findings) + 1:
            print(
                "\nExplained by the declaration (a change to what was declared makes each "
                "pass: check the declaration before the kernel):",
                file=out,
            )
        properties = finding.get("properties") or [finding["property"]]
        verdict = by_property.get(finding["property"])
        own = verdict is not None and verdict.failure_file == finding.get("failure_file")
        message = verdict.message if verdict is not None and own else ""
        what = "property" if len(properties) == 1 else f"{len(properties)} properties"
        print(f"\nFinding {n} ({what}: {', '.join(properties)})", file=out)
        print(message or finding["message"], file=out)
        # What the error looks like, where another property of the finding recognised it.
        shapes = dict.fromkeys(
            line[line.index(SHAPE_NOTE) :]
            for name in properties
            if name in by_property
            for line in by_property[name].message.splitlines()
            if SHAPE_NOTE in line and line not in (message or "")
        )
        for line in shapes:
            print(f"{line} (seen by another property of this finding)", file=out)
    return len(found), len(declared)


def _print_within_rounding(verdicts: Any, out: Any) -> None:
    """Print the properties that held only within rounding: not defects, not exact either."""
    loose = [v for v in verdicts if v.status == "within_rounding"]
    if not loose:
        return
    print(
        "\nWithin rounding, not bit-exact (no defect: what the kernel does not promise bit for "
        "bit was judged within its error bound):",
        file=out,
    )
    for v in loose:
        first = v.message.splitlines()
        why = first[1] if len(first) > 1 else ""
        print(f"  {v.property}: {v.within_rounding} of {v.examples} examples. {why}", file=out)


def _check_writer(args: argparse.Namespace, report_dir: Path, kernel: Any, source: Any) -> Any:
    """The `RunWriter` of a check: cases as they finish, the report (run.json, report.*) after."""
    from linattn_verify._device import environment
    from linattn_verify.reporting import RunWriter

    arguments: dict[str, Any] = {
        k: v if isinstance(v, int | float | bool) else str(v) for k, v in vars(args).items()
    }
    # How to load the kernel again (what `replay` uses), kept with the run.
    arguments["source"] = source.to_json()
    writer = RunWriter(
        report_dir, command="check", environment=environment(), arguments=arguments, seed=args.seed
    )
    writer.add_kernel(kernel)
    return writer
