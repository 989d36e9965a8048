# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The kernel tables of ``benchmarks/RESULTS.md`` (GPU, CPU, delta rule) and their helpers.

Rendered by `results.py` (beside this file, not a package) from pytest-benchmark JSON.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

PLOT = Path(__file__).resolve().parent / "time_vs_T.png"
"""The plot of time against T that `results.py` draws and the CPU table links."""

FORMS = ("parallel", "chunk", "recurrent")


PASSES = ("forward", "forward+backward")


Row = dict[str, Any]


def median_ms(bench: Row) -> float:
    return float(bench["stats"]["median"]) * 1e3


def ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def ratio(num: float | None, den: float | None) -> str:
    return "-" if not num or not den else f"{num / den:.2f}"


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(T): 1 is linear growth, 2 quadratic."""
    xs = [math.log(t) for t, _ in points]
    ys = [math.log(v) for _, v in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def by_suite(data: Row, suite: str) -> list[Row]:
    return [b for b in data["benchmarks"] if b["extra_info"].get("suite") == suite]


def kernel_index(benches: list[Row]) -> dict[tuple[str, str, int, int], Row]:
    """Index kernel benchmarks by (impl, passes, T, K)."""
    return {
        (
            b["extra_info"]["impl"],
            b["extra_info"]["passes"],
            b["extra_info"]["T"],
            b["extra_info"]["K"],
        ): b
        for b in benches
    }


def time_of(index: dict[tuple[str, str, int, int], Row], *key: Any) -> float | None:
    """Median ms of the benchmark at ``(impl, passes, T, K)``, or `None` if it did not run."""
    bench = index.get(key)
    return None if bench is None else median_ms(bench)


def shared_note(info: Row) -> str:
    """Say whether other work competed for the CPU (the suites run on one thread)."""
    busiest = max(info["loadavg_start"][0], info["loadavg_end"][0])
    if busiest <= 1.2:
        return "The machine was otherwise idle (1-minute load at most 1.2 around the run)."
    return (
        f"The machine was shared with other jobs while these ran (1-minute load up to"
        f" {busiest:.1f} on {info['cpu_count']} cores), so CPU timings carry noise of tens of"
        " percent (compare neighbouring rows with care); medians damp it."
    )


def gpu_section(data: Row) -> list[str]:
    benches = [b for b in by_suite(data, "kernels") if b["extra_info"]["dtype"] == "bfloat16"]
    lines = ["## GPU (CUDA): FLA comparison and bandwidth roofline", ""]
    if not benches:
        return [
            *lines,
            "**No GPU was drawn for this issue, so there are no GPU numbers.** The CUDA cases"
            " (`benchmarks/test_kernels.py::test_cuda_*`: bf16, B = 8, H = 16 so B·H = 128,"
            " K = V = 128, T in {1k, 4k, 16k}; our chunk, parallel and recurrent forms against"
            " FLA's `chunk_linear_attn`, `fused_chunk_linear_attn`, `parallel_simple_gla` and"
            " `fused_recurrent_linear_attn`, plus forward bandwidth against a measured device"
            " copy) were collected and skipped with the reason `no CUDA device`. The targets"
            " (chunked forward+backward >= 1.1x FLA's chunk kernels, forward >= 70% of the copy"
            " bandwidth) are therefore **not measured**; running `python benchmarks/results.py`"
            " on a CUDA machine fills this section.",
            "",
        ]
    index = kernel_index(benches)
    lines.append(f"Device: {benches[0]['extra_info']['device']}. bf16, B = 8, H = 16, K = V = 128.")
    lines.append("")
    impls = sorted({b["extra_info"]["impl"] for b in benches}, key=lambda i: (i.split("/")[-1], i))
    seq_lens = sorted({b["extra_info"]["T"] for b in benches})
    for passes in PASSES:
        rows = []
        for impl in impls:
            rows.append([impl, *(ms(time_of(index, impl, passes, T, 128)) for T in seq_lens)])
        lines += [
            f"**{passes}**, median ms:",
            "",
            *table(["impl", *(f"T={T}" for T in seq_lens)], rows),
        ]
        for fla in ("fla/linear_attn.chunk", "fla/linear_attn.fused_chunk"):
            speedups = [
                ratio(
                    time_of(index, fla, passes, T, 128),
                    time_of(index, "triton/chunk", passes, T, 128),
                )
                for T in seq_lens
            ]
            lines += [
                f"Speed-up of triton/chunk over {fla} ({passes}; above 1: ours is faster): "
                + ", ".join(f"T={T}: {s}x" for T, s in zip(seq_lens, speedups, strict=True)),
                "",
            ]
    rows = []
    for b in benches:
        e = b["extra_info"]
        if e["passes"] != "forward" or "bytes_moved" not in e:
            continue
        achieved = e["bytes_moved"] / b["stats"]["median"]
        rows.append(
            [
                e["impl"],
                e["T"],
                f"{achieved / 1e9:,.0f}",
                f"{e['copy_bandwidth'] / 1e9:,.0f}",
                f"{100 * achieved / e['copy_bandwidth']:.0f}%",
            ]
        )
    lines += [
        "**Forward bandwidth** (compulsory bytes q, k, v, o over the median time) against a"
        " 1 GiB device copy:",
        "",
        *table(["impl", "T", "GB/s", "copy GB/s", "of roofline"], rows),
    ]
    return lines


def cpu_kernel_section(data: Row) -> list[str]:
    benches = [b for b in by_suite(data, "kernels") if b["extra_info"]["dtype"] == "float32"]
    if not benches:
        return []
    index = kernel_index(benches)
    fla_of = {
        b["extra_info"]["form"]: b["extra_info"]["impl"]
        for b in benches
        if b["extra_info"]["library"] == "fla"
    }
    lines = [
        "## CPU kernels (Triton interpreter)",
        "",
        "fp32, B = 1, H = 2, unnormalized, identity features, no decay. Our Triton kernels and"
        " FLA's run under the Triton interpreter, which emulates every program with numpy: the"
        " times measure how much interpreted work a kernel launches (programs x loop steps), not"
        " GPU speed, and the `triton/FLA` ratio (below 1: ours is faster) compares the two"
        " designs only in that sense. torch is the project's float32 reference of the same"
        " form. Peak memory: torch tensors allocated during the call (profiler allocation records;"
        " the interpreter's numpy copies are not counted), in KiB.",
        "",
    ]
    for passes in PASSES:
        rows = []
        keys = sorted(
            {
                (e["form"], e["T"], e["K"])
                for e in (b["extra_info"] for b in benches)
                if e["passes"] == passes
            },
            key=lambda k: (FORMS.index(k[0]), k[2], k[1]),
        )
        for form, T, K in keys:
            got = {
                lib: index.get((impl, passes, T, K))
                for lib, impl in (
                    ("triton", f"triton/{form}"),
                    ("fla", fla_of.get(form, "")),
                    ("torch", f"torch/{form}"),
                )
            }
            t = {lib: median_ms(b) if b else None for lib, b in got.items()}
            mem = [
                f"{b['extra_info']['peak_bytes'] / 1024:,.0f}" if b else "-" for b in got.values()
            ]
            rows.append(
                [
                    form,
                    T,
                    K,
                    ms(t["triton"]),
                    ms(t["fla"]),
                    ms(t["torch"]),
                    ratio(t["triton"], t["fla"]),
                    *mem,
                ]
            )
        lines += [
            f"**{passes}**, median ms (FLA: {', '.join(sorted(set(fla_of.values())))}):",
            "",
            *table(
                [
                    "form",
                    "T",
                    "K",
                    "triton",
                    "FLA",
                    "torch",
                    "triton/FLA",
                    "peak triton",
                    "peak FLA",
                    "peak torch",
                ],
                rows,
            ),
        ]
    rows = []
    for passes in PASSES:
        for form in FORMS:
            for impl in (f"triton/{form}", fla_of.get(form, ""), f"torch/{form}"):
                points = sorted(
                    (T, median_ms(b))
                    for (i, p, T, K), b in index.items()
                    if i == impl and p == passes and K == 16
                )
                if len(points) >= 3:
                    rows.append(
                        [
                            passes,
                            impl,
                            f"{points[0][0]}-{points[-1][0]}",
                            f"{slope(points):.2f}",
                            f"{slope([p for p in points if p[0] >= 256]):.2f}"
                            if sum(p[0] >= 256 for p in points) >= 2
                            else "-",
                        ]
                    )
    lines += [
        "**Growth with T** (least-squares slope of log time against log T, K = 16; 1 ="
        " linear, 2 = quadratic; the interpreter's fixed per-launch costs flatten short T):",
        "",
        *table(["pass", "impl", "T range", "slope", "slope, T >= 256"], rows),
        f"![time vs T]({PLOT.name})",
        "",
    ]
    return lines


def delta_kernel_section(data: Row) -> list[str]:
    """Our delta-rule kernels beside FLA's, per form, dtype, shape and pass, with the ratio."""
    benches = by_suite(data, "delta_kernels")
    if not benches:
        return []
    cells: dict[tuple[str, str, str, int, int, str], dict[str, float]] = defaultdict(dict)
    for b in benches:
        e = b["extra_info"]
        # Recorded before the chunk form joined the suite: recurrent, fp32 CPU only.
        form = e.get("form", "chunk" if e["impl"].endswith(".chunk") else "recurrent")
        key = (
            e.get("device", "cpu"),
            form,
            e.get("dtype", "float32"),
            e.get("T", 0),
            e.get("K", 32),
        )
        cells[(*key, e["passes"])][e["impl"].split("/")[0]] = median_ms(b)
    rows = [
        [
            device,
            form,
            dtype,
            T,
            K,
            passes,
            ms(c.get("triton")),
            ms(c.get("fla")),
            ratio(c.get("triton"), c.get("fla")),
        ]
        for (device, form, dtype, T, K, passes), c in sorted(
            cells.items(),
            key=lambda kv: (kv[0][0], FORMS.index(kv[0][1]), kv[0][2], kv[0][5], kv[0][3]),
        )
    ]
    info = data["linattn"].get("merged", {}).get("delta_kernels")
    gpu = data["linattn"].get("merged", {}).get("delta_kernels@cuda")
    when = ""
    if info is not None:
        date = datetime.fromisoformat(info["datetime"]).strftime("%Y-%m-%d %H:%M UTC")
        load = " → ".join(f"{a[0]:.2f}" for a in (info["loadavg_start"], info["loadavg_end"]))
        when = (
            f" Measured {date} (merged into this file with `--suites test_delta_kernels.py"
            f" --merge`), 1-minute load {load} on {info['cpu_count']} cores."
        )
    return [
        "## Delta-rule kernels: interpreter timings",
        "",
        "`benchmarks/test_delta_kernels.py`: DeltaNet (no gate), q, k L2-normalised in the kernel,"
        " beta in (0, 1), B = 1, H = 2, K = V = 32 on the CPU. Ours (`triton/delta.recurrent`,"
        " `triton/delta.chunk`, C = 64) beside FLA 0.6.0's (`fused_recurrent_delta_rule`,"
        " `chunk_delta_rule`, C = 64), both under the Triton interpreter (FLA through"
        " `linattn_verify.interpreter`'s patches). FLA's chunk kernel asserts 16-bit inputs, so"
        " the chunk comparison is in bf16 (ours also in fp32, with no FLA counterpart); the"
        " recurrent one is in fp32. Median ms of 2 rounds; `ours/FLA` below 1: ours is faster."
        " The interpreter emulates every program with numpy, so the times count interpreted"
        " work (programs x loop steps x block sizes), not GPU speed. The CPU was shared with"
        " other jobs on 2 cores while these ran: absolute times carry tens of percent of noise,"
        " and the meaningful number is the ratio of the two kernels on the same shape and pass."
        + when
        + (
            f" Rows with device `cuda`: bf16, B = 8, H = 16, K = V = 128, 10 rounds, on"
            f" {gpu['gpu']} ({datetime.fromisoformat(gpu['datetime']):%Y-%m-%d %H:%M} UTC,"
            " merged with `--merge-json`); a case missing there was cut off by the lease."
            if gpu is not None
            else ""
            if any(e[0] == "cuda" for e in cells)
            else " The CUDA cases (`test_cuda`, `test_cuda_chunk`: bf16, B = 8, H = 16,"
            " K = V = 128, T in {1k, 4k}, both forms) were collected and skipped with the reason"
            " `no CUDA device`; on a CUDA machine they fill rows with device `cuda`."
        ),
        "",
        *table(
            ["device", "form", "dtype", "T", "K", "pass", "ours ms", "FLA ms", "ours/FLA"], rows
        ),
    ]
