# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run the benchmark suites and write ``benchmarks/RESULTS.md`` and ``benchmarks/time_vs_T.png``.

    python benchmarks/results.py            # run every suite (about 15 min on 2 CPU cores), write
    python benchmarks/results.py --full     # also the minutes-long mpmath 1024x64 oracle case
    python benchmarks/results.py --render   # only rewrite RESULTS.md from benchmarks/results.json
    python benchmarks/results.py --suites test_delta_kernels.py --merge
                                            # re-run one suite, merge it into results.json, write
    python benchmarks/results.py --merge-json bench.json
                                            # merge a GPU run's timings (its CUDA rows), write

The suites write pytest-benchmark JSON (``--benchmark-json``) with each case's description in
``extra_info`` (``suite`` says which table it belongs to); the tables report medians. The
xdist section comes from ``benchmarks/xdist_equivalence.json`` (``xdist_equivalence.py``).

``--merge`` keeps every benchmark of ``results.json`` whose suite the new run did not produce
and replaces the others; the merged suites' own date, machine and load are kept under
``linattn.merged`` (their section shows them; the header stays that of the full run).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import delta_accuracy  # noqa: E402  (beside this script, not a package)

RESULTS_JSON = HERE / "results.json"
XDIST_JSON = HERE / "xdist_equivalence.json"
RESULTS_MD = HERE / "RESULTS.md"
PLOT = HERE / "time_vs_T.png"
SUITES = ("test_kernels.py", "test_harness.py", "test_oracle_cost.py", "test_delta_kernels.py")
FORMS = ("parallel", "chunk", "recurrent")
PASSES = ("forward", "forward+backward")

Row = dict[str, Any]


def run_suites(json_path: Path, full: bool, suites: Iterable[str] = SUITES) -> int:
    """Run the benchmark suites with pytest, writing ``json_path``; return pytest's status."""
    command = [sys.executable, "-m", "pytest", *(str(HERE / s) for s in suites)]
    command += ["--benchmark-only", f"--benchmark-json={json_path}", "-q", "-p", "no:xdist"]
    if not full:
        command += ["-k", "not mpmath-1024"]
    print("running:", " ".join(command), flush=True)
    return subprocess.run(command, cwd=HERE.parent).returncode


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


def header_section(data: Row, full: bool) -> list[str]:
    info = data["linattn"]
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    when = datetime.fromisoformat(data["datetime"]).strftime("%Y-%m-%d %H:%M UTC")
    start, end = (
        " ".join(f"{x:.2f}" for x in avg) for avg in (info["loadavg_start"], info["loadavg_end"])
    )
    load = f"{start} → {end}"
    return [
        "# Benchmark results",
        "",
        "Regenerate everything with one command (about 15 minutes on 2 CPU cores; one suite:"
        " `--suites test_delta_kernels.py --merge`):",
        "",
        "```bash",
        "python benchmarks/results.py           # runs the suites, writes this file and the plot",
        "python benchmarks/xdist_equivalence.py  # re-runs the 1-vs-2-worker comparison (slow)",
        "```",
        "",
        "Generated by `benchmarks/results.py` from `benchmarks/results.json`; every time is the"
        " median of its rounds (pytest-benchmark). Benchmarks are measurements, not assertions.",
        "",
        "## Machine",
        "",
        *table(
            ["", ""],
            [
                ["date", when],
                ["CPU", f"{info['cpu']}, {info['cpu_count']} cores; torch on 1 thread"],
                ["load average (1/5/15 min), start → end", load],
                ["GPU", info["gpu"] or "none (no GPU was drawn for this run)"],
                ["versions", versions],
                [
                    "Triton mode",
                    "interpreter (TRITON_INTERPRET=1)"
                    if info["triton_interpret"] not in ("", "0")
                    else "compiled",
                ],
                ["mpmath 1024x64 case", "included" if full else "skipped (`--full` runs it)"],
            ],
        ),
        shared_note(info),
        "",
    ]


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


def oracle_section(data: Row) -> list[str]:
    benches = by_suite(data, "oracle")
    if not benches:
        return []
    cells: dict[tuple[int, int, bool], dict[str, float]] = defaultdict(dict)
    for b in benches:
        e = b["extra_info"]
        cells[(e["T"], e["D"], e["decay"])][e["oracle"]] = median_ms(b)
    rows = []
    for (T, D, decay), c in sorted(cells.items()):
        f64, dd, mp = (c.get(k) for k in ("float64", "double-double", "mpmath"))
        rows.append(
            [
                f"{T}x{D}",
                "yes" if decay else "no",
                ms(f64),
                ms(dd),
                ms(mp),
                ratio(dd, f64),
                ratio(mp, f64),
            ]
        )
    return [
        "## Oracle cost",
        "",
        "B = H = 1, K = V = D, elu1, normalized (eps = 1e-6), fp32 inputs, torch on 1 thread;"
        " median ms (mpmath: one round).",
        "",
        *table(
            ["T x D", "decay", "float64", "double-double", "mpmath", "dd/f64", "mpmath/f64"], rows
        ),
    ]


