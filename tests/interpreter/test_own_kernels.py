# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Our own kernels give bit-identical results with every interpreter patch on."""

from __future__ import annotations

import pytest
import torch

from linattn_verify import interpreter

interpreter.enable(patches=())

from linattn_kernels.linear_attn import chunked_linear_attention  # noqa: E402

pytestmark = pytest.mark.interpret


def _run(dtype: torch.dtype, normalize: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    B, T, H, K, V = 1, 20, 2, 16, 8
    q, k = (torch.randn(B, T, H, K, generator=gen).to(dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen).to(dtype)
    g = -torch.rand(B, T, H, generator=gen)
    leaves = [t.requires_grad_() for t in (q, k, v, g)]
    o, ht = chunked_linear_attention(
        q,
        k,
        v,
        g,
        normalize=normalize,
        eps=1e-6 if normalize else 0.0,
        feature_map="elu1" if normalize else "identity",
        output_final_state=True,
        chunk_size=16,
    )
    state = ht[0] if isinstance(ht, tuple) else ht
    assert state is not None
    (o.float().square().sum() + state.sum()).backward()
    return [o.detach(), state.detach(), *(t.grad for t in leaves if t.grad is not None)]


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalized"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_kernel_is_bit_identical_with_patches(dtype: torch.dtype, normalize: bool) -> None:
    before = interpreter.disable()
    try:
        plain = _run(dtype, normalize)
        assert interpreter.enable() == list(interpreter.PATCHES)
        patched = _run(dtype, normalize)
    finally:
        interpreter.disable()
        if before:
            interpreter.enable(patches=before)
    assert len(plain) == len(patched) == 6
    for a, b in zip(plain, patched, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
