# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``dyadic_inputs_exact`` of the delta-rule catalogue: its inputs, its widths, its verdicts.

Meta tests of the claims its soundness rests on (the triangular inverse of basis keys has entries
in {-1, 0, 1}, the float64 oracle is exact, the widths follow the recipe), then its verdicts: it
holds on the fp32 references in every dtype, fails an output truncated toward zero or a state
one ulp off, is not applicable where nothing can be exact, and holds on FLA's six kernels under
the interpreter (their recipes store in 16 bits: the widths must shrink to make that sound).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from linattn_properties.delta import dyadic
from linattn_properties.delta.dyadic import (
    dyadic_delta_problem,
    dyadic_inputs_exact,
    exact_outputs,
    storage_bits,
)

from linattn_verify.core.loading import import_file
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.reference import forward_substitution_inverse
from linattn_verify.delta.reference_kernels import delta_recurrent_torch, delta_reference_kernels
from linattn_verify.delta.strategies import DeltaCase

zoo = import_file(Path(__file__).parents[1] / "zoo" / "delta_bugs.py", "_linattn_zoo_delta_bugs")
RECURRENT, CHUNK = delta_reference_kernels()
PROP = "dyadic_inputs_exact"

BASE = DeltaCase(
    B=2,
    T=40,
    H=2,
    K=4,
    V=3,
    dtype="bfloat16",
    gate="scalar",
    gate_family="logsigmoid",
    beta_family="sigmoid",
    key_family="unit",
    value_family="unit",
    l2norm_qk=False,
    negative_eigenvalues=False,
    initial_state=True,
    output_final_state=True,
    seq_lens=None,
    scale=None,
    seed=5,
)
"""Two rows of 40 tokens (three chunks of 16), a scalar gate (made 0) and an initial state."""

SHAPES: list[dict[str, Any]] = [
    {},
    {"K": 1, "V": 5, "T": 33},
    {"B": 1, "T": 70, "K": 8, "V": 4, "seq_lens": (30, 0, 40), "gate": "vector"},
    {"K": 16, "V": 2, "T": 65, "initial_state": False, "gate": "none", "gate_family": "none"},
]
"""Cases the verdict tests run: K = 1, packed sequences with an empty one, no S_0, each gate."""


def cases(dtype: str) -> list[DeltaCase]:
    """`SHAPES` in ``dtype``, each with its own seed."""
    return [replace(BASE, dtype=dtype, seed=20 + i, **s) for i, s in enumerate(SHAPES)]


