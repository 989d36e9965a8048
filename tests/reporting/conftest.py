# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Real case records for the report tests: the torch reference kernels, and deliberately wrong ones.

The records come from `_runner.verify_case`, the same path `linattn-verify run` scores with, on a
few small fixed cases (a second or two in all on one CPU core).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from linattn_properties._testing import example_spec

from linattn_verify._runner import case_record, verify_case
from linattn_verify.failures import save_failure
from linattn_verify.kernel import Kernel
from linattn_verify.registry import get_kernel, registered_properties
from linattn_verify.reporting import RunWriter
from linattn_verify.strategies import ProblemSpec

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
EVIL_NAME = "<script>alert(1)</script>|x"


def spec(**changes: Any) -> ProblemSpec:
    """The properties' small example case with T = 16 and ``changes``."""
    return example_spec(**{"T": 16, **changes})


def scaled(kernel: Kernel, factor: float, name: str) -> Kernel:
    """``kernel`` with its output multiplied by ``factor``: wrong by far more than its bound."""
    fn = kernel.fn

    def wrong(*args: Any, **kwargs: Any) -> Any:
        o, state = fn(*args, **kwargs)
        return o * factor, state

    return replace(kernel, name=name, fn=wrong)


@pytest.fixture(scope="session")
def passing_records() -> list[dict[str, Any]]:
    """The three torch reference forms on T in SEQ_LENS, fp32 and bf16, plus a backward case."""
    records = []
    for form in FORMS:
        kernel = get_kernel(f"torch/{form}")
        for T in SEQ_LENS:
            for dtype in DTYPES:
                records.append(verify_case(kernel, spec(T=T, dtype=dtype), backward=False))
        records.append(verify_case(kernel, spec(T=12), backward=True))
    assert all(r["ok"] for r in records)
    return records


def failing_records(kernel: Kernel, directory: Path) -> list[dict[str, Any]]:
    """Two failing cases of a wrong kernel, each failure saved for replay."""
    records = []
    prop = registered_properties()["outputs_match_oracle"]
    for T in (5, 17):
        case = spec(T=T)
        result = prop(case, kernel)
        record = case_record(kernel, case, result, 0.01)
        if not result.ok:
            record["failure_file"] = str(save_failure(result, case, kernel.name, directory))
        records.append(record)
    assert not any(r["ok"] for r in records)
    return records


@pytest.fixture(scope="session")
def broken_kernel() -> Kernel:
    """``bug/scaled``: torch/chunk with its output scaled by 1.01."""
    return scaled(get_kernel("torch/chunk"), 1.01, "bug/scaled")


@pytest.fixture(scope="session")
def broken_records(
    broken_kernel: Kernel, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """Cases of ``bug/scaled``, each failure saved."""
    return failing_records(broken_kernel, tmp_path_factory.mktemp("failures"))


@pytest.fixture(scope="session")
def evil_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """A wrong kernel whose name is markup: every page must show it as text."""
    kernel = scaled(get_kernel("torch/recurrent"), 1.01, EVIL_NAME)
    return failing_records(kernel, tmp_path_factory.mktemp("evil-failures"))


WriteRun = Callable[..., Path]


@pytest.fixture
def write_run(tmp_path: Path) -> WriteRun:
    """Return ``write(name, records, kernels=(), render=True, finish=True) -> run directory``."""

    def write(
        name: str,
        records: Iterable[Mapping[str, Any]],
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
        for record in records:
            writer.add_case(record)
        if finish:
            writer.finish(render=render)
        return directory

    return write


@pytest.fixture
def reference_kernels() -> list[Kernel]:
    return [get_kernel(f"torch/{form}") for form in FORMS]
