# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Linear attention with a lifted feature map: lift q and k in Triton, then run a form on φ.

The chunked and recurrent forms keep an F x V state whatever the map, so fusing a lifted map
into them saves nothing: `lifted_attention` applies it in its own verified kernel
(`linattn_kernels.lifted.lift`) and hands the fp32 features to the form with the identity map.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from linattn_kernels.common.args import MAX_HEAD_DIM, prepare
from linattn_kernels.common.feature_maps import SCORE_CODES
from linattn_kernels.common.results import State
from linattn_kernels.lifted.lift import LIFTED_MAPS, feature_count, lift_features

SCORE_MAPS = tuple(SCORE_CODES)
"""The maps whose scale multiplies the query before φ (Based, ReBased): weight κ(s q·k)."""


def _as_fp32(state: Any) -> Any:
    """An initial state (None, S, or (S, z)) in fp32, differentiably."""
    if state is None:
        return None
    if isinstance(state, tuple | list):
        return tuple(x.float() if isinstance(x, torch.Tensor) else x for x in state)
    return state.float() if isinstance(state, torch.Tensor) else state


def check_lifted_gate(g: object, feature_map: str) -> None:
    """Refuse a vector gate g ``[B, T, H, K]`` with a lifted map (it has no key dims to decay)."""
    if isinstance(g, torch.Tensor) and g.ndim == 4:
        raise ValueError(
            f"Got a vector gate g of shape {tuple(g.shape)} with feature_map={feature_map!r}: "
            "it decays key dimensions, which a lifted map does not keep; pass a scalar gate g "
            "[B, T, H]."
        )


def refuse_weights(feature_map: str, feature_weights: object) -> None:
    """Refuse ``feature_weights`` for an elementwise map (only favor+ takes a projection W)."""
    if feature_weights is not None:
        raise ValueError(
            f"Got feature_weights with feature_map={feature_map!r}; only 'favor+' takes a "
            "projection W."
        )


def _check_weights(
    feature_map: str, feature_weights: object, q: torch.Tensor
) -> torch.Tensor | None:
    """Return W ``[m, K]`` for favor+ (required, on q's device); refuse it for the others."""
    K = q.shape[-1]
    if feature_map != "favor+":
        refuse_weights(feature_map, feature_weights)
        return None
    if not isinstance(feature_weights, torch.Tensor):
        raise ValueError(
            f"feature_map='favor+' needs feature_weights: the projection W [m, K={K}], but got "
            f"{type(feature_weights).__name__}."
        )
    W = feature_weights
    if W.ndim != 2 or W.shape[1] != K or W.shape[0] < 1:
        raise ValueError(
            f"Expected feature_weights of shape [m >= 1, K={K}] but got {tuple(W.shape)}."
        )
    if not W.dtype.is_floating_point or W.device != q.device:
        raise ValueError(
            f"Expected feature_weights to be a floating tensor on {q.device} (as q) but got "
            f"{W.dtype} on {W.device}."
        )
    return W


def lifted_attention(
    form_fn: Callable[..., tuple[torch.Tensor, State | None]],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    *,
    scale: float | None,
    normalize: bool,
    eps: float,
    feature_map: str,
    feature_weights: torch.Tensor | None,
    initial_state: State | None,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
    **form_kwargs: Any,
) -> tuple[torch.Tensor, State | None]:
    """Run ``form_fn`` (a public form function) on lifted features; differentiable throughout.

    q' = φ(p q) with p = s for taylor2 and rebased (else 1; favor+ queries stabilised when
    normalized with eps = 0), k' = φ(k), both fp32 ``[B, T, H, F]``; v, g and the initial state
    go in as fp32, so the form runs its fp32 path, with scale 1 for the score maps (s is
    already inside φ) and s for favor+. o is rounded once, on the host, to q's dtype.

    Args:
        form_fn: ``chunked_linear_attention`` or ``recurrent_linear_attention``.
        q: Queries ``[B, T, H, K]``, float32, float16 or bfloat16.
        k: Keys ``[B, T, H, K]``, q's dtype.
        v: Values ``[B, T, H, V]``, q's dtype.
        g: A scalar log decay ``[B, T, H]`` or `None` (a vector gate is refused).
        scale: s; `None` means K^-1/2 of the input K (not F).
        normalize: Divide by the key-sum denominator.
        eps: Added in fp32 to the denominator; 0 unless normalized.
        feature_map: ``"taylor2"``, ``"rebased"`` or ``"favor+"``.
        feature_weights: favor+'s projection W ``[m, K]`` on q's device; `None` otherwise.
        initial_state: S_0 ``[N, H, F, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, F]``.
        output_final_state: Also return the fp32 final state.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1), or `None`.
        **form_kwargs: Passed on to ``form_fn`` (e.g. ``chunk_size``).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in q's dtype; final_state `None`, S_T
        ``[N, H, F, V]`` fp32, or ``(S_T, z_T)`` when normalized.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if feature_map not in LIFTED_MAPS:
        raise ValueError(
            f"Got feature_map={feature_map!r}, but lifted_attention takes one of {LIFTED_MAPS}."
        )
    check_lifted_gate(g, feature_map)
    # Everything but the state, whose rows are F, is checked on the raw tensors (so messages
    # quote the caller's shapes); the form checks the state against F.
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map="identity",
        initial_state=None, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )  # fmt: skip
    W = _check_weights(feature_map, feature_weights, q)
    F = feature_count(feature_map, x.K, 0 if W is None else W.shape[0])
    if F > MAX_HEAD_DIM:
        named = "feature_weights" if feature_map == "favor+" else "K"
        raise ValueError(
            f"Got feature_map={feature_map!r} with K={x.K}: F={F} features, but the forms "
            f"hold at most {MAX_HEAD_DIM} state rows; reduce {named}."
        )
    score = feature_map in SCORE_MAPS
    stabilise = feature_map == "favor+" and x.normalize and x.eps == 0.0
    q_f = lift_features(
        q, feature_map, prescale=x.scale if score else 1.0, weights=W, stabilise=stabilise
    )
    k_f = lift_features(k, feature_map, weights=W)
    o, final = form_fn(
        q_f, k_f, v.float(), None if g is None else g.float(),
        scale=1.0 if score else x.scale, normalize=normalize, eps=eps, feature_map="identity",
        initial_state=_as_fp32(initial_state), output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, **form_kwargs,
    )  # fmt: skip
    # One rounding of the fp32 output, by torch (the interpreter's 16-bit stores truncate).
    return o.to(q.dtype), final


__all__ = ["SCORE_MAPS", "check_lifted_gate", "lifted_attention", "refuse_weights"]
