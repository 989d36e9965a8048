# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The recipe diagnosis on the delta family: an undeclared rounding explained, a wrong kernel not.

Both kernels wrap the float32 torch reference of the recurrent form (`torch/delta.recurrent`),
declared as it: one stores the corrected values u_t = beta_t (v_t - S^T k_t) in bfloat16 as a
real kernel's intermediate would (a rounding it does not declare), the other drops the first
token's value (wrong under any recipe).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from linattn_properties.delta import delta_catalogue

from linattn_verify.delta.recipe_ladders import recipe_ladders
from linattn_verify.delta.strategies import DeltaCase
from linattn_verify.diagnosis import diagnose
from linattn_verify.registry import get_kernel

REFERENCE = get_kernel("torch/delta.recurrent")
OUTPUTS = delta_catalogue()["outputs_match_oracle"]
CASE = DeltaCase(
    B=1, T=24, H=2, K=8, V=8, dtype="float32", gate="none", gate_family="none",
    beta_family="sigmoid", key_family="unit", value_family="unit", l2norm_qk=False,
    negative_eigenvalues=False, initial_state=False, output_final_state=False,
    seq_lens=None, scale=None, seed=3,
)  # fmt: skip


def _values_in_bfloat16(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kw: Any
) -> Any:
    # v reaches every correction u_t; rounding it to bf16 is one rounding on each term's path.
    return REFERENCE.fn(q, k, v.to(torch.bfloat16).to(v.dtype), *args, **kw)


def _first_token_dropped(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kw: Any
) -> Any:
    v = v.clone()
    v[:, 0] = 0
    return REFERENCE.fn(q, k, v, *args, **kw)


def _kernel(fn: Callable[..., Any], name: str) -> Any:
    return replace(REFERENCE, name=name, fn=fn)


def test_an_undeclared_bfloat16_rounding_is_explained_by_the_intermediate_ladder() -> None:
    kernel = _kernel(_values_in_bfloat16, "values_in_bf16")
    result = OUTPUTS(CASE, kernel)
    assert result.status == "failed", result.report()
    text = diagnose(OUTPUTS, CASE, kernel, result)
    assert text is not None
    # One bf16 rounding on every term's path: the smallest single change that explains it is one
    # bf16 store (of the state, the first such ladder in size order), declared by its flag.
    assert text.startswith("consistent with "), text
    assert "stored in bfloat16 (declared none)" in text
    assert "declare `--state-dtype bfloat16`" in text


def test_a_wrong_delta_kernel_is_explained_by_no_recipe() -> None:
    kernel = _kernel(_first_token_dropped, "first_token_dropped")
    result = OUTPUTS(CASE, kernel)
    assert result.status == "failed", result.report()
    text = diagnose(OUTPUTS, CASE, kernel, result)
    assert text is not None
    assert text.startswith("no recipe explains this error (tried "), text
    assert text.endswith("): the kernel, not its declaration, is wrong here")
    for tried in ("accumulation='mma'", "tf32=True", "state_dtype='bfloat16'"):
        assert tried in text
    assert "every loosening at once" in text


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_ladders_fit_the_declared_form_and_dtype(dtype: torch.dtype) -> None:
    recurrent = REFERENCE.precision_recipe(dtype)
    chunk = replace(recurrent, form="chunk")
    assert "inverse_method" not in recipe_ladders(recurrent, dtype)
    chunk_axes = recipe_ladders(chunk, dtype)
    assert chunk_axes["inverse_method"][0].how == "`--inverse-method products`"
    inverse = [axis for axis in chunk_axes if axis.startswith("inverse_dtype")]
    # 16-bit inputs store in their own dtype (a loosening); fp32 ones in either 16-bit dtype,
    # each an alternative tried alone.
    assert inverse == (["inverse_dtype"] if dtype == torch.bfloat16 else
                       ["inverse_dtype:float16", "inverse_dtype:bfloat16"])  # fmt: skip
    assert ("tf32" in chunk_axes) == (dtype == torch.float32)
    declared_mma = replace(chunk, accumulation="mma")
    assert "accumulation" not in recipe_ladders(declared_mma, dtype)
