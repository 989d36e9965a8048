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
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bound_cases import CASES


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


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
