# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`on_device`: a kernel computing elsewhere keeps its name, signature, results and gradients."""

from __future__ import annotations

import inspect
from dataclasses import replace

import torch

from linattn_verify.core.placement import on_device
from linattn_verify.registry import get_kernel


def test_a_placed_kernel_keeps_its_signature_and_returns_home() -> None:
    kernel = get_kernel("torch/recurrent")
    placed = on_device(kernel, "cpu")
    assert placed.name == "torch/recurrent@cpu"
    assert inspect.signature(placed.fn) == inspect.signature(kernel.fn)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 2, 3, generator=gen, requires_grad=True) for _ in range(3))
    S0 = torch.randn(1, 2, 3, 3, generator=gen)
    o, S = placed.fn(q, k, v, initial_state=S0, output_final_state=True)
    o_ref, S_ref = kernel.fn(q, k, v, initial_state=S0, output_final_state=True)
    assert torch.equal(o, o_ref)
    assert torch.equal(S, S_ref)
    (dq,) = torch.autograd.grad(o.sum(), q)
    (dq_ref,) = torch.autograd.grad(o_ref.sum(), q)
    assert torch.equal(dq, dq_ref)


def test_every_tensor_argument_reaches_the_device_keywords_and_tuples_too() -> None:
    # A compiled kernel rejects a state left on the CPU; "meta" stands for the GPU here: moving
    # to it is cheap and any tensor left behind shows its own device.
    seen: dict[str, torch.device] = {}

    def fn(q, k, v, g=None, *, initial_state=None, feature_weights=None, output_final_state=False):  # type: ignore[no-untyped-def]
        S0, z0 = initial_state
        named = {"q": q, "k": k, "v": v, "S0": S0, "z0": z0, "feature_weights": feature_weights}
        seen.update({name: t.device for name, t in named.items()})
        return 0.0, None

    kernel = replace(get_kernel("torch/recurrent"), fn=fn)
    q, k, v = (torch.ones(1, 2, 1, 3) for _ in range(3))
    state = (torch.ones(1, 1, 3, 3), torch.ones(1, 1, 3))
    on_device(kernel, "meta").fn(q, k, v, initial_state=state, feature_weights=torch.ones(3, 4))
    assert seen == dict.fromkeys(
        ["q", "k", "v", "S0", "z0", "feature_weights"], torch.device("meta")
    )
