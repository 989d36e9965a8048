# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""flash-linear-attention's Based and ReBased kernels (``fla-core==0.6.0``) as `Kernel` objects.

`lifted_kernels` returns one `Kernel` per function and output semantics (`fla_kernels` includes
them):

===================================  =========  =========  =======  =====  ===============
name                                 form       map        K        eps    16-bit casts
===================================  =========  =========  =======  =====  ===============
``fla/based.parallel``               parallel   taylor2    <= 128   -      3
``fla/based.parallel+normalize``     parallel   taylor2    <= 128   1e-6   6 (eps in bf16)
``fla/based.fused_chunk``            chunk 16   taylor2    <= 16    -      5
``fla/based.fused_chunk+normalize``  chunk 16   taylor2    <= 16    1e-6   6 (eps in fp32)
``fla/rebased.parallel``             parallel   rebased    <= 128   -      3
``fla/rebased.parallel+normalize``   parallel   rebased    <= 128   1e-5   6 (eps in bf16)
===================================  =========  =========  =======  =====  ===============

What FLA computes, read off its 0.6.0 sources (``fla/ops/based``, ``fla/ops/rebased``): inputs
and output ``[B, T, H, K]``; no gate, initial or final state, or varlen. With q̂ = fl(s q),
rounded to the input dtype (``(b_q * scale).to(b_q.dtype)``), the weight of key j in row t is
κ(q̂_t·k_j), κ(x) = 1 + x + x²/2 (``based``) or x² (``rebased``): the harness's ``taylor2`` and
``rebased`` maps with the scale inside the score (`linattn_verify.linear_attn.semantics`).

* ``parallel_based`` and ``parallel_rebased`` form the scores q̂ K^T with ``tl.dot``
  (``allow_tf32=False``: IEEE fp32 products for fp32 inputs), κ in fp32, the row sums z in fp32
  from the fp32 κ, and o from κ cast to v's dtype before its ``tl.dot`` with v; o and z are each
  rounded to the input dtype (``o.sum(0).to(q.dtype)``), then torch divides in the input dtype:
  ``o / (z[..., None] + eps)``, eps = 1e-6 (based) or ``eps=1e-5`` (rebased's default, the
  one adapted). ``parallel_based`` takes any scale (default K^-1/2); ``parallel_rebased`` only
  K^-1/2 (``use_scale=True``) or 1 (``use_scale=False``), so its kernels declare
  ``scales=("default", "one")`` (`Capabilities.scales`).
* ``fused_chunk_based`` (K <= 16, chunks of 16) keeps the Taylor state in three fp32 pieces
  (Σ v, Σ k v^T, Σ (k⊗k) v^T); q̂ is cast to k's dtype, the outer products q̂⊗q̂ and k⊗k are
  rounded to the input dtype, the states are cast before each ``tl.dot``, and the intra-chunk
  κ before its dot with v. o is rounded to the input dtype but z is returned in fp32, so torch
  adds eps and divides in fp32 (o promoted), and rounds the quotient to the input dtype.

Precision (docs/error-model.md §7): ``casts_on_path`` counts, for 16-bit inputs, the roundings
to the input dtype that one term meets on its longest path, over the numerator, the denominator
and the backward pass (a recipe has one count for both passes). The scaled query q̂ enters the
quadratic feature twice (q̂_i q̂_j), so its one cast counts twice.

