# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Worst r per kernel and dtype on the lifted feature maps (issue #17), with their findings.

    python benchmarks/lifted_accuracy.py [CASES_PER_GROUP]      # default 12; prints Markdown

Every kernel that applies a lifted map (ours, the torch references, FLA's based and rebased when
FLA is installed) is narrowed to the lifted maps and to one dtype, and `CASES_PER_GROUP` cases
are drawn for it by `kernel_specs` (derandomized: the same cases on every run). Each case runs
`outputs_match_oracle` and `gradients_match_oracle`; the table gives, per kernel and dtype, the
worst r of o and of the gradients (the maps mixed), the cases the bound could not decide, and
every failure with its case. Under the interpreter this takes minutes.
"""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.registry import registered_kernels, registered_properties
from linattn_verify.typing import LIFTED_MAPS

PROPERTIES = ("outputs_match_oracle", "gradients_match_oracle")


def lifted_kernels() -> list[Kernel]:
    """Registered kernels (FLA's included when installed) that apply some lifted map."""
    from linattn_verify.linear_attn.adapters.fla import fla_kernels

    kernels = [k for k in registered_kernels("linear_attn").values() if isinstance(k, Kernel)]
    with contextlib.suppress(ImportError):  # FLA not installed: ours and the references only
        kernels += fla_kernels()
    return [k for k in kernels if set(k.capabilities.feature_maps) & set(LIFTED_MAPS)]


def narrowed(kernel: Kernel, dtype: str) -> Kernel:
    """``kernel`` drawing only its lifted maps and ``dtype``."""
    maps = tuple(m for m in kernel.capabilities.feature_maps if m in LIFTED_MAPS)
    return replace(
        kernel, capabilities=replace(kernel.capabilities, feature_maps=maps, dtypes=(dtype,))
    )


def measure(kernel: Kernel, cases: int) -> dict[str, Any]:
    """Worst r of o and of the gradients, undecided cases and failures over ``cases`` draws."""
    worst: dict[str, float] = defaultdict(float)
    undecided = 0
    failures: list[str] = []
    checks = registered_properties()

    @settings(
        max_examples=cases, derandomize=True, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(spec=kernel_specs(kernel, max_seq_len=24, max_head_dim=6))
    def one(spec: ProblemSpec) -> None:
        nonlocal undecided
        for name in PROPERTIES:
            result = checks[name](spec, kernel)
            if result.status == "failed":
                failures.append(f"{name} {spec!r}")
            elif result.status != "held":
                undecided += 1
            for c in result.comparisons:
                if c.scores is not None and c.scores.r is not None:
                    side = "o" if c.tensor in ("o", "final_state", "final_key_sum") else "grads"
                    worst[side] = max(worst[side], c.scores.r)

    one()
    return {
        "o": worst.get("o"),
        "grads": worst.get("grads"),
        "undecided": undecided,
        "failures": failures,
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv: list[str]) -> int:
    cases = int(argv[1]) if len(argv) > 1 else 12
    print("| kernel | dtype | maps | worst r, o and states | worst r, grads | undecided | failed |")
    print("|---|---|---|---|---|---|---|")
    findings: list[str] = []
    for kernel in lifted_kernels():
        maps = ",".join(m for m in kernel.capabilities.feature_maps if m in LIFTED_MAPS)
        for dtype in kernel.capabilities.dtypes:
            row = measure(narrowed(kernel, dtype), cases)
            print(
                f"| {kernel.name} | {dtype} | {maps} | {_fmt(row['o'])} | {_fmt(row['grads'])} | "
                f"{row['undecided']} | {len(row['failures'])} |",
                flush=True,
            )
            findings += [f"{kernel.name} {dtype}: {f}" for f in row["failures"]]
    for line in findings:
        print("-", line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
