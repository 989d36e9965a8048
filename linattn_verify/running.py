# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run a property on a case: the one runner the test suite, ``check`` and ``run`` share.

`check_property` runs a property function on one case and one kernel, steers Hypothesis toward
the deciding score, saves a failing case for ``linattn-verify replay`` and raises
`PropertyViolation` with the report, the repro and the replay line: what a failing test in the
project's suite prints is what a user of ``check`` sees.

`run_group` is what ``linattn-verify run`` does for one (kernel, dtype): draw cases, judge each
with the catalogue's oracle property through `check_property`, emit a `CaseRecord` per case. A
group is seeded on its own, so its records are the same whether the groups run one after
another or spread over Ray tasks (``run --workers N``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linattn_verify.core.draws import seeded_draws
from linattn_verify.core.family import families, family_of, is_case
from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.failures import PropertyFn, failures_directory, save_failure
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.observe import notify
from linattn_verify.registry import AnyKernel, registered_kernels
from linattn_verify.results import CaseRecord, PropertyResult
from linattn_verify.typing import GATES, Gate


def _steer(result: PropertyResult) -> None:
    """Steer Hypothesis toward this result's deciding score (the rule's own units)."""
    from hypothesis import target
    from hypothesis.errors import InvalidArgument as HypothesisInvalidArgument

    worst = result.worst
    if worst is None or not math.isfinite(worst.deciding):
        return
    # A second run of the same property and kernel in one example reuses the label, which
    # Hypothesis forbids; the first observation is enough to steer by.
    with contextlib.suppress(HypothesisInvalidArgument):
        target(worst.deciding, label=f"{result.property} on {result.kernel} ({worst.kind})")


def check_property(
    prop: PropertyFn,
    spec: ProblemSpec,
    kernel: AnyKernel | Sequence[AnyKernel],
    *,
    directory: str | os.PathLike[str] | None = None,
    steer: bool = True,
) -> PropertyResult:
    """Run a property on a case; steer the search; save and raise if it failed.

    Inside a Hypothesis test the deciding score of the worst comparison is passed to
    `hypothesis.target`. A failure is saved with `save_failure` (each failing example overwrites
    the last, and Hypothesis runs the shrunk example last, so the minimal case is what stays).

    Args:
        prop: The property, ``(spec, kernel) -> PropertyResult``.
        spec: The case.
        kernel: The kernel under test (several, for a property that compares kernels).
        directory: Where to save a failure. Default: `None` (the plugin's
            ``--linattn-failures``, else ``.linattn-failures``).
        steer: Pass the deciding score to `hypothesis.target` inside a Hypothesis test.
            Default: `True`. Hypothesis generates later examples from what it observed, so a
            fixed sample (``run``'s report cases, the same for every kernel) does not steer.

    Returns:
        The result, when the property did not fail.

    Raises:
        PropertyViolation: with the report, the repro and, last, the line
            ``Replay: linattn-verify replay <path>``; ``.result`` and ``.failure_file`` set.
        InvalidArgument: if ``prop`` is not callable or does not return a `PropertyResult`.
    """
    __tracebackhide__ = True
    from hypothesis.control import currently_in_test_context

    if not callable(prop):
        raise InvalidArgument(f"Expected a callable but got prop={prop!r}.")
    if not is_case(spec):
        raise InvalidArgument(f"Expected a case (ProblemSpec, DeltaCase) but got spec={spec!r}.")
    kernels = list(kernel) if isinstance(kernel, Sequence) else [kernel]
    if not kernels or any(getattr(k, "family", None) != spec.family for k in kernels):
        raise InvalidArgument(
            f"Expected a kernel (or several) of the {spec.family} family but got kernel={kernel!r}."
        )
    result = prop(spec, kernel)
    if not isinstance(result, PropertyResult):
        raise InvalidArgument(
            f"Expected prop={prop!r} to return a PropertyResult but it returned "
            f"{type(result).__name__}."
        )
    if steer and currently_in_test_context():
        _steer(result)
    # Who watches the results (the pytest plugin's headroom summary); nobody, usually.
    notify(result, spec)
    if result.ok:
        return result
    raise violation(result, spec, kernel, directory=directory)


def violation(
    result: PropertyResult,
    spec: ProblemSpec,
    kernel: AnyKernel | Sequence[AnyKernel],
    *,
    directory: str | os.PathLike[str] | None = None,
) -> PropertyViolation:
    """Save the failed ``result`` on ``spec`` and return the `PropertyViolation` that reports it.

    The message is the report, then ``Repro:`` and, last, ``Replay: linattn-verify replay
    <path>``; saving again for the same property and kernel overwrites the file.
    """
    path = save_failure(
        result,
        spec,
        result.kernel,
        failures_directory() if directory is None else directory,
        kernel_source=None if isinstance(kernel, Sequence) else kernel.source,
    )
    return PropertyViolation(
        f"{result.report()}\nRepro: {spec.repro()}\nReplay: linattn-verify replay {path}",
        result=result,
        failure_file=str(path),
    )


def record_of(
    kernel: AnyKernel,
    spec: ProblemSpec,
    result: PropertyResult,
    seconds: float,
    failure_file: str | None = None,
) -> CaseRecord:
    """The `CaseRecord` of ``result`` on ``spec``."""
    return CaseRecord.of(
        result,
        form=kernel.form,
        dtype=spec.dtype,
        sizes=(spec.T, spec.K, spec.V),
        seconds=seconds,
        failure_file=failure_file,
    )


def harness_error(
    kernel: AnyKernel, spec: ProblemSpec, prop: str, exc: BaseException, seconds: float
) -> CaseRecord:
    """The record of a case the harness itself failed on (a bug of ours: reported, not hidden)."""
    return CaseRecord(
        kernel=kernel.name,
        form=kernel.form,
        property=prop,
        dtype=spec.dtype,
        T=spec.T,
        K=spec.K,
        V=spec.V,
        case=spec.describe(),
        status="failed",
        reason="harness error: " + "".join(traceback.format_exception_only(exc)).strip(),
        seconds=round(seconds, 3),
        error=True,
    )


RUN_HEAD_DIM = 12
"""Largest K and V ``run`` draws (the search in ``check`` goes to 16, the reach further)."""


@dataclass(frozen=True)
class GroupSettings:
    """How `run_group` draws and judges the cases of one group.

    Attributes:
        examples: Cases drawn for the group's kernel.
        max_seq_len: Longest T drawn.
        seed: Seed of every draw.
        backward: Judge the gradients too (kernels with a backward pass).
        failures_dir: Where failing cases are saved. Default: `None` (not saved).
        gates: Gate shapes drawn. Default: all.
        peers: Names of the run's kernels: those of the group's family and dtype are its peers
            for the side-by-side cases. Default: `()` (none).
        side_by_side: Cases taken from each peer's own draw and run on every other peer that
            takes them, so kernels are compared on the same cases. Default: `0` (none).
    """

    examples: int
    max_seq_len: int
    seed: int
    backward: bool
    failures_dir: Path | None = None
    gates: tuple[Gate, ...] = GATES
    peers: tuple[str, ...] = ()
    side_by_side: int = 0


def select_kernels(patterns: Sequence[str]) -> list[AnyKernel]:
    """Return the kernels whose names match a glob in ``patterns``.

    Besides the registry, FLA's kernels (``fla/...``) are candidates when FLA is installed and a
    pattern can match them; they are not registered by default, because importing FLA selects
    the Triton interpreter's patches and costs seconds.

    Raises:
        InvalidArgument: if no kernel matches (saying when FLA is not installed).
    """
    candidates = registered_kernels()
    fla_wanted = any(fnmatch.fnmatch("fla/", p.split("/")[0] + "/") for p in patterns)
    fla_installed = importlib.util.find_spec("fla") is not None
    if fla_wanted and fla_installed:
        for family in families().values():
            for kernel in family.library_kernels("fla"):
                candidates.setdefault(kernel.name, kernel)
    chosen = [k for n, k in candidates.items() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    if not chosen:
        missing = "" if fla_installed else " (FLA is not installed: pip install fla-core==0.6.0)"
        raise InvalidArgument(
            f"Got --kernels {','.join(patterns)}, but no kernel matches{missing}; available: "
            f"{sorted(candidates)}."
        )
    return chosen


def verify_case(
    kernel: AnyKernel, spec: ProblemSpec, *, backward: bool, failures_dir: Path | None = None
) -> CaseRecord:
    """Judge ``kernel`` on ``spec`` with the catalogue's oracle property; return the record.

    The judging is ``gradients_match_oracle`` (or ``outputs_match_oracle`` without
    ``backward``) through `check_property`, so `run` and the test suite score a case
    identically; it does not steer, so every kernel of a run sees the same cases. A failing
    case is saved under ``failures_dir`` (one folder per case) for ``linattn-verify replay``;
    the record names it.
    """
    name = "gradients_match_oracle" if backward else "outputs_match_oracle"
    prop = family_of(kernel).properties()[name]
    folder = (
        None if failures_dir is None else failures_dir / f"{spec.dtype}-T{spec.T}-seed{spec.seed}"
    )
    started = time.perf_counter()
    try:
        result = check_property(prop, spec, kernel, directory=folder, steer=False)
        failure_file = None
    except PropertyViolation as exc:
        result, failure_file = exc.result, exc.failure_file
    return record_of(kernel, spec, result, time.perf_counter() - started, failure_file)


def run_group(
    kernel: AnyKernel,
    dtype: str,
    settings: GroupSettings,
    emit: Callable[[CaseRecord], None],
) -> None:
    """Verify ``kernel`` on ``settings.examples`` drawn cases of one dtype; emit each record.

    A case the harness itself fails on is emitted as a failed record with the error, and the
    group goes on.
    """
    family = family_of(kernel)
    one_dtype = family.narrowed(kernel, dtype, settings.gates)
    if one_dtype is None:
        return
    # A forward-only kernel (FLA's fused recurrent KDA) is judged on its forward pass.
    backward = settings.backward and kernel.capabilities.backward
    prop = "gradients_match_oracle" if backward else "outputs_match_oracle"
    cases = family.cases_for(
        one_dtype, max_seq_len=settings.max_seq_len, max_head_dim=RUN_HEAD_DIM, realistic=False
    )

    seen: set[str] = set()

    def judge(spec: ProblemSpec, *, shared: bool) -> None:
        started = time.perf_counter()
        seen.add(spec.describe())
        try:
            record = verify_case(
                kernel, spec, backward=backward, failures_dir=settings.failures_dir
            )
        except Exception as exc:  # a harness error on this case: report it, keep going
            record = harness_error(kernel, spec, prop, exc, time.perf_counter() - started)
        # A peer's case this kernel does not take is no comparison: it is left out.
        if not (shared and record.status == "not_applicable"):
            emit(record)

    for spec in drawn_cases(cases, settings.examples, settings.seed):
        judge(spec, shared=False)
    for spec in side_by_side_cases(kernel, dtype, settings):
        if spec.describe() not in seen:
            judge(spec, shared=True)


def drawn_cases(strategy: Any, examples: int, seed_value: int) -> list[Any]:
    """The cases Hypothesis draws from ``strategy`` with this seed, ``examples`` at most.

    The draw does not depend on what is done with the cases (nothing steers it) nor on the
    modules the process has loaded (`seeded_draws`), so the same strategy and seed give the same
    list in every process.
    """
    from hypothesis import Phase, given, seed
    from hypothesis import settings as hypothesis_settings

    drawn: list[Any] = []

    @seed(seed_value)
    @hypothesis_settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(spec=strategy)
    def collect(spec: Any) -> None:
        drawn.append(spec)

    with seeded_draws():
        collect()
    return drawn


_SHARED: dict[tuple[str, str, GroupSettings], list[Any]] = {}


def side_by_side_cases(kernel: AnyKernel, dtype: str, settings: GroupSettings) -> list[Any]:
    """The side-by-side cases of ``kernel``'s family and ``dtype`` (`GroupSettings`).

    Each peer (a kernel of ``settings.peers`` of the same family that takes ``dtype`` and the
    gates) contributes ``settings.side_by_side`` cases spread over its own draw (the first
    drawn cases are Hypothesis's simplest, so they are not the ones taken), in peer-name order,
    without repeats. The same settings give the same list in every process (cached per process).
    """
    if not settings.side_by_side or not settings.peers:
        return []
    family = family_of(kernel)
    key = (family.name, dtype, settings)
    if key not in _SHARED:
        pool: dict[str, Any] = {}
        for peer in sorted(select_kernels(settings.peers), key=lambda k: k.name):
            narrowed = (
                family.narrowed(peer, dtype, settings.gates) if peer.family == family.name else None
            )
            if narrowed is None or dtype not in peer.capabilities.dtypes:
                continue
            strategy = family.cases_for(
                narrowed,
                max_seq_len=settings.max_seq_len,
                max_head_dim=RUN_HEAD_DIM,
                realistic=False,
            )
            drawn = drawn_cases(strategy, settings.examples, settings.seed)
            step = max(1, len(drawn) // settings.side_by_side)
            for spec in drawn[::-1][::step][: settings.side_by_side]:
                pool.setdefault(spec.describe(), spec)
        _SHARED[key] = list(pool.values())
    return _SHARED[key]


def run_group_reporting(
    kernel_name: str, dtype: str, settings: GroupSettings, news: Any
) -> list[CaseRecord]:
    """`run_group` in a worker (a Ray task of ``run --workers N``), by kernel name.

    Kernels hold closures (not picklable): the worker finds its own by name. It prints nothing
    (the driver's bar would be scribbled over); it puts ``(kernel_name, dtype, ok,
    progress_line)`` on ``news`` (a queue the driver drains) as each case ends, and returns the
    group's records.
    """
    records: list[CaseRecord] = []
    (kernel,) = [k for k in select_kernels([kernel_name]) if k.name == kernel_name]

    def emit(record: CaseRecord) -> None:
        records.append(record)
        news.put((kernel_name, dtype, record.ok, progress_line(record)))

    run_group(kernel, dtype, settings, emit)
    return records


def progress_line(record: CaseRecord) -> str:
    """One line saying how a case went: its deciding score r against the bound, and where.

    ``  ok   torch/chunk            float32  T=6     r 0.0124 on o                (0.0s)``
    """
    status = "ok  " if record.ok else "FAIL"
    worst = record.worst
    where = "" if worst is None else f"r {worst.deciding:<8.3g} on {worst.tensor}"
    if record.status not in ("held", "failed"):
        where = f"{record.status} {where}".strip()
    return (
        f"  {status} {record.kernel:22s} {record.dtype:8s} T={record.T:<5d} {where:24s} "
        f"({record.seconds:.1f}s)"
    )


__all__ = [
    "GroupSettings",
    "check_property",
    "harness_error",
    "progress_line",
    "record_of",
    "run_group",
    "run_group_reporting",
    "select_kernels",
    "side_by_side_cases",
    "verify_case",
    "violation",
]
