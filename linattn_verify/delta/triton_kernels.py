# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Our own Triton delta-rule kernels (`linattn_kernels.delta_rule`), declared for the harness.

`delta_recurrent_kernel` declares ``triton/delta.recurrent``, the token-recurrent kernel of
``kernels/linattn_kernels/delta_rule/recurrent.py``, from the module's own
``precision_recipe(dtype)``: fp32 state, corrections and gradients, IEEE fp32 sums, no
``tl.dot``; only o and the gradients are rounded to their dtypes.

`delta_chunk_kernel` declares ``triton/delta.chunk``, the chunked WY / UT kernel of
``kernels/linattn_kernels/delta_rule/chunk.py``. Its recipe names no storage rounding: the
triangular inverse T = L^-1 is formed by forward substitution in fp32 registers and never
stored, W, U, the corrected values, the in-kernel L2-normalised q, k and the chunk-boundary
states stay fp32, and every ``tl.dot`` takes IEEE fp32 operands (``input_precision="ieee"``,
no tf32) with fp32 (FMA) accumulation. Only o and the input gradients are rounded to their
dtypes, once, on the way out.
"""

from __future__ import annotations

from linattn_verify.delta.kernel import DeltaCapabilities, DeltaKernel, DeltaRecipe
from linattn_verify.delta.targets import DeltaKernelSource

TARGET = "linattn_kernels.delta_rule.chunk:chunk_delta_rule"
"""Where `delta_chunk_kernel`'s function lives, as ``linattn-verify check`` names targets."""

CHUNK_CAPABILITIES = DeltaCapabilities(
    gates=("none", "scalar", "vector"),
    l2norm_qk=(False, True),
    negative_eigenvalues=True,
    # Everything is fp32 and nothing assumes ||k|| <= 1: any key norm is within the contract
    # (an ill-conditioned case is judged by the bound, which grows with M).
    unit_norm_keys=False,
    backward=True,
    varlen=True,
    initial_state=True,
    final_state=True,
    dtypes=("float32", "float16", "bfloat16"),
    # One program holds the whole [K, V] state in registers.
    max_head_dim=128,
    chunk_sizes=(16, 32, 64),
    # Forward substitution keeps the inverse lower triangular; one fixed order per element;
    # every load goes through the strides (layouts change no rounding).
    deterministic=True,
    causal_exact=True,
    layout_exact=True,
)
"""What ``triton/delta.chunk`` supports."""

CHUNK_RECIPE = DeltaRecipe(
    form="chunk",
    chunk_size=64,
    accumulation="ieee",
    tf32=False,
    inverse_dtype=None,
    intermediate_dtype=None,
    state_dtype=None,
    casts_on_path=0,
)
"""How ``triton/delta.chunk`` rounds, for every input dtype (inputs are upcast exactly)."""


def delta_recurrent_kernel() -> DeltaKernel:
    """Return ``triton/delta.recurrent``: our token-recurrent delta-rule kernel, declared."""
    import torch
    from linattn_kernels.delta_rule import recurrent

    def recipe(dtype: torch.dtype) -> DeltaRecipe:
        return DeltaRecipe(**recurrent.precision_recipe(dtype))  # type: ignore[arg-type]

    capabilities = DeltaCapabilities(
        gates=("none", "scalar", "vector"),
        l2norm_qk=(False, True),
        negative_eigenvalues=True,
        # fp32 throughout, nothing assumes ||k|| <= 1: any key norm is in contract
        # (beta ||k||² > 2 is the problem's own ill-conditioning, which the bound shows).
        unit_norm_keys=False,
        backward=True,
        varlen=True,
        initial_state=True,
        final_state=True,
        dtypes=("float32", "float16", "bfloat16"),
        max_head_dim=recurrent.MAX_HEAD_DIM,
        deterministic=True,
        causal_exact=True,
        # Every load goes through the strides: layouts change no rounding.
        layout_exact=True,
    )
    # The recipe does not depend on the dtype, so the replayable source can carry fp32's.
    source = DeltaKernelSource(
        target="linattn_kernels.delta_rule.recurrent:recurrent_delta_rule",
        capabilities=capabilities,
        recipe=recipe(torch.float32),
    )
    return DeltaKernel(
        name="triton/delta.recurrent",
        fn=recurrent.recurrent_delta_rule,
        capabilities=capabilities,
        recipe=recipe,
        source=source.to_json(),
    )


def delta_chunk_kernel() -> DeltaKernel:
    """Return ``triton/delta.chunk``: our chunked WY / UT delta-rule kernel, declared.

    Call ``.with_options(name, chunk_size=16)`` for another chunk size (16, 32 or 64); the
    recipe follows the option.
    """
    from linattn_kernels.delta_rule.chunk import chunk_delta_rule

    source = DeltaKernelSource(
        target=TARGET, capabilities=CHUNK_CAPABILITIES, recipe=CHUNK_RECIPE
    ).to_json()
    return DeltaKernel(
        name="triton/delta.chunk",
        fn=chunk_delta_rule,
        capabilities=CHUNK_CAPABILITIES,
        recipe=CHUNK_RECIPE,
        source=source,
    )


__all__ = [
    "CHUNK_CAPABILITIES",
    "CHUNK_RECIPE",
    "TARGET",
    "delta_chunk_kernel",
    "delta_recurrent_kernel",
]
