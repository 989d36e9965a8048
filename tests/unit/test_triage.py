# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Severity of a failed comparison: realistic or extreme-range magnitudes."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from linattn_verify.linear_attn.strategies import EXTREME_FAMILIES
from linattn_verify.results import Comparison, Worst
from linattn_verify.triage import (
    EXTREME_HIGH_FACTOR,
    EXTREME_LOW,
    severity,
    with_input_severity,
)


def _failed_at(actual: float, expected: float) -> Comparison:
    return Comparison(
        "o",
        "k",
        "oracle",
        "failed",
        10.0,
        worst=Worst((0,), actual, expected, abs(expected) * 1e-7),
    )


@pytest.mark.parametrize(
    ("actual", "expected", "dtype", "verdict"),
    [
        (1.0, 1.1, torch.float32, "realistic"),
        (1e-30, 2e-30, torch.float32, "extreme-range"),
        (0.0, 1e-25, torch.float32, "extreme-range"),
        # Small but realistic: a 4e-8 state entry is a model's value.
        (4e-8, 5e-8, torch.float32, "realistic"),
        # One side realistic, the other tiny: the error itself is realistic.
        (1e-3, 1e-30, torch.float32, "realistic"),
        (60000.0, 60000.0 * 1.01, torch.float16, "extreme-range"),
        (math.inf, 65000.0, torch.float16, "extreme-range"),
        (math.nan, 1.0, torch.float16, "realistic"),
        (1e30, 1.1e30, torch.float32, "realistic"),
    ],
)
def test_severity_follows_the_magnitudes_at_the_worst_element(
    actual: float, expected: float, dtype: torch.dtype, verdict: str
) -> None:
    assert severity(_failed_at(actual, expected), dtype) == verdict


def test_the_edges_of_the_extreme_range() -> None:
    edge = torch.finfo(torch.float16).max / EXTREME_HIGH_FACTOR
    assert severity(_failed_at(edge * 0.99, edge * 0.99), torch.float16) == "realistic"
    assert severity(_failed_at(edge, edge * 0.99), torch.float16) == "extreme-range"
    assert severity(_failed_at(EXTREME_LOW * 0.5, 0.0), torch.float32) == "extreme-range"
    assert severity(_failed_at(EXTREME_LOW * 2, 0.0), torch.float32) == "realistic"


def test_a_comparison_without_a_worst_element_is_realistic() -> None:
    c = Comparison("o", "k", "oracle", "failed", math.inf, reason="expected shape (1,)")
    assert severity(c, torch.float32) == "realistic"


def test_a_case_drawn_at_extreme_magnitudes_makes_its_bound_failures_extreme() -> None:
    failed = replace(_failed_at(1.0, 1.1), severity="realistic")
    held = Comparison("dq", "k", "oracle", "held", 0.5)
    bitwise = Comparison("o", "k", "bitwise:rerun", "failed", 1.0)
    marked = with_input_severity((failed, held, bitwise), "near_max")
    assert [c.severity for c in marked] == ["extreme-range", None, None]
    # Realistic families leave the severity of the worst element alone.
    assert with_input_severity((failed,), "normal") == (failed,)
    for family in EXTREME_FAMILIES:
        assert with_input_severity((failed,), family)[0].severity == "extreme-range"
