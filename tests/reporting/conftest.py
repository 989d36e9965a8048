# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Case records for the report tests, built directly from the result model (`results.py`).

The records do not come from running properties: the reports read records, so the tests build
them, with scores drawn from a seeded generator (the assertions derive what they expect from the
records, never from fixed numbers). Only the kernel entries (capabilities, recipes) come from
the torch reference kernels (`linattn_verify.registry.reference_kernels`, which loads no
Triton kernel).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.registry import reference_kernels as torch_reference_kernels
from linattn_verify.reporting import RunWriter
from linattn_verify.results import (
    FAIL_THRESHOLD,
    CaseRecord,
    Comparison,
    Counts,
    Scores,
    Status,
    Worst,
)

ENVIRONMENT = {
    "device": "cpu",
    "triton_mode": "interpreter",
    "torch": "test",
    "triton": "test",
    "linattn_verify": "test",
}
FORMS = ("parallel", "chunk", "recurrent")
SEQ_LENS = (1, 9, 24, 40)
DTYPES = ("float32", "bfloat16")
FORWARD = ("o", "final_state")
BACKWARD = ("o", "final_state", "dq", "dk", "dv")
EVIL_NAME = "<script>alert(1)</script>|x"
NUMEL = 96
"""Elements per compared tensor (what the counts say)."""


def comparison(
    tensor: str,
    subject: str,
    r: float,
    *,
    rho: float | None = None,
    reference: str = "oracle",
    mismatched: int | None = None,
) -> Comparison:
    """A comparison whose worst element scores ``r`` (failed past `FAIL_THRESHOLD`)."""
    failed = not r <= FAIL_THRESHOLD
    allowed, expected = 1e-6, 0.5
    return Comparison(
        tensor=tensor,
        subject=subject,
        reference=reference,
        status="failed" if failed else "held",
        deciding=r,
        scores=Scores(
            r=r,
            p999_r=0.9 * r if reference == "oracle" else None,
            rho=rho,
            median_rho=None if rho is None else rho / 3,
        ),
        worst=Worst(
            index=(0, 1, 0, 0), actual=expected + r * allowed, expected=expected, allowed=allowed
        ),
        counts=Counts(
            numel=NUMEL, mismatched=(1 if failed else 0) if mismatched is None else mismatched
        ),
    )


def case_line(kernel: str, T: int, dtype: str, seed: int = 0) -> str:
    """A case on one line, as a record carries it."""
    return f"Case(kernel={kernel!r}, T={T}, K=4, V=4, dtype={dtype!r}, seed={seed})"


def record(
    kernel: str,
    form: str | None,
    T: int,
    dtype: str,
    comparisons: Iterable[Comparison],
    *,
    prop: str = "outputs_match_oracle",
    status: Status | None = None,
    reason: str | None = None,
    failure_file: str | None = None,
    seed: int = 0,
) -> CaseRecord:
    """A case record; its status follows its comparisons unless given."""
    compared = tuple(comparisons)
    judged: Status = "failed" if any(not c.ok for c in compared) else "held"
    return CaseRecord(
        kernel=kernel,
        form=form,
        property=prop,
        dtype=dtype,
        T=T,
        K=4,
        V=4,
        case=case_line(kernel, T, dtype, seed),
        status=judged if status is None else status,
        comparisons=compared,
        reason=reason,
        notes=("recipe: test",),
        seconds=0.01,
        failure_file=failure_file,
    )


def scored(
    rng: random.Random,
    kernel: str,
    form: str,
    T: int,
    dtype: str,
    tensors: Iterable[str],
    **kw: Any,
) -> CaseRecord:
    """A passing record with r drawn below 1 (fp32 below 0.15) and ρ about √T."""
    top = 0.15 if dtype == "float32" else 1.0
    comparisons = [
        comparison(t, kernel, rng.uniform(0.01, top), rho=rng.uniform(0.5, 2.0) * (1 + T) ** 0.5)
        for t in tensors
    ]
    return record(kernel, form, T, dtype, comparisons, **kw)


