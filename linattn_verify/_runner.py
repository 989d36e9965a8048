# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What `run` does: choose kernels, verify one (kernel, dtype) group of drawn cases, as records.

A group is the unit of work, seeded on its own, so its records are the same whether the groups
run one after another or spread over worker processes (``run --workers N``).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.kernel import Kernel
from linattn_verify.registry import registered_kernels, registered_properties
from linattn_verify.strategies import ProblemSpec
from linattn_verify.verdict import PropertyResult


def environment() -> dict[str, str]:
    """Describe where the run happens: device, Triton mode, versions."""
    import linattn_kernels

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {
        "device": device,
        "triton_mode": "interpreter" if linattn_kernels.INTERPRETING else "compiled",
        "torch": torch.__version__,
        "triton": version("triton"),
        "linattn_verify": version("linattn-verify"),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }


DEFAULT_KERNELS = ("triton/*", "fla/*")
"""What `run` verifies by default: our Triton kernels, and FLA's when it is installed."""


@dataclass(frozen=True)
class GroupSettings:
    """How `run_group` draws and judges the cases of one group."""

    examples: int
    max_seq_len: int
    seed: int
    backward: bool
    failures_dir: Path | None = None


def select_kernels(patterns: Sequence[str]) -> list[Kernel]:
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
        from linattn_verify.adapters.fla import fla_kernels

        for kernel in fla_kernels():
            candidates.setdefault(kernel.name, kernel)
    chosen = [k for n, k in candidates.items() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    if not chosen:
        missing = "" if fla_installed else " (FLA is not installed: pip install fla-core==0.6.0)"
        raise InvalidArgument(
            f"Got --kernels {','.join(patterns)}, but no kernel matches{missing}; available: "
            f"{sorted(candidates)}."
        )
    return chosen


def run_group(
    kernel: Kernel,
    dtype: str,
    settings: GroupSettings,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """Verify ``kernel`` on ``settings.examples`` drawn cases of one dtype; emit each record.

    A case the harness itself fails on is emitted as a failed record with the error, and the
    group goes on.
    """
    from hypothesis import Phase, given, seed
    from hypothesis import settings as hypothesis_settings

    from linattn_verify.strategies import kernel_specs

    one_dtype = replace(kernel, capabilities=replace(kernel.capabilities, dtypes=(dtype,)))

    @seed(settings.seed)
    @hypothesis_settings(
        max_examples=settings.examples,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(spec=kernel_specs(one_dtype, max_seq_len=settings.max_seq_len))
    def one(spec: ProblemSpec) -> None:
        started = time.perf_counter()
        try:
            record = verify_case(
                kernel, spec, backward=settings.backward, failures_dir=settings.failures_dir
            )
        except Exception as exc:  # a harness error on this case: report it, keep going
            record = {
                "kernel": kernel.name,
                "form": kernel.form,
                "dtype": dtype,
                "T": spec.T,
                "spec": repr(spec),
                "case": repr(spec),
                "ok": False,
                "error": "".join(traceback.format_exception_only(exc)).strip(),
                "seconds": round(time.perf_counter() - started, 3),
            }
        emit(record)

    one()


def run_group_in_worker(
    kernel_name: str, dtype: str, settings: GroupSettings
) -> list[dict[str, Any]]:
    """`run_group` in a worker process, by kernel name (kernels hold closures: not picklable)."""
    records: list[dict[str, Any]] = []
    (kernel,) = [k for k in select_kernels([kernel_name]) if k.name == kernel_name]

    def emit(record: dict[str, Any]) -> None:
        records.append(record)
        sys.stdout.write(progress_line(record) + "\n")
        sys.stdout.flush()

    run_group(kernel, dtype, settings, emit)
    return records


def progress_line(record: dict[str, Any]) -> str:
    """One line saying how a case went."""
    status = "ok  " if record["ok"] else "FAIL"
    return (
        f"  {status} {record['kernel']:16s} {record['dtype']:8s} "
        f"worst r={record.get('worst_r', 0.0):.3g} ({record['seconds']:.1f}s) {record['case']}"
    )


def verify_case(
    kernel: Kernel, spec: ProblemSpec, *, backward: bool, failures_dir: Path | None = None
) -> dict[str, Any]:
    """Judge ``kernel`` on ``spec`` (outputs, and gradients when ``backward``) as a JSON record.

    The judging is the catalogue's ``gradients_match_oracle`` / ``outputs_match_oracle``
    property, so `run` and the test suite score a case identically. A failing case is saved under
    ``failures_dir`` (one folder per case) for ``linattn-verify replay``; the record names it.
    """
    from linattn_verify.failures import save_failure

    name = "gradients_match_oracle" if backward else "outputs_match_oracle"
    started = time.perf_counter()
    result = registered_properties()[name](spec, kernel)
    record = case_record(kernel, spec, result, time.perf_counter() - started)
    if not result.ok and failures_dir is not None:
        folder = failures_dir / f"{spec.dtype}-T{spec.T}-seed{spec.seed}"
        record["failure_file"] = str(save_failure(result, spec, kernel.name, folder))
    return record


def case_record(
    kernel: Kernel, spec: ProblemSpec, result: PropertyResult, seconds: float
) -> dict[str, Any]:
    """One property evaluated on one case, as the JSON record `run` and `check` append.

    ``tensors`` groups the property's scores per tensor (``{"o": {"max_r": ..}}``); ``worst_r``
    is the largest r or η over them and ``worst_tensor`` the tensor it came from.
    """
    tensors: dict[str, dict[str, float]] = {}
    for key, value in result.scores.items():
        tensor, _, score = key.rpartition(".")
        if tensor:
            tensors.setdefault(tensor, {})[score] = value
    worst_tensor, worst = "", 0.0
    for tensor, by_name in tensors.items():
        tensor_worst = max(by_name.get("max_r", 0.0), by_name.get("max_eta", 0.0))
        if tensor_worst >= worst:
            worst_tensor, worst = tensor, tensor_worst
    return {
        "kernel": kernel.name,
        "form": kernel.form,
        "property": result.property,
        "dtype": spec.dtype,
        "T": spec.T,
        "K": spec.K,
        "V": spec.V,
        "spec": repr(spec),
        "case": result.case,
        "ok": result.ok,
        "skipped": result.skipped,
        "worst_r": worst,
        "worst_tensor": worst_tensor,
        "worst_index": None if result.worst_index is None else list(result.worst_index),
        "tensors": tensors,
        "seconds": round(seconds, 3),
        "report": None if result.ok else result.report(),
    }
