# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The size reach (`linattn_verify.reach`) and how `check_kernel` shares its budget by time."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from linattn_properties._support import judged

from linattn_verify.checking import SLICES, CheckListener, SearchSettings, check_kernel
from linattn_verify.core.family import family_of
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.reach import (
    REACH_MAX_FEATURES,
    reach_spec,
)
from linattn_verify.reach import (
    MANY_HEADS,
    MAX_SEQ_LEN,
    RERUNS,
    Item,
    ReachRun,
    Size,
    chunk_sizes,
)
from linattn_verify.reach import boundary_sizes as any_family_sizes
from linattn_verify.reach import reach_plan as any_family_plan
from linattn_verify.registry import get_kernel
from linattn_verify.results import PropertyResult
from linattn_verify.typing import LIFTED_MAPS
from tests.reporting.conftest import comparison


def boundary_sizes(kernel: Kernel, **options: object) -> tuple[Size, ...]:
    return any_family_sizes(kernel, **options)  # type: ignore[arg-type]


def reach_plan(kernel: Kernel, properties: tuple[str, ...], **options: object) -> tuple[Item, ...]:
    return any_family_plan(kernel, properties, **options)  # type: ignore[arg-type]


def _chunked(C: int = 64, **capabilities: object) -> Kernel:
    kernel = get_kernel("torch/chunk")
    cap = replace(kernel.capabilities, chunk_sizes=(C,), **capabilities)
    return replace(kernel, capabilities=cap)


def test_sizes_straddle_every_boundary() -> None:
    sizes = boundary_sizes(_chunked(64))
    Ts = {s.T for s in sizes}
    # Around the chunk (and past it: the work is split), and around every mark up to 65,536.
    assert {64, 65, 129} <= Ts
    assert {256, 257, 512, 513, 1024, 1025, 2048, 2049, 4096, 4097, 16384, 32769} <= Ts
    assert max(Ts) == MAX_SEQ_LEN == 65536
    assert (16384, 128, 128) in {(s.T, s.K, s.V) for s in sizes}, "long and large"
    # Many heads: one past the chunk, long, and the longest.
    many = {(s.T, s.K, s.V) for s in sizes if s.H == MANY_HEADS}
    assert many == {(65, 64, 64), (4096, 64, 64), (65536, 64, 64)}
    assert all(s.H in (2, MANY_HEADS) for s in sizes)
    dims = {(s.K, s.V) for s in sizes}
    for d in (16, 32, 64, 128, 256):
        assert (d, d) in dims
        if d < 256:
            assert (d + 1, d) in dims
            assert (d, d + 1) in dims
    works = [s.work for s in sizes]
    assert works == sorted(works), "cheapest first"


def test_sizes_keep_to_the_caps() -> None:
    kernel = _chunked(32, max_head_dim=100, min_head_dim=8)
    sizes = boundary_sizes(kernel, max_seq_len=300)
    assert max(s.T for s in sizes) == 257
    assert all(min(s.K, s.V) >= 8 and max(s.K, s.V) <= 100 for s in sizes)
    assert any(s.K == 100 for s in sizes), "the declared maximum is a boundary too"
    assert {32, 33, 65} <= {s.T for s in sizes}


def test_chunk_sizes_come_from_the_declaration() -> None:
    assert chunk_sizes(_chunked(16)) == (16,)
    # No declared chunk sizes: a chunked kernel's recipe, else the usual 64.
    assert chunk_sizes(get_kernel("torch/recurrent")) == (64,)


def test_plan_reruns_the_forward_only_where_the_work_is_split() -> None:
    plan = reach_plan(_chunked(64), ("outputs_match_oracle", "gradients_match_oracle"))
    reruns = [i for i in plan if i.rerun]
    assert reruns
    assert all(i.size.T > 64 and i.property == "outputs_match_oracle" for i in reruns)
    for size in {i.size for i in reruns}:
        assert sum(1 for i in plan if i.size == size and i.property == "outputs_match_oracle") == (
            1 + RERUNS
        )
    assert not [i for i in plan if i.size.T <= 64 and i.rerun]
    # Not at the head-dim sizes: their T is one past the chunk only to cross it once.
    assert not [i for i in plan if i.rerun and i.size.why.startswith("head dims")]
    # Properties the check does not run are not planned.
    assert {i.property for i in reach_plan(_chunked(64), ("outputs_match_oracle",))} == {
        "outputs_match_oracle"
    }


