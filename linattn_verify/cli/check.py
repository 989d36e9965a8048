# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify check TARGET``: validate a third-party kernel against the catalogue."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, get_args

from linattn_verify.cli._args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    csv_of,
    nonnegative_float,
    positive,
)
from linattn_verify.families import FAMILIES
from linattn_verify.typing import (
    FINAL_STATE_DTYPES,
    FORMS,
    KERNEL_DTYPES,
    Division,
    FeatureMap,
    ScaleConvention,
)


def add_target_flags(parser: Any, *, dtypes: bool = True) -> None:
    """Add the flags that describe a ``module:function`` target (``check`` and ``drift``).

    What it computes and supports, the delta family's flags, and its precision recipe.

    Args:
        parser: The subcommand's parser.
        dtypes: Add ``--dtypes`` too (``drift`` has its own). Default: `True`.
    """
    sem = parser.add_argument_group("what the kernel computes")
    sem.add_argument("--normalized", action="store_true", help="output is divided by s q·z + eps")
    sem.add_argument(
        "--eps",
        type=nonnegative_float,
        default=0.0,
        help="eps of the normalizer. Default: %(default)r",
    )
    sem.add_argument(
        "--decay",
        choices=("none", "scalar", "vector", "data"),
        default="none",
        help="the log decay g the kernel takes: 'scalar' g [B, T, H] ('data' is an alias), "
        "'vector' g [B, T, H, K] (a gate per key dimension, GLA's). Default: %(default)r",
    )
    sem.add_argument(
        "--decay-required",
        action="store_true",
        help="the kernel takes no g=None (FLA's chunk_gla asserts a gate): no case without "
        "decay is drawn (g = 0 stands for it)",
    )
    sem.add_argument(
        "--feature-map",
        choices=get_args(FeatureMap),
        default="identity",
        help="feature map the kernel applies itself: elementwise (identity, elu1, relu) or "
        "lifted (taylor2: Based's 1 + x + x²/2 of x = s q·k; rebased: x²; favor+: Performer's "
        "exp(Wx - |x|²/2)/√m, with W drawn by the harness and passed as feature_weights=W). "
        "Default: %(default)r",
    )
    sem.add_argument(
        "--zero-denominator",
        choices=("zero", "ieee", "any"),
        default="any",
        help="what a normalized output is where the exact denominator is exactly 0 (0/0): "
        "'zero' returns 0, 'ieee' the IEEE quotient (NaN for 0/0, ±inf for x/0), 'any' is not "
        "judged there. Default: %(default)r",
    )
    cap = parser.add_argument_group("what the kernel supports")
    cap.add_argument("--varlen", action="store_true", help="accepts cu_seqlens")
    cap.add_argument("--no-backward", action="store_true", help="not differentiable")
    cap.add_argument("--no-initial-state", action="store_true", help="takes no initial_state")
    cap.add_argument("--no-final-state", action="store_true", help="returns no final state")
    if dtypes:
        cap.add_argument(
            "--dtypes",
            type=csv_of(KERNEL_DTYPES),
            default=KERNEL_DTYPES,
            help="input dtypes. Default: %(default)s",
        )
    cap.add_argument(
        "--max-head-dim", type=positive, default=256, help="largest K and V. Default: %(default)r"
    )
    cap.add_argument(
        "--even-head-dims",
        type=csv_of(KERNEL_DTYPES),
        default=(),
        metavar="DTYPES",
        help="dtypes in which K and V must be even (FLA's 16-bit chunked backward). Default: none",
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
        help="results are bit-identical whatever the inputs' memory layout (strided, sliced); "
        "plain PyTorch reductions are not (their order follows the strides)",
    )
    delta = parser.add_argument_group("the delta family (--family delta)")
    delta.add_argument(
        "--gates",
        type=csv_of(("none", "scalar", "vector")),
        default=("none",),
        help="the gates g it takes: none (DeltaNet: no g argument unless another is listed), "
        "scalar g [B, T, H] (Gated DeltaNet), vector g [B, T, H, K] (KDA). Default: none",
    )
    delta.add_argument(
        "--l2norm",
        choices=("both", "on", "off"),
        default=None,
        help="values of use_qk_l2norm_in_kernel it takes. Default: both when its signature "
        "names use_qk_l2norm_in_kernel, else off",
    )
    delta.add_argument(
        "--beta-max",
        type=float,
        choices=(1.0, 2.0),
        default=2.0,
        help="beta in [0, 1], or [0, 2) (negative eigenvalues). Default: %(default)r",
    )
    delta.add_argument(
        "--any-key-norm",
        action="store_true",
        help="keys need not be unit-norm (by default a case with ||k||² > 1 + 2^-6 and no "
        "in-kernel L2 norm is outside the kernel's contract)",
    )
    delta.add_argument(
        "--inverse-dtype",
        choices=("none", "input", "float16", "bfloat16"),
        default="none",
        help="what the chunk form's triangular inverse is stored in. Default: none (fp32)",
    )
    delta.add_argument(
        "--inverse-method",
        choices=("substitution", "products"),
        default="substitution",
        help="how the chunk form inverts its triangular system: forward substitution, a "
        "triangular solve or a block merge ('substitution'), or a Neumann/doubling product of "
        "(I + N^(2^k)) factors ('products'). A general pivoting solver (torch.linalg.inv) is "
        "charged for any kernel not declaring --causal-exact. Default: %(default)s",
    )
    delta.add_argument(
        "--state-dtype",
        choices=("none", "input", "float16", "bfloat16"),
        default="none",
        help="what the chunk-boundary state is rounded to before the chunk's dots read it. "
        "Default: none (fp32)",
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
    rec.add_argument(
        "--naive-elu1",
        action="store_true",
        help="elu1 evaluated as elu(x) + 1 (torch's F.elu then +1: an absolute error of 2u, and "
        "features of x << 0 may round to 0) instead of where(x > 0, x + 1, exp(x))",
    )
    rec.add_argument(
        "--division",
        choices=get_args(Division),
        default="full",
        help="how the normalizer divides: 'full' (fp32 division, 2 ulp), 'rn' (correctly "
        "rounded), 'reciprocal' (1/Z, then a multiply). Default: %(default)s",
    )
    rec.add_argument(
        "--division-dtype",
        choices=("float32", "input"),
        default="float32",
        help="dtype the division (or reciprocal and multiply) is computed in. Default: %(default)s",
    )


def add_parser(sub: Any) -> None:
    """Add the ``check`` subcommand."""
    check = sub.add_parser(
        "check",
        help="validate a third-party kernel against the property catalogue",
        description="TARGET is 'package.module:function' or 'path/to/file.py:function', a kernel "
        "in the calling convention fn(q, k, v[, g], *, scale, initial_state, "
        "output_final_state[, cu_seqlens]) (linear attention), or, with --family delta, "
        "fn(q, k, v[, g], beta, *, scale, initial_state, output_final_state, cu_seqlens, "
        "use_qk_l2norm_in_kernel) (the delta rule, FLA's convention).",
    )
    check.add_argument("target", metavar="TARGET")
    check.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default="linear_attn",
        help="the function the kernel computes: 'linear_attn' (linear attention, the flags "
        "below) or 'delta' (the delta rule in FLA's convention fn(q, k, v[, g], beta, *, scale, "
        "initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel), the flags of "
        "'the delta family'). Default: %(default)s",
    )
    add_target_flags(check)
    run = check.add_argument_group("the search")
    run.add_argument(
        "--budget",
        type=nonnegative_float,
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
        "--isolation",
        choices=("auto", "process", "none"),
        default="auto",
        help="'process': check in a child process the kernel may crash (restarted after a "
        "crash or hang); 'auto': a process on CUDA, none on a CPU. Default: %(default)r",
    )