* parallel, unnormalized: forward, q̂ (2) and κ before its dot with v (1): 3; o's rounding is
  the output's. The backward meets fewer (dq: q̂ in κ'(s), then ``(dS * κ').to(dtype)``: 2).
* parallel, normalized, forward: the numerator adds o rounded before the division (4); the
  denominator meets q̂ (2), z rounded to the input dtype (3) and the sum z + eps rounded to it
  (4); the quotient's rounding is the output's (torch divides in fp32 opmath, ``division=
  "rn"``). ``eps_dtype`` is the input dtype: fl_bf16(1e-6) = 2^-20·134/128 ≈ 9.98e-7, which
  the oracle uses; adding it is the fourth cast (for based κ >= 1/2, so z >= 1/2 and z + 1e-6
  rounds back to z in bf16: that error is eps itself, below u·z). Backward, 6: torch's
  division backward runs in the input dtype, dz = -sum_V(do·((o/den)/den)) with three roundings
  and the V-sum (4); FLA's kernel adds dz to dP in fp32 and casts ``dP·κ'(s)`` (5), where s
  carries q̂ (6). The declared count is 6.
* fused_chunk, unnormalized: the second-order inter-chunk term meets q̂ (2), q̂⊗q̂ (3), k⊗k (4)
  and the cast of Σ (k⊗k) v^T before its dot (5). Normalized, o is rounded before the division
  (6); the denominator meets q̂ (2), q̂⊗q̂ (3) and k⊗k (4) and stays fp32 (``eps_dtype``
  float32, fl32(1e-6) ≈ 1e-6). The backward meets at most as many (dv through the reverse
  second-order state: k⊗k, q̂ twice, q̂⊗q̂, the input-dtype cotangent of o (normalized only), the
  state's cast).

In fp32 every cast is a no-op; the fp32 roundings of q̂ and of the features are charged by the
bounds themselves (`linattn_verify.linear_attn._bounds.lifted`). Compiled on CUDA, 16-bit dots
accumulate on tensor cores (``accumulation="mma"``, also claimed for fp32, an overcount: FLA
disables tf32, so ``dot_precision`` is IEEE); under the Triton interpreter everything is IEEE fp32.

Zero denominators: torch divides, unguarded (``zero_denominator="ieee"``). With eps > 0 the
exact denominator is never 0; rebased's κ = x² makes z = 0 exactly on a row with q̂_t·k_j = 0
for all j <= t (q = 0), where the result is 0 / eps = 0.

Backward: FLA's own kernels (``allow_tf32=False`` too); the division's backward runs in torch in
the input dtype.

Known weaknesses (fp16, normalized; found by the harness, replayed in
tests/adapters/test_fla_lifted.py). The kernels still declare fp16, as FLA does:

* The unnormalized output, and for the parallel kernels z, are rounded to fp16 before the
  division, and κ is cast to fp16 before its dot with v: κ(s q·k) > 65504 (s > 361 for based,
  |s| > 255 for rebased), or a row sum past it, gives inf/inf = NaN (parallel) or inf/z = inf
  (fused_chunk) where the exact output is a weighted mean of the values.
* ``parallel_rebased``'s backward divides the cotangent by z + eps in fp16: on a row whose
  scores are all 0 (q = 0, so z = 0 and z + eps = fl16(1e-5)), do / 1e-5 overflows for
  |do| > 0.66, and 0 · inf = NaN reaches dq, dk and dv, whose exact values are finite (0 for dq).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe, dtype_name
from linattn_verify.typing import FeatureMap, Form

BASED_EPS = 1e-6
"""The eps ``parallel_based`` and ``fused_chunk_based`` add to the row sums (a literal)."""

REBASED_EPS = 1e-5
"""The eps ``parallel_rebased`` adds by default (its ``eps`` argument; the one adapted)."""

PARALLEL_MAX_KEY_DIM = 128
"""K (and V) limit of the parallel kernels (``assert q.shape[-1] <= 128``, one K block)."""

FUSED_CHUNK_MAX_KEY_DIM = 16
"""K limit of ``fused_chunk_based`` (``assert q.shape[-1] <= 16``)."""

FUSED_CHUNK_SIZE = 16
"""``fused_chunk_based``'s chunk (``BT = 16``)."""

PARALLEL_BLOCK = 128
"""The query block (``BTL``) of the parallel forward kernels."""

_CASTS: dict[tuple[str, bool], int] = {
    # (form, normalized) -> roundings to the input dtype on a term's longest path (docstring).
    ("parallel", False): 3,
    ("parallel", True): 6,
    ("fused_chunk", False): 5,
    ("fused_chunk", True): 6,
}

KernelFn = Callable[..., tuple[torch.Tensor, Any]]
FlaFn = Callable[..., torch.Tensor]
"""FLA's based and rebased functions return o alone."""


def _reject_unsupported(
    g: torch.Tensor | None,
    initial_state: Any,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
) -> None:
    """Raise `InvalidArgument` for what the Based and ReBased kernels cannot take."""
    if g is not None:
        raise InvalidArgument("FLA's based and rebased kernels take no decay, but got g.")
    if initial_state is not None or output_final_state:
        raise InvalidArgument(
            "FLA's based and rebased kernels take no initial state and return no final state."
        )
    if cu_seqlens is not None:
        raise InvalidArgument("FLA's based and rebased kernels take no cu_seqlens.")


def _based(fla_fn: FlaFn, *, normalize: bool) -> KernelFn:
    """Wrap ``parallel_based`` or ``fused_chunk_based`` for one value of ``use_norm``."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        _reject_unsupported(g, initial_state, output_final_state, cu_seqlens)
        return fla_fn(q, k, v, scale=scale, use_norm=normalize), None

    return fn


def _rebased(fla_fn: FlaFn, *, normalize: bool) -> KernelFn:
    """Wrap ``parallel_rebased`` (eps = 1e-5) for one value of ``use_normalize``."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        _reject_unsupported(g, initial_state, output_final_state, cu_seqlens)
        K = q.shape[-1]
        if scale is None or scale == K**-0.5:
            use_scale = True
        elif scale == 1:
            use_scale = False
        else:
            raise InvalidArgument(
                f"Got scale={scale!r}, but FLA's parallel_rebased takes only K^-1/2 = {K**-0.5!r} "
                "or 1."
            )
        o = fla_fn(q, k, v, eps=REBASED_EPS, use_scale=use_scale, use_normalize=normalize)
        return o, None

    return fn


def _recipe(
    *, form: Form, chunk_size: int, casts: int, eps_in_input_dtype: bool, interpreted: bool
) -> Callable[[torch.dtype], PrecisionRecipe]:
    """Return the recipe, as a function of the input dtype, of one Based or ReBased kernel."""

    def recipe(dtype: torch.dtype) -> PrecisionRecipe:
        name = dtype_name(dtype)
        low = name in ("float16", "bfloat16")
        return PrecisionRecipe(
            form=form,
            chunk_size=chunk_size,
            accumulation="ieee" if interpreted else "mma",
            # Every tl.dot passes allow_tf32=False.
            dot_precision="ieee",
            dots_on_path=2,
            intermediate_dtype="input" if low else None,
            casts_on_path=casts if low else 0,
            division="rn",
            eps_dtype=name if low and eps_in_input_dtype else "float32",
        )

    return recipe


def lifted_kernels(*, interpreted: bool) -> list[Kernel]:
    """Return FLA's Based and ReBased kernels (see the module docstring's table).

    Call after `linattn_verify.linear_attn.adapters.fla`'s loader has selected the Triton
    interpreter where there is no CUDA (`linattn_verify.linear_attn.adapters.fla.fla_kernels` does
    both).

    Args:
        interpreted: Whether FLA's kernels run under the Triton interpreter (IEEE fp32 dots and
            accumulation) rather than compiled.

    Returns:
        The 6 kernels: based parallel and fused_chunk, rebased parallel, each unnormalized and
        normalized.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        based = importlib.import_module("fla.ops.based")
        rebased = importlib.import_module("fla.ops.rebased")
    kernels: list[Kernel] = []
    variants: list[tuple[str, FlaFn, FeatureMap, float, str]] = [
        ("based.parallel", based.parallel_based, "taylor2", BASED_EPS, "parallel"),
        ("based.fused_chunk", based.fused_chunk_based, "taylor2", BASED_EPS, "fused_chunk"),
        ("rebased.parallel", rebased.parallel_rebased, "rebased", REBASED_EPS, "parallel"),
    ]
    for name, fla_fn, feature_map, eps, variant in variants:
        fused = variant == "fused_chunk"
        form: Form = "chunk" if fused else "parallel"
        for normalize in (False, True):
            wrap = _rebased if feature_map == "rebased" else _based
            capabilities = Capabilities(
                normalize=(normalize,),
                eps=eps if normalize else 0.0,
                feature_maps=(feature_map,),
                scales=("default", "one") if feature_map == "rebased" else (),
                initial_state=False,
                final_state=False,
                varlen=False,
                # K <= 16 for fused_chunk, through F = 1 + K + K^2 <= 273; V is not limited.
                max_feature_dim=1 + 16 + 16**2 if fused else None,
                max_head_dim=256 if fused else PARALLEL_MAX_KEY_DIM,
                zero_denominator="ieee" if normalize else "any",
                # The exactness of FLA's other kernels
                # (`linattn_verify.linear_attn.adapters.fla.PROMISES`).
                deterministic=True,
                causal_exact=True,
                layout_exact=True,
            )
            recipe = _recipe(
                form=form,
                chunk_size=FUSED_CHUNK_SIZE if fused else PARALLEL_BLOCK,
                casts=_CASTS[variant, normalize],
                # fused_chunk returns z in fp32: torch adds eps to it in fp32.
                eps_in_input_dtype=not fused,
                interpreted=interpreted,
            )
            kernels.append(
                Kernel(
                    name=f"fla/{name}{'+normalize' if normalize else ''}",
                    fn=wrap(fla_fn, normalize=normalize),
                    capabilities=capabilities,
                    recipe=recipe,
                    form=form,
                )
            )
    return kernels


__all__ = [
    "BASED_EPS",
    "FUSED_CHUNK_MAX_KEY_DIM",
    "FUSED_CHUNK_SIZE",
    "PARALLEL_MAX_KEY_DIM",
    "REBASED_EPS",
    "lifted_kernels",
]
