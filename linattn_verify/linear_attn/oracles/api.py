# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The public oracle: one entry point over the float64, double-double and mpmath references."""

from __future__ import annotations

from typing import Any, get_args

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.oracles.double_double import double_double_oracle
from linattn_verify.linear_attn.oracles.mpmath_oracle import mpmath_oracle
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.typing import OracleMethod

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None

AUTO_MAX_DD_OPERATIONS = 5e8
"""``method="auto"`` uses double-double while H·Σ_n L_n²·(K+V) stays at or below this."""

AUTO_MAX_DD_SEQ_LEN = 4096
"""``method="auto"`` uses double-double only for sequences of at most this many tokens."""


def dd_operation_count(problem: Problem) -> int:
    """Return H·Σ_n L_n²·(K + V), the parallel-form operation count the ``auto`` rule uses."""
    _, _, H, K, V = problem.shape
    return H * (K + V) * sum((end - start) ** 2 for _, _, start, end in problem.sequences())


def resolve_method(problem: Problem, method: Any) -> OracleMethod:
    """Return the concrete method for ``method``, resolving ``"auto"`` by the rule of `oracle`."""
    choices = get_args(OracleMethod)
    if method not in choices:
        raise InvalidArgument(f"Got method={method!r}, but method must be one of {choices}.")
    if method != "auto":
        return method  # type: ignore[no-any-return]
    longest = max((end - start for _, _, start, end in problem.sequences()), default=0)
    moderate = dd_operation_count(problem) <= AUTO_MAX_DD_OPERATIONS
    return "double-double" if moderate and longest <= AUTO_MAX_DD_SEQ_LEN else "float64"


def oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    normalize: bool = False,
    eps: float = 0.0,
    feature_map: str = "identity",
    initial_state: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    feature_weights: torch.Tensor | None = None,
    query_feature_map: str | None = None,
    gv: torch.Tensor | None = None,
    method: str = "auto",
) -> tuple[torch.Tensor, State]:
    """Compute linear attention to high precision, from the inputs exactly as given.

    The inputs, of any float dtype, are converted exactly to float64, so the oracle sees the
    kernel's actual rounded inputs (docs/error-model.md §0.1). Each result is rounded once to
    float64.

    Methods:
    * ``"float64"``: the torch float64 parallel reference (`parallel_reference`), on the inputs'
      device; error about 2^-53 times the magnitude M (float64 rounding, not correctly rounded).
    * ``"double-double"``: numpy double-double arithmetic on the CPU (about 2^-100·M, then one
      rounding, so the result is the correctly rounded value except within ~2^-47 ulp of a tie
      or under cancellation beyond 2^50).
    * ``"mpmath"``: mpmath at 50 decimal digits; slow (seconds at T = 256, D = 32).
    * ``"auto"``: double-double when the problem is moderate, that is
      H·Σ_n L_n²·(K + V) <= 5e8 (`AUTO_MAX_DD_OPERATIONS`; L_n the sequence lengths, so
      B·H·T²·(K + V) without ``cu_seqlens``) and every sequence has L_n <= 4096 tokens; float64
      otherwise.

    Args:
        q: Queries ``[B, T, H, K]``.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay, <= 0: ``[B, T, H]``, or ``[B, T, H, K]`` for a vector gate (one
            decay per key dimension; every method takes it). Default: `None`.
        scale: Scale applied to φ(q); `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)^T z_t + eps (a zero denominator gives 0). Default: `False`.
        eps: Denominator offset, used exactly as given. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"``, ``"relu"``, ``"taylor2"``, ``"rebased"`` or
            ``"favor+"`` (`linattn_verify.linear_attn.feature_maps`). Default: `"identity"`.
        initial_state: S_0 ``[N, H, F, V]``, or ``(S_0, z_0)`` when normalized (F = K for an
            elementwise map). Default: `None`.
        output_final_state: Also return S_T (and z_T). Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1). Default: `None`.
        feature_weights: favor+'s projection W ``[m, K]``. Default: `None`.
        query_feature_map: The queries' own map (softmax, say, with exp on keys), or `None` for
            ``feature_map`` on both. Default: `None`.
        gv: A value gate ``[B, T, H, V]`` (natural log, <= 0; unnormalized only), judged as
            H·V single-column problems (`linattn_verify.linear_attn.value_gate`). Default: `None`.
        method: ``"auto"``, ``"float64"``, ``"double-double"`` or ``"mpmath"``.
            Default: `"auto"`.

    Returns:
        ``(o, final_state)`` as float64 tensors on the device of ``q``: o ``[B, T, H, V]``;
        final_state `None` unless ``output_final_state``, else S_T ``[N, H, K, V]``, or
        ``(S_T, z_T)`` with z_T ``[N, H, K]`` when normalized.

    Raises:
        InvalidArgument: naming the malformed argument (``method`` included).
    """
    problem = validate_problem(
        q,
        k,
        v,
        g,
        scale=scale,
        normalize=normalize,
        eps=eps,
        feature_map=feature_map,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        feature_weights=feature_weights,
        query_feature_map=query_feature_map,
        gv=gv,
    )
    chosen = resolve_method(problem, method)
    device = problem.q.device
    if chosen == "float64":
        o, state = parallel_reference(problem.to(torch.float64))
    elif chosen == "double-double":
        o, state = double_double_oracle(problem)
    else:
        o, state = mpmath_oracle(problem)
    o = o.to(device)
    if isinstance(state, tuple):
        return o, (state[0].to(device), state[1].to(device))
    return o, None if state is None else state.to(device)


__all__ = [
    "AUTO_MAX_DD_OPERATIONS",
    "AUTO_MAX_DD_SEQ_LEN",
    "dd_operation_count",
    "oracle",
    "resolve_method",
]
