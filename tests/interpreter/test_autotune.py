# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The autotune patch: multi-config autotuners run, with Triton's own flow intact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter

# Kernels below are decorated at import, so the interpreter must be selected first.
interpreter.enable(patches=())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

pytestmark = pytest.mark.interpret

CALLS: list[int] = []


def _record_block(nargs: dict[str, object]) -> None:
    CALLS.append(int(nargs["BLOCK"]))  # type: ignore[call-overload]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 16}, pre_hook=_record_block),
        triton.Config({"BLOCK": 32}, pre_hook=_record_block),
        triton.Config({"BLOCK": 64}, pre_hook=_record_block),
    ],
    key=["n"],
    reset_to_zero=["out"],
)
@triton.jit
def accumulate_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # Accumulates into out, so the result is right only if reset_to_zero ran before the launch.
    tl.atomic_add(out + offs, tl.load(x + offs, mask=mask, other=0.0), mask=mask)


def _run(x: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    accumulate_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)


@pytest.fixture
def autotune_patch() -> Iterator[None]:
    before = interpreter.enabled()
    interpreter.enable(patches=["autotune"])
    yield
    if "autotune" not in before:
        interpreter.disable(patches=["autotune"])


@pytest.fixture
def no_autotune_patch() -> Iterator[None]:
    undone = interpreter.disable(patches=["autotune"])
    yield
    if undone:
        interpreter.enable(patches=undone)


def test_multi_config_autotune_fails_without_patch(no_autotune_patch: None) -> None:
    x = torch.randn(40)
    with pytest.raises(RuntimeError, match="active drivers"):
        _run(x, torch.zeros(40))


def test_multi_config_autotune_runs_first_config_with_triton_flow(autotune_patch: None) -> None:
    accumulate_kernel.cache.clear()
    CALLS.clear()
    x = torch.randn(40)
    # Garbage in out: reset_to_zero must clear it before the launch.
    out = torch.full((40,), 123.0)
    _run(x, out)
    assert torch.equal(out, x)
    # The pick is the first config, its pre_hook ran before the launch, the pick is cached.
    assert accumulate_kernel.best_config.kwargs == {"BLOCK": 16}
    assert CALLS == [16]
    assert len(accumulate_kernel.cache) == 1
    out2 = torch.full((40,), -5.0)
    _run(x, out2)
    # Cached pick: no new tuning, so reset_to_zero does not run again; out2 accumulates.
    assert torch.equal(out2, x - 5.0)
    assert CALLS == [16, 16]


def test_conflicting_meta_parameters_still_raise(autotune_patch: None) -> None:
    accumulate_kernel.cache.clear()
    x = torch.randn(8)
    with pytest.raises(ValueError, match="Conflicting meta-parameters"):
        accumulate_kernel[(1,)](x, torch.zeros(8), 8, BLOCK=16)