def test_reach_specs_are_supported_realistic_and_reproducible() -> None:
    kernel = _chunked(64, even_head_dims=("float16", "bfloat16"))
    assert kernel.capabilities.varlen
    packed = [reach_spec(kernel, s, seed=3).segments for s in boundary_sizes(kernel)]
    assert any(packed), "a varlen kernel gets packed cases"
    assert not all(packed), "and dense ones"
    for size in boundary_sizes(kernel, max_seq_len=600):
        spec = reach_spec(kernel, size, seed=3)
        assert spec == reach_spec(kernel, size, seed=3)
        problem = kernel.prepare(spec.build())
        assert kernel.supports(problem) is None, spec
        assert spec.V == size.V
        assert spec.H == size.H
        if spec.feature_map in LIFTED_MAPS:
            # A lifted map's state has F rows: its K is capped so that F stays within reach.
            assert spec.K <= size.K or spec.K == 2
            assert problem.feature_dim <= REACH_MAX_FEATURES
        else:
            assert spec.K == size.K
        longest = spec.T if spec.segments is None else max(spec.segments)
        assert longest == size.T
        assert spec.values in ("normal", "positive")
        assert spec.decay in ("mild", "zero", "none")
        if spec.segments is not None:
            assert sum(spec.segments) == spec.T
            assert all(n > 0 for n in spec.segments)
            assert spec.segments[-1] == size.T, "the size's sequence starts at an offset"


def test_a_vector_gate_only_kernel_reaches_every_size() -> None:
    # The vector-gate bounds are a block scan beyond DENSE_TOKENS: O(T·K) memory, no T² limit.
    vector_only = _chunked(64, gates=("vector",))
    sizes = boundary_sizes(vector_only)
    assert max(s.T for s in sizes) == MAX_SEQ_LEN
    for seed, size in enumerate(sizes[:12]):
        spec = reach_spec(vector_only, size, seed)
        assert spec.gate == "vector"
        assert vector_only.supports(spec.build()) is None
    # A kernel taking both shapes is reached with scalar gates.
    both = _chunked(64)
    assert reach_spec(both, boundary_sizes(both)[0], 0).gate == "scalar"


def test_reach_run_predicts_from_the_last_measured_item() -> None:
    small, big = Size(64, 16, 16, "a"), Size(1024, 16, 16, "b")
    items = (Item(small, "p"), Item(big, "p"), Item(big, "q"))
    run = ReachRun(items, seconds=1.0)
    assert run.predicted(items[0]) == 0.0, "an unmeasured property runs"
    run.record(items[0], 0.01)
    assert run.predicted(items[1]) == pytest.approx(0.01 * big.work / small.work)
    # 0.01 s at T = 64 predicts ~2.6 s at T = 1024: over the 1 s left, so it is skipped, while
    # the first item of another property still runs.
    walked = list(run.walk(lambda: 0.0))
    assert walked == [items[0], items[2]]
    assert run.skipped == [items[1]]


class _Recorder(CheckListener):
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cases: list[tuple[int, int, int]] = []

    def progress(self, line: str) -> None:
        self.lines.append(line)

    def case_finished(self, record: object) -> None:
        self.cases.append((record.T, record.K, record.V))  # type: ignore[attr-defined]


def _slow(spec: object, kernel: Kernel) -> PropertyResult:
    time.sleep(0.3)
    return judged("slow", kernel, spec, ())  # type: ignore[arg-type]


def _fast(spec: object, kernel: Kernel) -> PropertyResult:
    return judged("fast", kernel, spec, ())  # type: ignore[arg-type]


def test_budget_is_shared_by_time_not_examples(tmp_path: Path) -> None:
    kernel = get_kernel("torch/recurrent")
    budget = 4.0
    search = SearchSettings(budget=budget, failures_dir=tmp_path, reach=False)
    report = check_kernel(kernel, {"slow": _slow, "fast": _fast}, search)
    slow, fast = report.verdicts
    # Every search stops starting cases when its time slice is spent (each may finish the case
    # it is running: 0.3 s past its slice, in each of at most SLICES rounds), and sizes its
    # examples to the slice: the slow property gets its half of the time, not the whole budget,
    # and the fast one more examples (shared by examples, both would get the same number). How
    # many more depends on how fast Hypothesis draws on a loaded machine (measured: 8x to 30x);
    # a draw takes well under the slow property's 0.3 s even then, hence at least twice as many.
    assert slow.seconds < budget / 2 + 0.3 * SLICES
    assert fast.examples > 2 * slow.examples
    assert report.seconds < budget + 0.3 + 0.5


def test_reach_reports_the_sizes_it_checked(tmp_path: Path) -> None:
    # A property that costs nothing, under the reach's name: what the reach reaches then depends
    # on the plan and the cap, not on the machine's load.
    listener = _Recorder()
    search = SearchSettings(budget=3.0, failures_dir=tmp_path, max_seq_len=300)
    report = check_kernel(
        get_kernel("torch/chunk"), {"outputs_match_oracle": _fast}, search, listener=listener
    )
    assert report.ok
    (line,) = [x for x in listener.lines if x.strip().startswith("size reach:")]
    assert max(T for T, _, _ in listener.cases) == 257, "the cap, not the drawn 32, bounds T"
    # torch/chunk declares K, V <= 256: the reach goes to the declared maximum, not past it.
    assert max(max(K, V) for _, K, V in listener.cases) == 256
    assert "largest T 257, largest head dim 256, most heads 16" in line


