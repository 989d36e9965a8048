# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Tensor contents and memory layouts: value and decay families, dtypes, layouts, cotangents.

Hypothesis draws a family's *name*; the values come from a seeded torch generator, so a case is
reproducible from its printed spec and shrinks toward simple families.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from linattn_verify.core.sizes import check_choices
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.typing import DTYPE_NAMES, KERNEL_DTYPES, torch_dtype

VALUE_FAMILIES = (
    "normal",
    "uniform",
    "heavy_tailed",
    "large",
    "tiny",
    "duplicated_keys",
    "rank_deficient_keys",
    "zero_rows",
    "underflowing_features",
    "positive",
    "near_max",
    "score_cancellation",
    "large_norm",
)
"""Families of q/k/v values (docs/design.md §9). The last two stress lifted feature maps only
(`linattn_verify.linear_attn.strategies._lifted`). ``underflowing_features`` puts q, k near -100 so
that elu1 features underflow; ``large`` uses magnitudes around 1e3; ``tiny`` around 1e-20;
``positive`` makes q, k >= 0 (features without cancellation when no feature map is applied);
``near_max`` puts |q|, |k| near sqrt(max / (T·K·V)) of the dtype (see `near_max_magnitude`)."""

EXTREME_FAMILIES = ("tiny", "underflowing_features", "near_max")
"""Value families at magnitudes models do not produce (around 1e-20, features underflowing to
subnormals, products near the dtype's largest value): a failure on them is an ``extreme-range``
finding (`linattn_verify.triage`)."""

REALISTIC_FAMILIES = tuple(f for f in VALUE_FAMILIES if f not in EXTREME_FAMILIES)
"""The other value families: what `check` searches first."""

DECAY_FAMILIES = ("none", "zero", "mild", "steep", "overflowing")
"""Families of log-decays g: no decay, g = 0 exactly, g in (-0.1, 0], steep g down to -20, and
g chosen so that |G| exceeds 88 inside a block of 16 tokens."""

VECTOR_DECAY_FAMILIES = (
    *DECAY_FAMILIES,
    "mixed",
    "one_steep",
    "overflowing_some",
    "logsigmoid",
)
"""Families of vector gates g ``[B, T, H, K]`` (issue #13): the scalar families drawn per key
dimension, and four that only a vector gate has: ``mixed`` (each key dimension of each head
exactly 0, mild or steep), ``one_steep`` (mild, but one dimension per head between -10 and -20
per step), ``overflowing_some`` (|G| > 88 within 16 tokens in a random nonempty subset of the
dimensions, mild in the others) and ``logsigmoid`` (FLA's test gates, logsigmoid(x) / c with
c drawn from `LOGSIGMOID_NORMALIZERS`)."""

LOGSIGMOID_NORMALIZERS = (0.01, 0.1, 1.0, 10.0)
"""The normalizers c of the ``logsigmoid`` vector gates: c = 0.01 makes steps near -70."""

_VECTOR_ONLY = ("mixed", "one_steep", "overflowing_some", "logsigmoid")

DTYPES: dict[str, torch.dtype] = {name: torch_dtype(name) for name in DTYPE_NAMES}
"""Input dtypes by name. float64 is drawn only for kernels that declare it."""

LOW_PRECISION_DTYPES = KERNEL_DTYPES
"""The dtypes `problem_specs` draws by default (kernels take these; fp64 is opt-in)."""

LAYOUTS = ("contiguous", "transposed", "sliced")
"""Memory layouts of q, k, v and g (values are the same in all three; only strides differ):
``contiguous``; ``transposed``, a head-first ``[B, H, T, D]`` tensor transposed to
``[B, T, H, D]``; ``sliced``, a window of a larger NaN-filled tensor, offset along T and the last
dim (so a kernel that ignores the offset or row stride reads NaN)."""

_SLICE_PAD = (2, 3)
"""Tokens before/after and features before/after the window of a ``sliced`` tensor."""


def float_dtypes(*, names: Sequence[str] = LOW_PRECISION_DTYPES) -> st.SearchStrategy[str]:
    """Generate input dtype names (keys of `DTYPES`), shrinking toward the first.

    Args:
        names: The dtypes to draw from. Default: `("float32", "float16", "bfloat16")`; float64
            is excluded unless named, since few kernels take it.

    Raises:
        InvalidArgument: if ``names`` is empty or names an unknown dtype.
    """
    return st.sampled_from(check_choices("names", names, tuple(DTYPES)))


def value_families(*, names: Sequence[str] = VALUE_FAMILIES) -> st.SearchStrategy[str]:
    """Generate value family names (see `VALUE_FAMILIES`), shrinking toward ``"normal"``.

    Args:
        names: The families to draw from. Default: every family.

    Raises:
        InvalidArgument: if ``names`` is empty or names an unknown family.
    """
    return st.sampled_from(check_choices("names", names, VALUE_FAMILIES))


