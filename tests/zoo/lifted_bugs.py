# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo's lifted-map kernels: feature maps taylor2 (Based), rebased and favor+ (issue #17).

A lifted map takes K dims to F features, so the places a bug can live move into the features
themselves and into the row-sum normaliser built on them. Each kernel here is `lifted_one` (the
parallel form of a lifted map, evaluated per sequence in float32: A = s' φ(q') φ(k)^T masked to
j <= t, o = A V + s' φ(q')^T S_0, and for normalized outputs the row sums Z the same with v -> 1
and S_0 -> z_0, plus eps) with one bug; the correct twin is the same function without it. The
twins take no decay (``decay=False``).

Loaded by path (`linattn_verify.core.loading.import_file`) by `test_lifted_zoo.py`, after `bugs.py`,
whose helpers (`per_sequence`, `_entry`, `ZooEntry`) it reuses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from linattn_verify.core.loading import import_file
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.oracles._sequence import divide_rows
from linattn_verify.linear_attn.reference_kernels import RECIPES, convention_kernel
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.registry import FULL

bugs = import_file(Path(__file__).with_name("bugs.py"), "_linattn_zoo_bugs_for_lifted")

State = Any
Features = Callable[[Problem, torch.Tensor], torch.Tensor]
"""φ of one side's rows ``[..., K]`` of a problem, ``[..., F]`` (the scale as the map takes it)."""


def favor_features(p: Problem, x: torch.Tensor, *, shift: str = "none") -> torch.Tensor:
    """favor+ features exp(y - c) / √m of rows x ``[L, H, K]``, y = W x - |x|²/2.

    ``shift`` picks c: ``"none"`` (0), ``"row"`` (each row's largest y_f) or ``"sequence"`` (the
    largest y over the sequence's rows and features, per head). y is formed elementwise, not by
    a matmul: CPU BLAS may round a short dot differently with the buffers' strides or
    alignment, which the bit-exact properties would report.
    """
    assert p.feature_weights is not None
    W = p.feature_weights.to(x.dtype)
    y = (x[..., None, :] * W).sum(-1) - 0.5 * (x * x).sum(-1, keepdim=True)  # [L, H, m]
    if shift == "row":
        y = y - y.amax(-1, keepdim=True)
    elif shift == "sequence" and y.numel():
        y = y - y.amax(dim=(0, 2), keepdim=True)
    return torch.exp(y) / math.sqrt(W.shape[0])


def correct_queries(p: Problem, q: torch.Tensor) -> torch.Tensor:
    """φ(s q) for the score maps, φ(q) (stabilised where it cancels) for favor+."""
    if p.feature_map == "favor+":
        return favor_features(p, q, shift="row" if p.stabilised_queries else "none")
    return p.query_features(q)


def correct_keys(p: Problem, k: torch.Tensor) -> torch.Tensor:
    """φ(k)."""
    if p.feature_map == "favor+":
        return favor_features(p, k)
    return p.key_features(k)


def lifted_one(
    x: Problem,
    *,
    queries: Features = correct_queries,
    keys: Features = correct_keys,
    denominator: str = "correct",
) -> tuple[torch.Tensor, State]:
    """The parallel form of a lifted map on one float32 sequence (B = 1), with optional bugs.

    ``queries`` and ``keys`` give the features; ``denominator`` where eps goes: ``"correct"``
    (o = N / (Z + eps)), ``"eps_per_term"`` (eps added to every score of the row before the row
    sum, Z + (t + 1) eps) or ``"eps_after_division"`` (o = N / Z + eps).
    """
    s = x.outer_scale
    q = queries(x, x.q[0]).transpose(0, 1)  # [H, L, F]
    k = keys(x, x.k[0]).transpose(0, 1)  # [H, L, F]
    v = x.v[0].transpose(0, 1)  # [H, L, V]
    H, L, F = q.shape
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    A = s * (q @ k.transpose(-1, -2)) * mask  # [H, L, L]
    S0 = q.new_zeros(H, F, v.shape[-1]) if x.initial_state is None else x.initial_state[0]
    z0 = q.new_zeros(H, F) if x.initial_key_sum is None else x.initial_key_sum[0]
    N = A @ v + s * (q @ S0)  # [H, L, V]
    S_T = k.transpose(-1, -2) @ v + S0
    z_T = k.sum(dim=1) + z0
    if not x.normalize:
        return N.transpose(0, 1)[None], S_T[None]
    if denominator == "eps_per_term":
        A = A + x.eps * mask
    Z = A.sum(-1) + s * (q @ z0[..., None])[..., 0]  # [H, L]
    if denominator == "eps_after_division":
        o = divide_rows(N.transpose(0, 1)[None], Z.transpose(0, 1)[None]) + x.eps
    else:
        eps = 0.0 if denominator == "eps_per_term" else x.eps
        o = divide_rows(N.transpose(0, 1)[None], Z.transpose(0, 1)[None] + eps)
    return o, (S_T[None], z_T[None])


def _lifted(doc: str, **bug: Any) -> Callable[[Problem], tuple[torch.Tensor, State]]:
    """`lifted_one` with ``bug`` on each sequence (`bugs.per_sequence`), as a kernel.

    The kernel's name is set by `_named` (`bugs._entry` names the broken kernel after it).
    """

    def impl(p: Problem) -> tuple[torch.Tensor, State]:
        return bugs.per_sequence(p, functools.partial(lifted_one, **bug))

    impl.__doc__ = doc
    return impl