def harness_section(data: Row) -> list[str]:
    checks = by_suite(data, "property_checks")
    zoo = by_suite(data, "zoo")
    lines: list[str] = []
    if checks:
        per: dict[str, dict[str, str]] = defaultdict(dict)
        kernels = sorted({b["extra_info"]["kernel"] for b in checks})
        for b in checks:
            e = b["extra_info"]
            rate = e["checked"] / b["stats"]["median"] if e["checked"] else None
            per[e["property"]][e["kernel"]] = (
                f"{rate:.1f} ({e['checked']}/{e['specs']})"
                if rate
                else f"n/a ({'; '.join(e['skipped_reasons'])})"
            )
        rows = [[p, *(per[p].get(k, "-") for k in kernels)] for p in per]
        lines += [
            "## Harness: property checks per second",
            "",
            "Each property on 4 fixed cases (T <= 37, K, V <= 8; fp32, bf16, fp16; dense and"
            " packed; normalized and not): checks per second = cases the property applied to"
            " / median time of one pass over the 4 cases (applied/4 in brackets).",
            "",
            *table(["property", *kernels], rows),
        ]
    if zoo:
        rows = []
        for b in zoo:
            e = b["extra_info"]
            rows.append(
                [
                    e["kernel"].removeprefix("zoo/"),
                    e["bug_class"],
                    e["examples"],
                    f"{statistics.median(e['seconds_to_failure']):.2f}",
                    f"{b['stats']['median']:.2f}",
                    ", ".join(e["caught_by"][:3]) + (" ..." if len(e["caught_by"]) > 3 else ""),
                ]
            )
        total = sum(b["stats"]["median"] for b in zoo)
        lines += [
            "## Harness: bug zoo, time to first failure",
            "",
            "`tests/zoo`'s search (whole catalogue per example; a failure counts when the"
            " correct twin holds) under the derandomized `ci` profile, 3 rounds each; seconds"
            " to the first counted failure (median) and of the whole search. Sum of searches:"
            f" {total:.1f} s.",
            "",
            *table(
                ["zoo kernel", "bug class", "examples", "s to failure", "s search", "caught by"],
                rows,
            ),
        ]
    return lines


def xdist_section() -> list[str]:
    lines = [
        "## Scale-out: pytest-xdist",
        "",
        "The property suite shards over processes with `-n auto` (`python -m pytest -n auto`)."
        " With several GPUs, the plugin gives worker `gwN` the `N mod count`-th visible GPU"
        " through `CUDA_VISIBLE_DEVICES` before any conftest loads (`pytest_plugin.pin_worker_gpu`,"
        " tested in `tests/plugin/test_worker_gpu.py`). `tests/plugin/test_xdist_equivalence.py`"
        " checks in CI that 12 property tests end the same with 1 and 2 workers.",
        "",
    ]
    if not XDIST_JSON.exists():
        return [
            *lines,
            "The bigger run has not been recorded: `python benchmarks/xdist_equivalence.py`.",
            "",
        ]
    summary = json.loads(XDIST_JSON.read_text())
    rows = [
        [
            f"`{r['command']}`",
            r["exit_status"],
            f"{r['seconds']:.0f}",
            ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items())),
        ]
        for r in summary["runs"]
    ]
    verdict = (
        "every test ended the same way in both runs"
        if not summary["differ"]
        else f"{len(summary['differ'])} tests differ: {summary['differ']}"
    )
    return [
        *lines,
        f"Measured {summary['date']} on {summary['cpu_count']} CPU cores"
        f" ({summary['tests']} tests):",
        "",
        *table(["command", "exit", "wall s", "outcomes"], rows),
        f"Result: {verdict}.",
        "",
    ]