@pytest.fixture(scope="session")
def passing_records() -> list[CaseRecord]:
    """The three torch forms on T in SEQ_LENS, fp32 and bf16, plus a backward case per form."""
    rng = random.Random(0)
    records = []
    for form in FORMS:
        kernel = f"torch/{form}"
        for T in SEQ_LENS:
            for dtype in DTYPES:
                records.append(scored(rng, kernel, form, T, dtype, FORWARD))
        records.append(
            scored(rng, kernel, form, 12, "float32", BACKWARD, prop="gradients_match_oracle")
        )
    assert all(r.ok for r in records)
    return records


def failing_records(kernel: str, form: str, directory: Path) -> list[CaseRecord]:
    """Two failing cases of a wrong kernel (its output off by far more than its bound).

    Both name the same saved file, as a Hypothesis search does: it saves each shrinking step
    over the last, so the file holds the last, minimal case.
    """
    failure_file = str(directory / f"outputs_match_oracle-{form}.json")
    records = []
    for T, r in ((17, 40.0), (5, 25.0)):
        bad = comparison("o", kernel, r, rho=1e5, mismatched=T)
        good = comparison("final_state", kernel, 0.2, rho=3.0)
        records.append(
            record(kernel, form, T, "float32", [bad, good], failure_file=failure_file, seed=T)
        )
    assert not any(r.ok for r in records)
    return records


@pytest.fixture(scope="session")
def broken_records(tmp_path_factory: pytest.TempPathFactory) -> list[CaseRecord]:
    """Cases of ``bug/scaled`` (a chunked kernel), their failure saved in one file."""
    return failing_records("bug/scaled", "chunk", tmp_path_factory.mktemp("failures"))


@pytest.fixture(scope="session")
def evil_records(tmp_path_factory: pytest.TempPathFactory) -> list[CaseRecord]:
    """A wrong kernel whose name is markup: every page must show it as text."""
    return failing_records(EVIL_NAME, "recurrent", tmp_path_factory.mktemp("evil-failures"))


def harness_error(kernel: str = "torch/chunk", message: str = "RuntimeError: boom") -> CaseRecord:
    """A case the harness itself failed on: failed, ``error`` set, the error in ``reason``."""
    failed = record(kernel, "chunk", 8, "float32", (), status="failed", reason=message)
    return dataclasses.replace(failed, error=True)


class Build:
    """The builders above, for the tests (a fixture: test modules do not import conftest)."""

    comparison = staticmethod(comparison)
    record = staticmethod(record)
    harness_error = staticmethod(harness_error)
    failing_records = staticmethod(failing_records)


@pytest.fixture(scope="session")
def build() -> type[Build]:
    """The record builders."""
    return Build


WriteRun = Callable[..., Path]


@pytest.fixture
def write_run(tmp_path: Path) -> WriteRun:
    """Return ``write(name, records, kernels=(), render=True, finish=True) -> run directory``."""

    def write(
        name: str,
        records: Iterable[CaseRecord],
        kernels: Iterable[Kernel] = (),
        *,
        render: bool = True,
        finish: bool = True,
    ) -> Path:
        directory = tmp_path / name
        writer = RunWriter(
            directory,
            command="run",
            environment=ENVIRONMENT,
            arguments={"examples": 2, "forms": ["chunk"]},
            profile="test",
            seed=0,
        )
        for kernel in kernels:
            writer.add_kernel(kernel)
        for one in records:
            writer.add_case(one)
        if finish:
            writer.finish(render=render)
        return directory

    return write


@pytest.fixture
def reference_kernels() -> list[Kernel]:
    """The torch reference kernels (``torch/<form>``: what `passing_records` name)."""
    kernels = torch_reference_kernels()
    assert [k.name for k in kernels] == [f"torch/{form}" for form in FORMS]
    return kernels
