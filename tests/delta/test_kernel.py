# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`DeltaKernel`, `DeltaCapabilities`, `DeltaRecipe`: declarations, validation, the convention."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from linattn_verify.delta import validate_delta
from linattn_verify.delta.kernel import DeltaCapabilities, DeltaKernel, DeltaRecipe
from linattn_verify.errors import InvalidArgument


def _problem(g: torch.Tensor | None = None, k_scale: float = 1.0, beta: float = 0.5) -> Any:
    gen = torch.Generator().manual_seed(0)
    k = torch.nn.functional.normalize(torch.randn(1, 3, 1, 4, generator=gen), dim=-1) * k_scale
    return validate_delta(
        torch.randn(1, 3, 1, 4, generator=gen),
        k,
        torch.randn(1, 3, 1, 2, generator=gen),
        torch.full((1, 3, 1), beta),
        g,
        allow_negative_eigenvalues=beta > 1,
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"form": "parallel"}, "form='parallel'"),
        ({"form": "chunk", "inverse_dtype": "float8"}, "inverse_dtype='float8'"),
        ({"form": "chunk", "chunk_size": 0}, "chunk_size=0"),
        ({"form": "chunk", "casts_on_path": 2}, "casts_on_path=2"),
        ({"form": "chunk", "stored_corrections": True}, "stored_corrections=True"),
        ({"form": "recurrent", "stored_corrections": True}, "stored_corrections=True"),
    ],
)
def test_recipe_rejects_what_it_cannot_mean(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        DeltaRecipe(**fields)


def test_storage_rounds_only_below_the_arithmetic() -> None:
    recipe = DeltaRecipe(form="chunk", intermediate_dtype="input", inverse_dtype="float32")
    assert recipe.u_storage("intermediate_dtype", torch.bfloat16) == 2.0**-8
    assert recipe.u_storage("intermediate_dtype", torch.float32) == 0.0
    assert recipe.u_storage("inverse_dtype", torch.float16) == 0.0
    assert recipe.u_storage("state_dtype", torch.float16) == 0.0


def test_capabilities_reject_unknown_gates() -> None:
    with pytest.raises(InvalidArgument, match="gates"):
        DeltaCapabilities(gates=("diagonal",))  # type: ignore[arg-type]


def _recording(seen: list[tuple[int, dict[str, Any]]]) -> Any:
    def fn(*args: Any, **kwargs: Any) -> Any:
        seen.append((len(args), kwargs))
        return args[2], None

    return fn


def test_call_passes_g_exactly_when_a_gate_is_declared() -> None:
    seen: list[tuple[int, dict[str, Any]]] = []
    plain = DeltaKernel("t/plain", _recording(seen), DeltaCapabilities(), DeltaRecipe("recurrent"))
    gated = DeltaKernel(
        "t/gated",
        _recording(seen),
        DeltaCapabilities(gates=("none", "scalar")),
        DeltaRecipe("recurrent"),
    )
    plain.call(_problem())
    gated.call(_problem())
    assert [n for n, _ in seen] == [4, 5]  # (q, k, v, beta) and (q, k, v, g, beta)
    assert {"scale", "use_qk_l2norm_in_kernel", "initial_state", "cu_seqlens"} <= set(seen[0][1])


def test_supports_names_what_is_missing() -> None:
    kernel = DeltaKernel(
        "t/k",
        _recording([]),
        DeltaCapabilities(gates=("scalar",), negative_eigenvalues=False),
        DeltaRecipe("recurrent"),
    )
    assert "gate 'none'" in str(kernel.supports(_problem()))
    assert kernel.supports(_problem(torch.zeros(1, 3, 1))) is None
    assert "negative eigenvalues" in str(kernel.supports(_problem(torch.zeros(1, 3, 1), beta=1.5)))


def test_contract_flags_long_keys_only_for_a_unit_key_kernel() -> None:
    unit = DeltaKernel("t/unit", _recording([]), DeltaCapabilities(), DeltaRecipe("recurrent"))
    any_norm = DeltaKernel(
        "t/any", _recording([]), DeltaCapabilities(unit_norm_keys=False), DeltaRecipe("recurrent")
    )
    assert unit.contract(_problem()) is None
    assert "unit_norm_keys" in str(unit.contract(_problem(k_scale=1.5)))
    assert any_norm.contract(_problem(k_scale=1.5)) is None