def test_a_property_whose_bound_certified_nothing_gives_its_time_to_the_others() -> None:
    sizes = [Size(T, 16, 16, "T") for T in (64, 128, 256, 512)]
    items = tuple(Item(s, p) for s in sizes for p in ("outputs", "gradients"))
    run = ReachRun(items, seconds=100.0)
    ran = []
    for item in run.walk(lambda: 0.0):
        ran.append((item.property, item.size.T))
        # The gradients' bound spans the whole scale at T = 128: ill-conditioned from there on.
        run.record(item, 0.1, decided=not (item.property == "gradients" and item.size.T >= 128))
    assert ran == [
        ("outputs", 64), ("gradients", 64), ("outputs", 128), ("gradients", 128),
        ("outputs", 256), ("outputs", 512),
    ]  # fmt: skip
    assert [(i.property, i.size.T) for i in run.skipped] == [("gradients", 256), ("gradients", 512)]


def test_delta_reach_cases_have_the_size_s_heads_and_dims() -> None:
    kernel = get_kernel("torch/delta.chunk")
    family = family_of(kernel)
    for size in boundary_sizes(kernel, max_seq_len=600):  # type: ignore[arg-type]
        case = family.reach_case(kernel, size, 3)
        assert (case.H, case.K, case.V) == (size.H, size.K, size.V)
        longest = case.T if case.seq_lens is None else max(case.seq_lens)
        assert longest == size.T


class _PropertyRecorder(CheckListener):
    def __init__(self) -> None:
        self.cases: list[tuple[str, int]] = []

    def case_finished(self, record: object) -> None:
        self.cases.append((record.property, record.T))  # type: ignore[attr-defined]


def _blunt_on(uncertified: tuple[str, ...]) -> Any:
    """A gradient property whose bounds on ``uncertified`` span their tensors' whole scale."""

    def prop(spec: object, kernel: Kernel) -> PropertyResult:
        held = tuple(comparison(name, kernel.name, 0.01) for name in ("dq", "dg"))
        return PropertyResult(
            property="gradients_match_oracle",
            kernel=kernel.name,
            case=repr(spec),
            status="ill_conditioned",
            comparisons=held,
            reason=f"{uncertified[0]}: the bound reaches 3x the largest |value|",
            uncertified=uncertified,
        )

    return prop


@pytest.mark.parametrize(
    ("uncertified", "goes_on"), [(("dg",), True), (("dq", "dg"), False)], ids=["dg", "all"]
)
def test_the_reach_goes_on_with_a_property_that_certified_some_tensors(
    tmp_path: Path, uncertified: tuple[str, ...], goes_on: bool
) -> None:
    # The delta chunk recipe's dg bound is blunt at realistic sizes while dq, dk, dv and dβ are
    # certified: the reach must go on judging those. A property that certified no tensor gives
    # its time to the others from its first reach size on.
    listener = _PropertyRecorder()
    search = SearchSettings(budget=3.0, failures_dir=tmp_path, max_seq_len=300)
    properties = {"outputs_match_oracle": _fast, "gradients_match_oracle": _blunt_on(uncertified)}
    report = check_kernel(get_kernel("torch/chunk"), properties, search, listener=listener)
    assert report.ok
    # The search draws T <= 32; every longer case is the reach's (its first, cheapest sizes are
    # shorter: T = C + 1 with K, V around 16).
    longest = {
        name: max(T for n, T in listener.cases if n == name)
        for name in ("fast", "gradients_match_oracle")
    }
    assert longest["fast"] == 257
    if goes_on:
        assert longest["gradients_match_oracle"] == 257, "stopped although dq was certified"
    else:
        assert longest["gradients_match_oracle"] <= 32


def test_a_result_says_whether_it_certified_any_tensor() -> None:
    held = tuple(comparison(name, "k", 0.01) for name in ("dq", "dg[t<=3]"))
    base = PropertyResult("p", "k", "case", "ill_conditioned", held)
    assert replace(base, uncertified=("dg",)).certified_any
    assert not replace(base, uncertified=("dq", "dg")).certified_any
    assert PropertyResult.from_json(replace(base, uncertified=("dg",)).to_json()).uncertified == (
        "dg",
    )


def test_properties_share_the_reach_so_a_slow_one_cannot_starve_a_fast_one() -> None:
    # Simulated seconds: the gradients cost 20x the forward pass per unit of work. Greedily, in
    # size order, the gradients' items would take the whole allowance by T = 4096 and leave the
    # forward pass's longer sizes unrun; with shares, the gradients stop at their half and what
    # they leave goes to the forward pass.
    sizes = [Size(T, 64, 64, "T") for T in (1024, 2048, 4096, 8192, 16384)]
    items = tuple(Item(s, p) for s in sizes for p in ("outputs", "gradients"))
    rate = {"outputs": 1e-8, "gradients": 2e-7}
    run = ReachRun(items, seconds=1.0)
    clock = [0.0]
    ran: dict[str, list[int]] = {"outputs": [], "gradients": []}
    for item in run.walk(lambda: clock[0]):
        seconds = rate[item.property] * item.size.work
        clock[0] += seconds
        run.record(item, seconds)
        ran[item.property].append(item.size.T)
    assert clock[0] <= 1.0
    assert ran["outputs"] == [1024, 2048, 4096, 8192, 16384]
    assert ran["gradients"] == [1024, 2048]
    assert run.used["gradients"] <= 0.5