def _named(name: str, impl: Callable[[Problem], tuple[torch.Tensor, State]]) -> Any:
    impl.__name__ = name
    return impl


def _twin(name: str, caps: Capabilities) -> Kernel:
    impl = _named(f"lifted_{name}", _lifted("The correct lifted parallel form."))
    return Kernel(
        name=f"zoo-twin/lifted-{name}",
        fn=convention_kernel(impl),
        capabilities=caps,
        recipe=RECIPES["parallel"],
    )


LIFTED = replace(FULL, decay=False, gates=("scalar",))
"""What the lifted twins support: everything but decay (each narrows its feature maps)."""

TAYLOR_TWIN = _twin("taylor2", replace(LIFTED, feature_maps=("taylor2",)))
FAVOR_TWIN = _twin("favor", replace(LIFTED, feature_maps=("favor+",)))
NORMALIZER_TWIN = _twin(
    "normalizer", replace(LIFTED, feature_maps=("taylor2", "rebased"), normalize=(True,))
)


# Feature maps.


def _taylor2_unit_quadratic(y: torch.Tensor) -> torch.Tensor:
    """taylor2 features of y with weight 1 on y_i y_j, not 1/√2: κ = 1 + x + x², not x²/2."""
    ones = torch.ones_like(y[..., :1])
    return torch.cat([ones, y, (y[..., :, None] * y[..., None, :]).flatten(-2)], dim=-1)


def _taylor2_queries(p: Problem, q: torch.Tensor) -> torch.Tensor:
    return _taylor2_unit_quadratic(q * p.scale)


def _taylor2_keys(p: Problem, k: torch.Tensor) -> torch.Tensor:
    return _taylor2_unit_quadratic(k)


taylor2_without_inv_sqrt2 = _named(
    "taylor2_without_inv_sqrt2",
    _lifted(
        "Feature map: Based's quadratic features without 1/√2 (weight 1 + x + x²).",
        queries=_taylor2_queries,
        keys=_taylor2_keys,
    ),
)


def _favor_always_stabilised(p: Problem, q: torch.Tensor) -> torch.Tensor:
    """favor+ query features divided by exp(max_f y_f) whatever the semantics."""
    return favor_features(p, q, shift="row")


favor_stabilised_unnormalized = _named(
    "favor_stabilised_unnormalized",
    _lifted(
        "Feature map: favor+ subtracts each query's largest exponent also where nothing "
        "cancels (unnormalized, or eps > 0).",
        queries=_favor_always_stabilised,
    ),
)


# Normalization.

eps_per_term = _named(
    "eps_per_term",
    _lifted(
        "Normalization: adds eps to every score of the row before summing (Z + (t+1) eps).",
        denominator="eps_per_term",
    ),
)
eps_after_division = _named(
    "eps_after_division",
    _lifted(
        "Normalization: adds eps after the division (N / Z + eps).",
        denominator="eps_after_division",
    ),
)


# Causality: a stabiliser that reads the future.


def _favor_keys_sequence_max(p: Problem, k: torch.Tensor) -> torch.Tensor:
    """favor+ key features divided by exp(max over the sequence's keys and features, per head)."""
    return favor_features(p, k, shift="sequence")


favor_keys_sequence_max = _named(
    "favor_keys_sequence_max",
    _lifted(
        "Causality: favor+ stabilises keys by their largest exponent over the whole sequence: "
        "it cancels in N / Z (normalized, eps = 0, no states) but a future key changes the "
        "bits of past outputs.",
        keys=_favor_keys_sequence_max,
    ),
)

CAUSAL_FAVOR = replace(
    LIFTED,
    feature_maps=("favor+",),
    normalize=(True,),
    configurable=False,
    varlen=False,
    initial_state=False,
    final_state=False,
)
"""The one semantics on which the sequence-max stabiliser cancels: normalized favor+, eps = 0,
no states (a non-configurable kernel, called with those options fixed)."""


def _fixed_favor(impl: Callable[[Problem], tuple[torch.Tensor, State]]) -> Any:
    return functools.partial(convention_kernel(impl), normalize=True, eps=0.0, feature_map="favor+")


CAUSAL_TWIN = Kernel(
    name="zoo-twin/lifted-favor-normalized",
    fn=_fixed_favor(_named("lifted_favor_normalized", _lifted("Normalized favor+, eps = 0."))),
    capabilities=CAUSAL_FAVOR,
    recipe=RECIPES["parallel"],
)


LIFTED_ZOO = (
    bugs._entry(taylor2_without_inv_sqrt2, TAYLOR_TWIN, "feature map", "Based's Taylor weights"),
    bugs._entry(favor_stabilised_unnormalized, FAVOR_TWIN, "feature map", "Performer's stabiliser"),
    bugs._entry(eps_per_term, NORMALIZER_TWIN, "normalization", "eps inside the row sum"),
    bugs._entry(eps_after_division, NORMALIZER_TWIN, "normalization", "eps after the division"),
    bugs.ZooEntry(
        broken=replace(
            CAUSAL_TWIN,
            name="zoo/favor_keys_sequence_max",
            fn=_fixed_favor(favor_keys_sequence_max),
        ),
        twin=CAUSAL_TWIN,
        bug_class="feature map",
        mirrors="a key stabiliser over the whole sequence",
    ),
)
"""The lifted-map zoo: five broken kernels, four twins."""

LIFTED_TWINS = bugs.twins_of(LIFTED_ZOO)