def plot(data: dict[str, Any], path: Path) -> None:
    """Draw median time against T (log-log) for every kernel at K = 16, one panel per pass."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = [
        b
        for b in by_suite(data, "kernels")
        if b["extra_info"]["dtype"] == "float32" and b["extra_info"]["K"] == 16
    ]
    if not benches:
        return
    colors = dict(zip(FORMS, ("tab:red", "tab:blue", "tab:green"), strict=True))
    styles = {"triton": "-", "fla": ":", "torch": "--"}
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    for ax, passes in zip(axes, PASSES, strict=True):
        lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for b in benches:
            e = b["extra_info"]
            if e["passes"] == passes:
                lines[e["impl"]].append((e["T"], median_ms(b)))
        for impl, points in sorted(lines.items()):
            points.sort()
            form = next(b["extra_info"]["form"] for b in benches if b["extra_info"]["impl"] == impl)
            library = impl.split("/")[0]
            ax.plot(
                *zip(*points, strict=True),
                styles[library],
                color=colors[form],
                marker="o",
                ms=3,
                label=impl,
            )
        t = [64, 4096]
        # Reference slopes through a fixed point, so that growth rates can be compared by eye.
        ax.plot(t, [1e-1 * x / 64 for x in t], color="grey", lw=0.8, label="slope 1 (linear)")
        ax.plot(
            t,
            [1e-1 * (x / 64) ** 2 for x in t],
            color="grey",
            lw=0.8,
            ls="-.",
            label="slope 2 (quadratic)",
        )
        ax.set(
            xscale="log", yscale="log", xlabel="T (tokens)", title=f"{passes}, CPU, B=1 H=2 K=V=16"
        )
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median time (ms)")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(
        "time vs T: Triton and FLA under the interpreter (solid, dotted), torch references (dashed)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _where(bench: Row) -> tuple[str | None, bool]:
    """A benchmark's suite, and whether it ran on CUDA (its device names no CPU)."""
    info = bench["extra_info"]
    return info.get("suite"), "cpu" not in str(info.get("device", "cpu")).lower()


def merge(into: Path, new: Path) -> list[str]:
    """Replace the benchmarks of ``into`` whose suite ``new`` ran by ``new``'s; return those suites.

    A run of some suites alone would otherwise overwrite the whole file, and with it the
    timings of every suite not re-run. Suites are told apart by device too, so a GPU run's
    ``bench.json`` replaces only the CUDA rows (a CPU run only the CPU rows).
    """
    old_data, new_data = json.loads(into.read_text()), json.loads(new.read_text())
    replaced = {_where(b) for b in new_data["benchmarks"] if b["extra_info"].get("suite")}
    ran = sorted({suite for suite, _ in replaced if suite is not None})
    kept = [b for b in old_data["benchmarks"] if _where(b) not in replaced]
    old_data["benchmarks"] = kept + new_data["benchmarks"]
    merged = old_data["linattn"].setdefault("merged", {})
    for suite, cuda in replaced:
        key = f"{suite}@cuda" if cuda else suite
        merged[key] = {"datetime": new_data["datetime"], **new_data["linattn"]}
    into.write_text(json.dumps(old_data, indent=4) + "\n")
    return ran


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


def render(json_path: Path, full: bool) -> None:
    data = json.loads(json_path.read_text())
    sections = [
        header_section(data, full),
        gpu_section(data),
        cpu_kernel_section(data),
        delta_kernel_section(data),
        oracle_section(data),
        harness_section(data),
        xdist_section(),
        delta_accuracy.section(HERE / "delta_accuracy"),
    ]
    RESULTS_MD.write_text(
        "\n".join(line for section in sections for line in section).rstrip() + "\n"
    )
    plot(data, PLOT)
    print(f"wrote {RESULTS_MD} and {PLOT}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks and write RESULTS.md.")
    parser.add_argument("--render", action="store_true", help="only rewrite RESULTS.md from --json")
    parser.add_argument("--full", action="store_true", help="include the mpmath 1024x64 case")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="pytest-benchmark JSON")
    parser.add_argument(
        "--suites",
        nargs="+",
        choices=SUITES,
        default=list(SUITES),
        help="the suite files to run (default: all)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="merge the suites' timings into --json instead of replacing the file",
    )
    parser.add_argument(
        "--merge-json",
        type=Path,
        metavar="FILE",
        help="merge a pytest-benchmark JSON made elsewhere (a GPU run's bench.json) into --json "
        "without running anything, then render",
    )
    args = parser.parse_args(argv)
    status = 0
    if args.merge_json is not None:
        if not args.merge_json.is_file():
            parser.error(f"--merge-json {args.merge_json}: no such file")
        print("merged suites:", ", ".join(merge(args.json, args.merge_json)))
    elif not args.render and args.merge:
        fresh = args.json.with_suffix(".new.json")
        status = run_suites(fresh, args.full, args.suites)
        print("merged suites:", ", ".join(merge(args.json, fresh)))
        fresh.unlink()
    elif not args.render:
        status = run_suites(args.json, args.full, args.suites)
    full = args.full or any(
        b["extra_info"].get("oracle") == "mpmath" and b["extra_info"]["T"] == 1024
        for b in json.loads(args.json.read_text())["benchmarks"]
    )
    render(args.json, full)
    return status


if __name__ == "__main__":
    sys.exit(main())