def decay_families(*, names: Sequence[str] = DECAY_FAMILIES) -> st.SearchStrategy[str]:
    """Generate decay family names (see `DECAY_FAMILIES`), shrinking toward ``"none"``.

    Args:
        names: The families to draw from. Default: every family.

    Raises:
        InvalidArgument: if ``names`` is empty or names an unknown family.
    """
    return st.sampled_from(check_choices("names", names, DECAY_FAMILIES))


def layouts(*, names: Sequence[str] = LAYOUTS) -> st.SearchStrategy[str]:
    """Generate memory layout names (see `LAYOUTS`), shrinking toward ``"contiguous"``.

    Args:
        names: The layouts to draw from. Default: every layout.

    Raises:
        InvalidArgument: if ``names`` is empty or names an unknown layout.
    """
    return st.sampled_from(check_choices("names", names, LAYOUTS))


def near_max_magnitude(dtype: torch.dtype, T: int, K: int, V: int, scale: float | None) -> float:
    """Return the |q|, |k| magnitude of the ``near_max`` family.

    With |q|, |k| <= x and |v| <= 1, every quantity of the function and its gradients is at most
    s·T²·K·V·x² times a cotangent entry (the decay gradient sums that many products; the output
    only s·T·K·x²). Choosing x² = max / (64·max(1, s)·T²·K·V) keeps them below max/64, so
    products and sums stay finite in the dtype while single products reach far up its range.
    """
    s = 1.0 if scale is None else max(1.0, abs(scale))
    return math.sqrt(torch.finfo(dtype).max / (64.0 * s * T * T * K * V))


def family_values(
    family: str,
    role: str,
    shape: tuple[int, ...],
    gen: torch.Generator,
    *,
    near_max: float = 1.0,
) -> torch.Tensor:
    """Draw values of ``family`` for the input ``role`` (``"q"``, ``"k"`` or ``"v"``).

    Values are float32 (float64 for ``near_max`` q and k); the caller rounds them to the dtype.

    Args:
        family: A name from `VALUE_FAMILIES`.
        role: Which input: key-only families change k alone, feature families q and k.
        shape: The tensor shape.
        gen: The seeded generator (draws are consumed in a fixed order per family).
        near_max: The ``near_max`` magnitude (`near_max_magnitude`). Default: `1.0`.
    """
    x = torch.randn(shape, generator=gen)
    if family == "uniform":
        return torch.rand(shape, generator=gen) * 2 - 1
    if family == "heavy_tailed":
        # A normal over a power of a uniform has polynomial tails (|x| > y with probability
        # ~ y^-1.5); clamping the uniform keeps fp16 products finite.
        u = torch.rand(shape, generator=gen).clamp(min=1e-3)
        return x / u**0.66
    if family == "large":
        return x * 1e3
    if family == "tiny":
        return x * 1e-20
    if family == "duplicated_keys" and role == "k":
        return x[:, :1].expand_as(x).clone()
    if family == "rank_deficient_keys" and role == "k" and shape[-1] > 1:
        basis = torch.randn(*shape[:-1], 1, generator=gen)
        return basis * torch.randn(shape[-1], generator=gen)
    if family == "zero_rows":
        keep = torch.rand(shape[:-1], generator=gen) > 0.3
        return x * keep[..., None]
    if family == "underflowing_features" and role in ("q", "k"):
        return x - 100.0
    if family == "positive" and role in ("q", "k"):
        return x.abs()
    if family == "near_max":
        u = torch.rand(shape, generator=gen)
        if role == "v":
            return 2 * u - 1
        # Magnitudes in [x/2, x] with the normal draw's sign: near the limit, never past it.
        # Computed in float64, since for float64 inputs x is beyond float32's range.
        return (torch.where(x < 0, -1.0, 1.0) * (0.5 + 0.5 * u)).double() * near_max
    return x


