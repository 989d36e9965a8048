# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Shared type aliases: the string options of the public API, spelled once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch

Form = Literal["parallel", "chunk", "recurrent"]
"""The three algorithmic forms of causal linear attention."""

FORMS: tuple[Form, ...] = get_args(Form)
"""The forms, in report order."""

DtypeName = Literal["float64", "float32", "float16", "bfloat16"]
"""The floating dtypes the harness knows, by their torch names."""

DTYPE_NAMES: tuple[DtypeName, ...] = get_args(DtypeName)
"""Every dtype name, widest first (report order)."""

FeatureMap = Literal["identity", "elu1", "relu", "exp", "taylor2", "rebased", "favor+", "softmax"]
"""Feature maps φ. Elementwise: ``identity``; ``elu1`` = elu(x)+1 = where(x>0, x+1, exp(x));
``relu``; ``exp``. Lifted (R^K to R^F, `linattn_verify.linear_attn.feature_maps`): ``taylor2``
(Based), ``rebased`` and ``favor+`` (Performer positive random features); and ``softmax`` over
the feature dimension (F = K, but every feature depends on the whole row: lifted machinery)."""

LIFTED_MAPS: tuple[FeatureMap, ...] = ("taylor2", "rebased", "favor+", "softmax")
"""Feature maps that are not elementwise: their Jacobian is a matrix (the state is F x V, and F
differs from K except for softmax)."""

KEEPS_K: tuple[FeatureMap, ...] = ("identity", "elu1", "relu", "exp", "softmax")
"""Maps that keep K features: the ones queries and keys may differ in (``query_feature_map``)."""

OWN_FEATURE_MAPS: tuple[FeatureMap, ...] = (
    "identity",
    "elu1",
    "relu",
    "taylor2",
    "rebased",
    "favor+",
)
"""The maps our own kernels apply (``feature_map=``); ``exp`` and ``softmax`` are judged in
third-party kernels that declare them."""

SCORE_MAPS: tuple[FeatureMap, ...] = ("taylor2", "rebased")
"""Lifted maps that are polynomials of the score: the scale multiplies q before the map."""

OracleMethod = Literal["auto", "float64", "double-double", "mpmath"]
"""How `linattn_verify.oracle` computes: float64 torch, double-double numpy, or mpmath."""

DotPrecision = Literal["ieee", "tf32", "tf32x3"]
"""``tl.dot`` input precision for fp32 operands."""

Accumulation = Literal["ieee", "mma", "float64", "input"]
"""``ieee``: round-to-nearest fp32 adds (u = 2^-24); ``mma``: tensor-core accumulation (2^-23);
``float64``: everything in float64 (u = 2^-53), for judging the float64 references; ``input``:
every sum and elementwise operation in the input dtype (a kernel that never upcasts: running sums
kept in fp16, as performer-pytorch's)."""

DecayScan = Literal["chunk_local", "global", "per_step"]
"""How a kernel obtains decay weights: exp of differences of chunk-local cumulative sums, of
whole-sequence cumulative sums, or a product of per-step factors exp(g_s)."""

Division = Literal["full", "rn", "reciprocal"]
"""How the normalizer divides: ``full`` (``div.full.f32``, 2 ulp), correctly rounded ``rn``, or
``reciprocal``: 1/Z rounded, then a multiply (performer-pytorch's ``D_inv``), in the recipe's
``division_dtype``."""

Normalizer = Literal["offset", "in-dot", "clamp"]
"""Where a normalized kernel puts eps: ``offset``, s φ(q)·z + eps (ours, FLA's); ``in-dot``,
s φ(q)·(z + eps): eps added to every entry of the key sum (performer-pytorch's); ``clamp``,
max(s φ(q)·z, eps) (linear-attention-transformer's)."""

LowDtype = Literal["float32", "float16", "bfloat16"]
"""Storage dtypes a kernel may take inputs in, or round intermediates to."""

KERNEL_DTYPES: tuple[LowDtype, ...] = get_args(LowDtype)
"""The input dtypes a kernel is checked in by default (float64 is the oracles')."""

FinalStateDtype = Literal["float32", "input"]
"""The dtype of the final state a kernel returns: ``float32`` (or wider), or ``input``: rounded to
the input dtype (FLA's normalized ``linear_attn`` returns z_T so)."""

FINAL_STATE_DTYPES: tuple[FinalStateDtype, ...] = get_args(FinalStateDtype)
"""The final-state dtypes a kernel may declare."""

ScaleConvention = Literal["arg", "fixed", "one"]
"""How a kernel gets its scale: ``arg`` it takes ``scale=``; ``fixed`` it applies K^-1/2 itself;
``one`` it applies none (``check --scale``)."""

Gate = Literal["scalar", "vector"]
"""The shape of a log decay g: ``scalar`` ``[B, T, H]`` (one gate per token and head) or
``vector`` ``[B, T, H, K]`` (one per key dimension, GLA's)."""

GATES: tuple[Gate, ...] = get_args(Gate)
"""The gate shapes, scalar first (what a search shrinks toward)."""


def torch_dtype(name: str) -> torch.dtype:
    """Return the torch dtype named ``name`` (one of `DTYPE_NAMES`).

    Raises:
        KeyError: for a name outside `DTYPE_NAMES`.
    """
    import torch

    if name not in DTYPE_NAMES:
        raise KeyError(name)
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """Return the name of a torch dtype: ``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


__all__ = [
    "DTYPE_NAMES",
    "FINAL_STATE_DTYPES",
    "FORMS",
    "GATES",
    "KEEPS_K",
    "KERNEL_DTYPES",
    "LIFTED_MAPS",
    "OWN_FEATURE_MAPS",
    "SCORE_MAPS",
    "Accumulation",
    "DecayScan",
    "Division",
    "DotPrecision",
    "DtypeName",
    "FeatureMap",
    "FinalStateDtype",
    "Form",
    "Gate",
    "LowDtype",
    "OracleMethod",
    "ScaleConvention",
    "dtype_name",
    "torch_dtype",
]