# The inputs and the widths.


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [4, 16, 64])
def test_inverse_of_basis_keys_has_entries_in_minus_one_zero_one(seed: int, chunk: int) -> None:
    case = replace(BASE, T=130, K=3, seed=seed)
    built = dyadic_delta_problem(case, CHUNK)
    assert not isinstance(built, str), built
    k = built[0].k.double()[0].transpose(0, 1)  # [H, T, K]
    for start in range(0, k.shape[1], chunk):
        kc = k[:, start : start + chunk]
        c = kc.shape[1]
        A = (kc @ kc.transpose(-1, -2)).tril(-1)  # beta = 1
        T = forward_substitution_inverse(torch.eye(c, dtype=torch.float64) + A)
        assert set(T.flatten().tolist()) <= {-1.0, 0.0, 1.0}
        # A blocked inverse's products A_IJ T_JJ are indicators: entries in {0, 1}.
        half = c // 2
        if half:
            block = A[:, half:, :half] @ T[:, :half, :half]
            assert set(block.flatten().tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("index", range(len(SHAPES)))
def test_oracle_is_exact_and_needs_more_bits_than_the_output(dtype: str, index: int) -> None:
    case = cases(dtype)[index]
    built = dyadic_delta_problem(case, CHUNK)
    assert not isinstance(built, str), built
    problem, grid = built
    o, S = exact_outputs(problem, grid.chunk)  # raises unless both float64 forms agree bitwise
    assert S is not None
    unit = 2.0 ** (grid.e_s + grid.e_q + grid.e_v)
    assert torch.equal(o / unit, (o / unit).round())
    assert float((o / unit).abs().max()) < 2**24
    if dtype != "float32":
        # Some exact outputs fall between two numbers of the output dtype: a store that
        # truncates instead of rounding can be told apart.
        assert not torch.equal(o.to(torch_dtype_of(dtype)).double(), o)


def torch_dtype_of(name: str) -> torch.dtype:
    """The torch dtype called ``name``."""
    return getattr(torch, name)  # type: ignore[no-any-return]


def test_storage_bits_follow_the_recipe() -> None:
    fp32_chunk = DeltaRecipe(form="chunk")
    assert storage_bits(fp32_chunk, torch.float32) == 24
    assert storage_bits(fp32_chunk, torch.bfloat16) == 8  # the values are stored in bf16
    stored = DeltaRecipe(form="chunk", inverse_dtype="input", intermediate_dtype="input")
    assert storage_bits(stored, torch.float16) == 11
    assert storage_bits(replace(stored, state_dtype="bfloat16"), torch.float32) == 8
    assert storage_bits(DeltaRecipe(form="chunk", tf32=True), torch.float32) == 11
    assert storage_bits(DeltaRecipe(form="recurrent", accumulation="float64"), torch.float64) == 53


def test_sixteen_bit_storage_shrinks_the_values() -> None:
    stored = replace(
        CHUNK, recipe=DeltaRecipe(form="chunk", chunk_size=16, intermediate_dtype="bfloat16")
    )
    built = dyadic_delta_problem(replace(BASE, dtype="float32"), stored)
    assert not isinstance(built, str), built
    problem, grid = built
    assert (grid.p, grid.v_range) == (8, 127)  # |U|, |Vn| <= 2R = 254 < 2^8
    assert float(problem.v.abs().max()) <= 127 * 2.0**grid.e_v


# Verdicts.


@pytest.mark.parametrize("kernel", [RECURRENT, CHUNK], ids=["recurrent", "chunk"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_holds_on_the_references(kernel: DeltaKernel, dtype: str) -> None:
    for case in cases(dtype):
        result = dyadic_inputs_exact(case, kernel)
        assert result.status == "held", result.report()
        assert [c.tensor for c in result.comparisons] == ["o", "final_state"]
        assert all(c.kind == "bitwise" for c in result.comparisons)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fails_an_output_truncated_toward_zero(dtype: str) -> None:
    broken = next(b for b, _, _ in zoo.DELTA_ZOO if b.name == "zoo/delta_output_truncated")
    result = dyadic_inputs_exact(replace(BASE, dtype=dtype), broken)
    assert result.status == "failed", result.report()
    (o,) = [c for c in result.comparisons if c.tensor == "o"]
    assert not o.ok
    assert dyadic_inputs_exact(replace(BASE, dtype=dtype), zoo.CHUNK_TWIN).status == "held"


def test_fails_a_state_one_ulp_off() -> None:
    def fn(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        o, S = delta_recurrent_torch(*args, **kwargs)
        return o, None if S is None else torch.nextafter(S, torch.full_like(S, 1e30))

    nudged = replace(RECURRENT, name="test/state-one-ulp-up", fn=fn)
    result = dyadic_inputs_exact(BASE, nudged)
    assert result.status == "failed", result.report()
    assert [c.ok for c in result.comparisons] == [True, False]


def test_not_applicable_to_a_kernel_that_always_normalises() -> None:
    always = replace(
        RECURRENT,
        name="test/l2norm-only",
        capabilities=replace(RECURRENT.capabilities, l2norm_qk=(True,)),
    )
    result = dyadic_inputs_exact(BASE, always)
    assert result.status == "not_applicable"
    assert result.reason is not None
    assert "L2-normalises" in result.reason


# FLA's kernels (their recipes store T, W, U, Vn and the state in the input dtype).


@pytest.fixture(scope="module")
def fla_kernels() -> Iterator[list[DeltaKernel]]:
    if importlib.util.find_spec("fla") is None:
        pytest.skip("flash-linear-attention (fla-core 0.6.0) is not installed")
    from linattn_verify import interpreter
    from linattn_verify.delta import fla as fla_delta

    before = interpreter.enabled()
    found = fla_delta.fla_delta_kernels()
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("CUDA is available and TRITON_INTERPRET is unset: these cases run on a CPU")
    yield found
    interpreter.disable(patches=[p for p in interpreter.PATCHES if p not in before])


# The 16-bit dtypes, where FLA's recipes store intermediates narrower than the input and the
# widths decide; in float32 nothing is stored narrower (the soak draws those cases). Both run
# with `-m slow` (16 to 20 s each interpreted); CI checks FLA's delta kernels against the oracle
# through their adapters (tests/delta/test_fla_adapters.py).
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.slow
def test_holds_on_fla_kernels(fla_kernels: list[DeltaKernel], dtype: str) -> None:
    for kernel in fla_kernels:
        if dtype not in kernel.capabilities.dtypes:
            continue
        # BASE and the packed case; KDA's chunk kernel (about 10 s a case interpreted) the
        # packed one only.
        chosen = cases(dtype)[2:3] if kernel.name == "fla/kda.chunk" else cases(dtype)[0:3:2]
        for case in chosen:
            # A gate shape the kernel lacks becomes one it declares (g = 0 either way).
            result = dyadic_inputs_exact(case, kernel)
            assert result.status == "held", result.report()


def test_fla_storage_widths_are_what_make_it_sound(
    fla_kernels: list[DeltaKernel], monkeypatch: pytest.MonkeyPatch
) -> None:
    # FLA's chunk kernel stores U and Vn in bf16: with R = 255 (as if the recipe stored nothing)
    # their differences need 9 bits and are rounded, so the property would convict a correct
    # kernel; the recipe's 8 bits (R = 127) keep it exact.
    kernel = next(k for k in fla_kernels if k.name == "fla/delta_rule.chunk")
    case = replace(BASE, B=1, T=130, V=8, gate="none", gate_family="none")
    assert dyadic_inputs_exact(case, kernel).status == "held"
    monkeypatch.setattr(dyadic, "storage_bits", lambda recipe, dtype: 24)
    assert dyadic_inputs_exact(case, kernel).status == "failed"
