# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Time the float64 oracles and error bounds of one case per family on each available device.

    python benchmarks/gpu/bound_cost.py OUT.json [--T 1024 4096] [--seconds 120]
        [--families linear_attn delta] [--devices cuda cpu]

The configuration is issue #27's measurement (H = 2, K = V = 64, fp32 inputs, chunk recipe,
forward bounds then gradient bounds). Each (family, gate, T, device) cell is timed once, after
a warm-up at T = 64 (CUDA first); a cell that raises records its error instead (the bounds were
written for CPU tensors, and this shows where a CUDA tensor breaks them). Cells stop being
started once ``--seconds`` have passed, and the JSON is rewritten after every cell, so a run
cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def linear_case(T: int, gate: str, device: str) -> Callable[[], object]:
    from linattn_verify.recipe import PrecisionRecipe
    from linattn_verify.semantics import validate_problem
    from linattn_verify.tolerance import backward_bounds, forward_bounds

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    g_shape = (1, T, 2) if gate == "scalar" else (1, T, 2, 64)
    g = -torch.rand(*g_shape, generator=gen) * 0.05
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, g, do = (x.to(device) for x in (q, k, v, g, do))
    problem = validate_problem(q, k, v, g, feature_map="identity")
    recipe = PrecisionRecipe(form="chunk")

    def run() -> object:
        forward = forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, forward=forward)

    return run


def delta_case(T: int, gate: str, device: str) -> Callable[[], object]:
    from linattn_verify.delta.bounds import forward_bounds
    from linattn_verify.delta.gradient_bounds import backward_bounds
    from linattn_verify.delta.kernel import DeltaRecipe
    from linattn_verify.delta.problem import validate_delta

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 2, 64, generator=gen) for _ in range(3))
    beta = torch.rand(1, T, 2, generator=gen)
    g = -torch.rand(1, T, 2, generator=gen) * 0.05 if gate == "scalar" else None
    do = torch.randn(1, T, 2, 64, generator=gen)
    q, k, v, beta, do = (x.to(device) for x in (q, k, v, beta, do))
    g = None if g is None else g.to(device)
    problem = validate_delta(q, k, v, beta, g, l2norm_qk=True)
    recipe = DeltaRecipe(form="chunk")

    def run() -> object:
        forward_bounds(problem, recipe)
        return backward_bounds(problem, recipe, do=do, d_final_state=None)

    return run


CASES: dict[str, tuple[Callable[[int, str, str], Callable[[], object]], tuple[str, ...]]] = {
    "linear_attn": (linear_case, ("scalar", "vector")),
    "delta": (delta_case, ("none", "scalar")),
}


def measure(make: Callable[[], Callable[[], object]], device: str) -> dict[str, Any]:
    try:
        run = make()
        _sync(device)
        start = time.perf_counter()
        run()
        _sync(device)
        return {"seconds": time.perf_counter() - start}
    except Exception as error:  # a probe: the error is the finding
        return {"error": f"{type(error).__name__}: {error}"[:500]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the JSON results")
    parser.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--families", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--devices",
        nargs="+",
        choices=("cuda", "cpu"),
        default=["cuda", "cpu"],
        help="where to time (cuda only where it is available)",
    )
    args = parser.parse_args(argv)
    devices = [d for d in args.devices if d == "cpu" or torch.cuda.is_available()]
    torch.set_num_threads(1)
    began = time.monotonic()
    cells: list[dict[str, Any]] = []
    for family in args.families:
        case, gates = CASES[family]
        for gate in gates:
            for device in devices:
                # Warm-up: imports, CUDA initialisation.
                measure(functools.partial(case, 64, gate, device), device)
                previous = 0.0
                for T in args.T:
                    # A larger T after a slow cell would take the rest of the lease (the
                    # quadratic bounds grow at least 4x per doubling of T).
                    if time.monotonic() - began > args.seconds or previous > args.seconds / 8:
                        break
                    cell = {"family": family, "gate": gate, "device": device, "T": T}
                    cell |= measure(functools.partial(case, T, gate, device), device)
                    print(json.dumps(cell), flush=True)
                    cells.append(cell)
                    previous = cell.get("seconds", args.seconds)
                    args.out.write_text(json.dumps(cells, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
