# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""validate_delta accepts the domain and rejects every bad argument, naming it."""

from __future__ import annotations

import pytest
import torch

from linattn_verify.delta import DeltaProblem, validate_delta
from linattn_verify.errors import InvalidArgument

B, T, H, K, V = 1, 6, 2, 4, 3


def good(**changes):
    gen = torch.Generator().manual_seed(0)
    args = {
        "q": torch.randn(B, T, H, K, generator=gen),
        "k": torch.randn(B, T, H, K, generator=gen),
        "v": torch.randn(B, T, H, V, generator=gen),
        "beta": torch.rand(B, T, H, generator=gen),
        "g": -torch.rand(B, T, H, generator=gen),
    }
    args.update(changes)
    return args


def test_a_valid_problem_resolves_its_options():
    p = validate_delta(**good(), output_final_state=True)
    assert isinstance(p, DeltaProblem)
    assert p.shape == (B, T, H, K, V)
    assert p.scale == K**-0.5
    assert not p.vector_gate
    assert list(p.sequences()) == [(0, 0, 0, T)]
    assert p.to(torch.float64).q.dtype == torch.float64
    vector = validate_delta(**good(g=-torch.rand(B, T, H, K)), cu_seqlens=torch.tensor([0, 2, T]))
    assert vector.vector_gate
    assert list(vector.sequences()) == [(0, 0, 0, 2), (1, 0, 2, T)]
    assert validate_delta(**good(g=None)).g is None


def test_beta_range_edges():
    validate_delta(**good(beta=torch.ones(B, T, H)))
    validate_delta(**good(beta=torch.zeros(B, T, H)))
    near2 = torch.full((B, T, H), 2 - 2.0**-20)
    validate_delta(**good(beta=near2), allow_negative_eigenvalues=True)
    with pytest.raises(InvalidArgument, match=r"beta in \[0, 2\)"):
        validate_delta(**good(beta=torch.full((B, T, H), 2.0)), allow_negative_eigenvalues=True)
    with pytest.raises(InvalidArgument, match=r"beta in \[0, 1\]"):
        validate_delta(**good(beta=near2))


nan_q = good()["q"].clone()
nan_q[0, 1, 0, 0] = float("nan")

BAD = {
    "q-not-tensor": ({"q": [[1.0]]}, {}, "q"),
    "q-ndim": ({"q": torch.zeros(T, H, K)}, {}, "q"),
    "q-int": ({"q": torch.zeros(B, T, H, K, dtype=torch.int32)}, {}, "q"),
    "q-nan": ({"q": nan_q}, {}, "q"),
    "k-shape": ({"k": torch.zeros(B, T, H, K + 1)}, {}, "k"),
    "v-shape": ({"v": torch.zeros(B, T + 1, H, V)}, {}, "v"),
    "v-dtype": ({"v": torch.zeros(B, T, H, V, dtype=torch.float64)}, {}, "q, k, v"),
    "beta-shape": ({"beta": torch.zeros(B, T, H, 1)}, {}, "beta"),
    "beta-negative": ({"beta": torch.full((B, T, H), -0.1)}, {}, "beta"),
    "beta-above-one": ({"beta": torch.full((B, T, H), 1.5)}, {}, "beta"),
    "beta-inf": ({"beta": torch.full((B, T, H), float("inf"))}, {}, "beta"),
    "g-positive": ({"g": torch.full((B, T, H), 0.1)}, {}, "g"),
    "g-shape": ({"g": torch.zeros(B, T, H, K + 1)}, {}, "g"),
    "g-inf": ({"g": torch.full((B, T, H), -float("inf"))}, {}, "g"),
    "scale-str": ({}, {"scale": "1"}, "scale"),
    "scale-nan": ({}, {"scale": float("nan")}, "scale"),
    "l2norm-int": ({}, {"l2norm_qk": 1}, "l2norm_qk"),
    "final-str": ({}, {"output_final_state": "yes"}, "output_final_state"),
    "negeig-int": ({}, {"allow_negative_eigenvalues": 1}, "allow_negative_eigenvalues"),
    "h0-shape": ({}, {"initial_state": torch.zeros(B, H, K, V + 1)}, "initial_state"),
    "h0-nan": ({}, {"initial_state": torch.full((B, H, K, V), float("nan"))}, "initial_state"),
    "cu-float": ({}, {"cu_seqlens": torch.tensor([0.0, 6.0])}, "cu_seqlens"),
    "cu-start": ({}, {"cu_seqlens": torch.tensor([1, T])}, "cu_seqlens"),
    "cu-end": ({}, {"cu_seqlens": torch.tensor([0, T - 1])}, "cu_seqlens"),
    "cu-falling": ({}, {"cu_seqlens": torch.tensor([0, 4, 2, T])}, "cu_seqlens"),
    "cu-short": ({}, {"cu_seqlens": torch.tensor([0])}, "cu_seqlens"),
    "cu-batch": (
        {k: x.expand(2, *x.shape[1:]) for k, x in good().items()},
        {"cu_seqlens": torch.tensor([0, T])},
        "B=2",
    ),
    "cu-h0-rows": (
        {},
        {"cu_seqlens": torch.tensor([0, 2, T]), "initial_state": torch.zeros(1, H, K, V)},
        "initial_state",
    ),
}


@pytest.mark.parametrize(("tensors", "options", "named"), BAD.values(), ids=BAD.keys())
def test_bad_argument_is_rejected_by_name(tensors, options, named):
    with pytest.raises(InvalidArgument) as info:
        validate_delta(**good(**tensors), **options)
    assert named in str(info.value)
