# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`run --side-by-side`: the same cases run on every kernel of a family that takes them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from linattn_verify import registry, running
from linattn_verify.registry import registered_kernels
from linattn_verify.results import CaseRecord
from linattn_verify.running import GroupSettings, drawn_cases, run_group, side_by_side_cases

PEERS = ("torch/chunk", "torch/recurrent", "torch/delta.recurrent")
SETTINGS = GroupSettings(
    examples=4, max_seq_len=12, seed=3, backward=False, peers=PEERS, side_by_side=2
)


def test_the_shared_cases_are_the_same_in_every_process_and_stay_in_the_family() -> None:
    kernels = registered_kernels()
    first = side_by_side_cases(kernels["torch/chunk"], "float32", SETTINGS)
    running._SHARED.clear()  # what a fresh worker process starts with
    again = side_by_side_cases(kernels["torch/recurrent"], "float32", SETTINGS)
    assert [c.describe() for c in first] == [c.describe() for c in again]
    assert len({c.describe() for c in first}) == len(first)
    assert all(c.family == "linear_attn" for c in first)
    delta = side_by_side_cases(kernels["torch/delta.recurrent"], "float32", SETTINGS)
    assert delta
    assert all(c.family == "delta" for c in delta)
    assert (
        side_by_side_cases(kernels["torch/chunk"], "float32", replace(SETTINGS, side_by_side=0))
        == []
    )


def test_a_group_runs_its_own_draw_then_the_peers_cases_it_has_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernels = registered_kernels()
    kernel = kernels["torch/chunk"]
    # A peer declaring less draws other cases, all of which torch/chunk takes.
    base = kernels["torch/recurrent"]
    narrow = replace(
        base,
        name="test/narrow",
        capabilities=replace(
            base.capabilities, normalize=(False,), gates=("scalar",), varlen=False
        ),
    )
    monkeypatch.setitem(registry._REGISTERED, narrow.name, narrow)
    monkeypatch.setattr(running, "_SHARED", {})
    settings = replace(SETTINGS, peers=("torch/chunk", "test/narrow"))
    records: list[CaseRecord] = []
    run_group(kernel, "float32", settings, records.append)
    family = running.family_of(kernel)
    strategy = family.cases_for(
        family.narrowed(kernel, "float32", settings.gates),
        max_seq_len=settings.max_seq_len,
        max_head_dim=running.RUN_HEAD_DIM,
        realistic=False,
    )
    own = drawn_cases(strategy, settings.examples, settings.seed)
    texts = [r.case for r in records]
    assert texts[: len(own)] == [c.describe() for c in own]
    shared = [c.describe() for c in side_by_side_cases(kernel, "float32", settings)]
    extra = texts[len(own) :]
    assert extra
    assert set(extra) == set(shared) - set(texts[: len(own)])
    assert len(texts) == len(set(texts))
    assert all(r.status != "not_applicable" for r in records[len(own) :])
    assert all(r.ok for r in records)