def command(args: argparse.Namespace) -> int:
    """``linattn-verify check TARGET``."""
    import tempfile

    from linattn_verify.checking import CheckListener, SearchSettings, check_kernel
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.families import family_named
    from linattn_verify.isolation import check_isolated
    from linattn_verify.progress import Progress
    from linattn_verify.results import CaseRecord, PropertyVerdict
    from linattn_verify.running import progress_line

    if not args.budget > 0:
        # check_kernel's own check, as a usage error: the first round runs whatever the budget.
        print(
            f"linattn-verify check: error: Got --budget {args.budget:g}, but the budget must be "
            "a positive number of seconds.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        import torch

        family = family_named(args.family)
        source = family.source_from_args(args, on_cuda=torch.cuda.is_available())
        isolate = args.isolation == "process" or (
            args.isolation == "auto" and torch.cuda.is_available()
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
    print(
        f"  budget {args.budget:g} s over {len(properties)} properties"
        f"{', each kernel process isolated' if isolate else ''}",
        file=out,
    )
    report_dir = args.report or Path(tempfile.mkdtemp(prefix="linattn-check-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    writer = _check_writer(args, report_dir, kernel, source)

    # The bar counts the budget's seconds (the search is driven by time, not by a count).
    bar = Progress("check", None, verbose=args.verbose, unit="examples", budget=args.budget)

    class Printer(CheckListener):
        def progress(self, line: str) -> None:
            if args.verbose:
                bar.print(line)

        def case_finished(self, record: CaseRecord) -> None:
            writer.add_case(record)
            bar.advance(failed=not record.ok, line=progress_line(record))

        def verdict(self, verdict: PropertyVerdict) -> None:
            writer.add_verdict(verdict)

    search = SearchSettings(
        budget=args.budget,
        seed=args.seed,
        max_seq_len=args.max_seq_len,
        max_head_dim=min(16, args.max_head_dim),
        failures_dir=report_dir / "failures",
        fail_fast=args.fail_fast,
    )
    with bar:
        if isolate:
            report = check_isolated(source, list(properties), search, listener=Printer())
        else:
            report = check_kernel(kernel, properties, search, listener=Printer())
    for verdict in report.verdicts:
        # The settled verdicts: "not_run" and "not_applicable" are decided at the end.
        writer.add_verdict(verdict)
    document = writer.finish(render=not args.no_render)
    if args.json:
        print(json.dumps(document, default=str))
    findings = _print_findings(document, report.verdicts, out)
    _print_within_rounding(report.verdicts, out)
    count = Counter(v.status for v in report.verdicts)
    first = report.first_failure_seconds
    when = "" if first is None else f"; first failure at {first:.1f} s"
    grouped = f" ({findings} finding{'s' if findings != 1 else ''})" if count["failed"] else ""
    rounding = f", {count['within_rounding']} within rounding" if count["within_rounding"] else ""
    totals = document["totals"]
    print(
        f"\n{count['held']} held{rounding}, {count['failed']} failed{grouped}, "
        f"{count['not_applicable']} not applicable, {count['not_run']} not run; largest T "
        f"{totals['largest_T']}, largest head dim {totals['largest_head_dim']} "
        f"({report.seconds:.1f} s{when}; report in {report_dir})",
        file=out,
    )
    return EXIT_OK if report.ok else EXIT_FAILED


def _print_findings(document: dict[str, Any], verdicts: Any, out: Any) -> int:
    """Print the failures grouped by root cause (the run document's findings); return how many.

    Each finding names every property it broke and shows the message of the first (with its
    repro and replay lines); the per-property verdicts stay in run.json.
    """
    by_property = {v.property: v for v in verdicts}
    findings = document.get("failures") or []
    for n, finding in enumerate(findings, start=1):
        properties = finding.get("properties") or [finding["property"]]
        verdict = by_property.get(properties[0])
        message = verdict.message if verdict is not None and verdict.message else ""
        what = "property" if len(properties) == 1 else f"{len(properties)} properties"
        print(f"\nFinding {n} ({what}: {', '.join(properties)})", file=out)
        print(message or finding["message"], file=out)
    return len(findings)


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


def kernel_source(args: argparse.Namespace, *, on_cuda: bool) -> Any:
    """The kernel under test as ``check``'s flags and its signature describe it (`KernelSource`).

    Raises:
        InvalidArgument: naming the flag that does not fit the family, or the parameter the
            kernel's signature lacks for what was declared.
    """
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.kernel import Capabilities
    from linattn_verify.recipe import PrecisionRecipe
    from linattn_verify.signature import check_call, declared_capabilities, fit_flags
    from linattn_verify.targets import KernelSource, load_kernel_function

    delta_only = {
        "--gates": tuple(args.gates) != ("none",),
        "--l2norm": args.l2norm is not None,
        "--beta-max": args.beta_max != 2.0,
        "--any-key-norm": args.any_key_norm,
        "--inverse-dtype": args.inverse_dtype != "none",
        "--inverse-method": args.inverse_method != "substitution",
        "--state-dtype": args.state_dtype != "none",
    }
    if given := [flag for flag, used in delta_only.items() if used]:
        raise InvalidArgument(
            f"Got {', '.join(given)} without --family delta: those describe a delta-rule kernel "
            "(a linear-attention kernel's gate is --decay)."
        )
    dot = args.dot_precision or ("tf32" if on_cuda else "ieee")
    # argparse restricted these strings to the recipe's choices; PrecisionRecipe rechecks.
    recipe = PrecisionRecipe.from_dict(
        {
            "form": args.form,
            "chunk_size": args.chunk_size,
            "accumulation": args.accumulation or ("mma" if on_cuda and dot != "ieee" else "ieee"),
            "dot_precision": dot,
            "intermediate_dtype": None
            if args.intermediate_dtype == "none"
            else args.intermediate_dtype,
            "casts_on_path": 0 if args.intermediate_dtype == "none" else args.casts,
            "decay_scan": {"recurrent": "per_step", "parallel": "global"}.get(
                args.form or "", "chunk_local"
            ),
            "division": args.division,
            "division_dtype": args.division_dtype,
            "naive_elu1": args.naive_elu1,
        }
    )
    fn = load_kernel_function(args.target)
    _, fitted = fit_flags(fn, args)
    capabilities = Capabilities(
        normalize=(args.normalized,),
        eps=args.eps if args.normalized else 0.0,
        feature_maps=(args.feature_map,),
        decay=args.decay != "none",
        gates=("vector",) if args.decay == "vector" else ("scalar",),
        decay_required=args.decay_required,
        backward=not args.no_backward,
        even_head_dims=args.even_head_dims,
        layout_exact=args.layout_exact,
        zero_denominator=args.zero_denominator,
        **declared_capabilities(args, fitted),
    )
    positional = ["q", "k", "v"] + (["g"] if capabilities.decay else [])
    keywords = [name for name, fit in fitted.items() if fit.supported]
    keywords += ["feature_weights"] if args.feature_map == "favor+" else []
    convention = "fn(q, k, v[, g], *, scale, initial_state, output_final_state[, cu_seqlens])"
    check_call(fn, positional, keywords, convention)
    return KernelSource(
        target=args.target,
        capabilities=capabilities,
        recipe=recipe,
        form=args.form,
        timeout=args.timeout,
        inferred=tuple(fit.note for fit in fitted.values() if fit.note),
    )