def decay_values(family: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor | None:
    """Draw float32 log-decays of ``family``, or `None`.

    ``shape`` is ``[B, T, H]`` (a scalar gate: ``family`` from `DECAY_FAMILIES`) or
    ``[B, T, H, K]`` (a vector gate: any of `VECTOR_DECAY_FAMILIES`).

    Raises:
        InvalidArgument: for a vector-only family with a scalar shape, or an unknown family.
    """
    if family not in VECTOR_DECAY_FAMILIES:
        raise InvalidArgument(
            f"Got family={family!r}, but it must be one of {VECTOR_DECAY_FAMILIES}."
        )
    if family in _VECTOR_ONLY:
        if len(shape) != 4:
            raise InvalidArgument(
                f"Got family={family!r} with shape={tuple(shape)}, but it is a vector-gate "
                "family: shape must be [B, T, H, K]."
            )
        return _vector_decay(family, shape, gen)
    if family == "none":
        return None
    if family == "zero":
        return torch.zeros(shape)
    if family == "mild":
        return -0.1 * torch.rand(shape, generator=gen)
    if family == "steep":
        return -20.0 * torch.rand(shape, generator=gen)
    # |G| > 88 within 16 tokens: every step at least -5.6.
    return -5.6 - 2 * torch.rand(shape, generator=gen)


def _vector_decay(family: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """The vector-only families of `VECTOR_DECAY_FAMILIES` (see there)."""
    H, K = shape[2], shape[3]
    mild = -0.1 * torch.rand(shape, generator=gen)
    if family == "mixed":
        # A dimension keeps its character across tokens: some channels remember, some forget.
        kind = torch.randint(0, 3, (H, K), generator=gen)
        steep = -20.0 * torch.rand(shape, generator=gen)
        return torch.where(kind == 0, 0.0, torch.where(kind == 1, mild, steep))
    if family == "one_steep":
        dim = torch.randint(0, K, (H,), generator=gen)
        chosen = torch.nn.functional.one_hot(dim, K).bool()  # [H, K]
        return torch.where(chosen, -10.0 - 10.0 * torch.rand(shape, generator=gen), mild)
    if family == "overflowing_some":
        # A nonempty subset per head; a proper one when there are two dimensions or more.
        chosen = torch.rand(H, K, generator=gen) < 0.5
        first = torch.randint(0, K, (H,), generator=gen)
        chosen |= torch.nn.functional.one_hot(first, K).bool()
        if K > 1:
            chosen &= ~torch.nn.functional.one_hot((first + 1) % K, K).bool()
        return torch.where(chosen, -5.6 - 2 * torch.rand(shape, generator=gen), mild)
    # logsigmoid: FLA's test gates.
    c = LOGSIGMOID_NORMALIZERS[
        int(torch.randint(0, len(LOGSIGMOID_NORMALIZERS), (1,), generator=gen))
    ]
    return torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen)) / c


def vector_decay_families(
    *, names: Sequence[str] = VECTOR_DECAY_FAMILIES
) -> st.SearchStrategy[str]:
    """Generate vector-gate family names (see `VECTOR_DECAY_FAMILIES`), shrinking toward ``"none"``.

    Raises:
        InvalidArgument: if ``names`` is empty or names an unknown family.
    """
    return st.sampled_from(check_choices("names", names, VECTOR_DECAY_FAMILIES))


def lay_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Return ``x`` (``[B, T, H, ...]``) with the same values in memory laid out as ``layout``."""
    if layout == "transposed":
        # Store head-first ([B, H, T, ...]) and view it back as [B, T, H, ...].
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "sliced":
        (t0, t1), (d0, d1) = _SLICE_PAD, _SLICE_PAD
        B, T, *rest = x.shape
        big = torch.full(
            (B, t0 + T + t1, *rest[:-1], d0 + rest[-1] + d1),
            float("nan"),
            dtype=x.dtype,
            device=x.device,
        )
        window = big[:, t0 : t0 + T, ..., d0 : d0 + rest[-1]]
        window.copy_(x)
        return window
    return x


def random_cotangents(problem: Problem, seed: int) -> tuple[torch.Tensor, Any]:
    """Draw normal cotangents for a problem's output and final state.

    Returns:
        ``(do, d_final_state)``: do ``[B, T, H, V]`` in the input dtype; dS_T ``[N, H, K, V]``
        (fp32), or the pair ``(dS_T, dz_T)`` for normalized problems.
    """
    gen = torch.Generator().manual_seed(seed)
    _, _, H, _, V = problem.shape
    F = problem.feature_dim  # the state's rows (K for an elementwise map)
    N = problem.num_sequences
    do = torch.randn(problem.v.shape, generator=gen).to(problem.q.dtype)
    dS = torch.randn(N, H, F, V, generator=gen)
    if problem.normalize:
        return do, (dS, torch.randn(N, H, F, generator=gen))
    return do, dS


__all__ = [
    "DECAY_FAMILIES",
    "DTYPES",
    "LAYOUTS",
    "LOGSIGMOID_NORMALIZERS",
    "LOW_PRECISION_DTYPES",
    "VALUE_FAMILIES",
    "VECTOR_DECAY_FAMILIES",
    "decay_families",
    "decay_values",
    "family_values",
    "float_dtypes",
    "lay_out",
    "layouts",
    "near_max_magnitude",
    "random_cotangents",
    "vector_decay_families",
]
