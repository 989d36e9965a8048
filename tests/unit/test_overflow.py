# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Where a declared 16-bit arithmetic may overflow (docs/error-model.md §8.3)."""

from __future__ import annotations

import torch

from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds, overflow_elements

FP16_SUMS = PrecisionRecipe(form="recurrent", accumulation="input")


def ramp(T: int, magnitude: float) -> dict[str, torch.Tensor]:
    """Positive q, k, v: the running key sum grows linearly, so it passes 65504 at some t."""
    torch.manual_seed(0)
    shape = (1, T, 1, 4)
    return {
        name: (magnitude * (0.5 + 0.5 * torch.rand(shape))).to(torch.float16)
        for name in ("q", "k", "v")
    }


def problem(T: int = 64, magnitude: float = 16.0):
    return validate_problem(
        **ramp(T, magnitude), scale=1.0, normalize=True, eps=0.0, output_final_state=True
    )


def test_fp32_sums_never_excuse_an_overflow() -> None:
    assert overflow_elements(problem(), PrecisionRecipe(form="recurrent")) == {}


def test_fp16_sums_excuse_the_rows_past_the_largest_value_and_only_those() -> None:
    p = problem()
    masks = overflow_elements(p, FP16_SUMS)
    rows = masks["o"][0, :, 0, 0]
    # Exact magnitudes: the numerator's sum over j <= t of (q_t·k_j) v_j, in float64.
    q, k, v = (x.double()[0, :, 0] for x in (p.q, p.k, p.v))
    numerator = ((q @ k.T).tril() @ v).amax(-1)
    assert bool(rows[numerator >= 65504].all())  # every row that surely overflows
    assert not bool(rows[numerator < 65504 / 4].any())  # none far below the limit
    # The final state Σ_j k_j v_j^T (<= 64 · 16²) stays below the limit: it is judged.
    assert not bool(masks["final_state"].any())
    bounds = forward_bounds(p, FP16_SUMS)
    assert not bool(bounds.tensors["o"].verifiable[masks["o"]].any())


def test_a_final_state_past_the_largest_value_is_excused() -> None:
    # Σ_j k_j v_j^T >= 64 · 32² = 65536 in every element.
    masks = overflow_elements(problem(magnitude=64.0), FP16_SUMS)
    assert bool(masks["final_state"].all())
    assert bool(masks["final_key_sum"].all())


def test_the_gradients_of_a_head_with_an_overflow_are_excused_whole() -> None:
    p = problem()
    do = torch.ones_like(p.v)
    masks = overflow_elements(p, FP16_SUMS, cotangents=(do, None))
    assert bool(masks["dq"].all())
    assert bool(masks["dv"].all())
    grads = backward_bounds(p, FP16_SUMS, do=do)
    assert not bool(grads["q"].verifiable.any())


def test_a_short_sequence_that_stays_in_range_is_judged_everywhere() -> None:
    p = problem(T=8, magnitude=1.0)
    do = torch.ones_like(p.v)
    masks = overflow_elements(p, FP16_SUMS, cotangents=(do, None))
    assert not any(bool(m.any()) for m in masks.values())
