# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Problem validation: every malformed argument is rejected with a message that names it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.semantics import validate_problem

B, T, H, K, V = 2, 5, 3, 4, 6


def _args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "q": torch.randn(B, T, H, K),
        "k": torch.randn(B, T, H, K),
        "v": torch.randn(B, T, H, V),
        "g": None,
    }
    args.update(overrides)
    return args


def _call(**overrides: Any) -> Any:
    args = _args(**overrides)
    q, k, v, g = args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g")
    return validate_problem(q, k, v, g, **args)


BAD = [
    ({"q": [[1.0]]}, "q"),
    ({"q": torch.randn(B, T, H)}, "q of shape [B, T, H, K]"),
    ({"k": torch.randn(B, T, H, K + 1)}, "k of shape"),
    ({"v": torch.randn(B, T + 1, H, V)}, "v of shape"),
    ({"q": torch.randint(0, 3, (B, T, H, K))}, "dtype"),
    ({"k": torch.randn(B, T, H, K).half()}, "one dtype"),
    ({"q": torch.full((B, T, H, K), float("nan"))}, "q to be finite"),
    ({"g": torch.rand(B, T, H)}, "g <= 0"),
    ({"g": -torch.rand(B, T)}, "g of shape"),
    ({"g": torch.full((B, T, H), -float("inf"))}, "g to be finite"),
    ({"scale": "0.5"}, "scale"),
    ({"scale": float("inf")}, "scale to be finite"),
    ({"normalize": 1}, "normalize to be a bool"),
    ({"normalize": True, "eps": -1.0}, "eps must be >= 0"),
    ({"eps": 1e-6}, "eps only applies"),
    ({"feature_map": "cosformer"}, "feature_map"),
    ({"output_final_state": "yes"}, "output_final_state"),
    ({"initial_state": torch.randn(B, H, K, V + 1)}, "initial_state of shape"),
    ({"initial_state": (torch.randn(B, H, K, V), torch.randn(B, H, K))}, "pair"),
    ({"normalize": True, "initial_state": torch.randn(B, H, K, V)}, "pair (S"),
    (
        {"normalize": True, "initial_state": (torch.randn(B, H, K, V), torch.randn(B, H))},
        "initial_state[1]",
    ),
    ({"cu_seqlens": torch.tensor([0, 2, 5])}, "B == 1"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD, ids=[n for _, n in BAD])
def test_malformed_argument_is_named(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidArgument, match=None) as info:
        _call(**overrides)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("bounds", "needle"),
    [
        ([0, 2], "end at T=5"),
        ([1, 5], "start at 0"),
        ([0, 4, 2, 5], "non-decreasing"),
        ([0.0, 5.0], "integers"),
        ([5], "N+1 >= 2"),
    ],
)
def test_malformed_cu_seqlens_is_named(bounds: list[Any], needle: str) -> None:
    q = torch.randn(1, T, H, K)
    with pytest.raises(InvalidArgument) as info:
        validate_problem(q, q, torch.randn(1, T, H, V), cu_seqlens=torch.tensor(bounds))
    assert "cu_seqlens" in str(info.value)
    assert needle in str(info.value)


def test_valid_problem_resolves_defaults_and_sequences() -> None:
    p = _call()
    assert p.scale == K**-0.5
    assert p.shape == (B, T, H, K, V)
    assert [s[1:] for s in p.sequences()] == [(0, 0, T), (1, 0, T)]
    q = torch.randn(1, 7, H, K)
    packed = validate_problem(
        q,
        q,
        torch.randn(1, 7, H, V),
        cu_seqlens=torch.tensor([0, 0, 1, 7]),
        initial_state=torch.randn(3, H, K, V),
    )
    assert list(packed.sequences()) == [(0, 0, 0, 0), (1, 0, 0, 1), (2, 0, 1, 7)]
    assert packed.num_sequences == 3
    assert "cu_seqlens=[0, 0, 1, 7]" in packed.describe()
