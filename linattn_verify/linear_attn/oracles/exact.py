# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The exact oracle: rational arithmetic in Python integers, for rational problems.

Every float64 is an integer times a power of two, and so is the scale s (a float64) and eps.
With the identity or relu feature map and no decay, the numerator s φ(q_t)^T S_t, the
denominator s φ(q_t)^T z_t + eps and the final state are sums of products of such numbers: each
tensor is held as numpy object arrays of Python ints with one common binary exponent, and every
sum and product is exact. The only rounding is the final one: a normalized output is the exact
quotient as a `fractions.Fraction`, rounded correctly to float64 (``int / int`` true division
rounds correctly), and every other result is rounded once from its exact value.

Decay (exp) and elu1 (exp) are irrational and rejected. A decay tensor whose entries are all
exactly zero is no decay (exp(0) = 1) and is accepted, a scalar ``[B, T, H]`` or a vector gate
``[B, T, H, K]`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged

ObjectArray = npt.NDArray[np.object_]
# Tokens per block of the recurrent (cumulative-state) form; bounds the object-array memory.
_BLOCK_TOKENS = 64


@dataclass(frozen=True)
class ExactForward:
    """The exact forward result as numpy object arrays of `fractions.Fraction`.

    Attributes:
        o: The output ``[B, T, H, V]``.
        final_state: S_T ``[N, H, K, V]``.
        final_key_sum: z_T ``[N, H, K]`` (normalized problems) or `None`.
    """

    o: ObjectArray
    final_state: ObjectArray
    final_key_sum: ObjectArray | None


def to_dyadic(x: npt.NDArray[np.float64]) -> tuple[ObjectArray, int]:
    """Return ``(ints, e)`` with x == ints · 2^e exactly; ints a same-shaped object array."""
    x = np.asarray(x, dtype=np.float64)
    mantissa, exponent = np.frexp(x)
    # frexp gives |m| in [0.5, 1) with at most 53 significant bits, so m·2^53 is an integer.
    m = (mantissa * 2.0**53).astype(np.int64).reshape(-1)
    e = (exponent.astype(np.int64) - 53).reshape(-1)
    nonzero = m != 0
    common = int(e[nonzero].min()) if nonzero.any() else 0
    # Zeros carry frexp's exponent 0; give them the common one so every shift is >= 0.
    e = np.where(nonzero, e, common)
    ints = np.empty(m.shape, dtype=object)
    ints[:] = [int(a) << int(b - common) for a, b in zip(m, e, strict=True)]
    return ints.reshape(x.shape), common


def _shift(ints: Any, by: int) -> Any:
    """Multiply an int or int object array by 2^by (by >= 0)."""
    return ints * (1 << by)


def _fraction(num: int, exponent: int) -> Fraction:
    return Fraction(num << exponent) if exponent >= 0 else Fraction(num, 1 << -exponent)


def _check(problem: Problem) -> None:
    for side in ("query", "key"):
        feature_map = problem.map_of(query=side == "query")
        if feature_map not in ("identity", "relu"):
            raise InvalidArgument(
                f"Got feature_map={feature_map!r} ({side}s), but the exact oracle needs a "
                "rational feature map ('identity' or 'relu'); use method='mpmath' or "
                "'double-double'."
            )
    if problem.g is not None and bool((problem.g != 0).any()):
        raise InvalidArgument(
            "Got a nonzero decay g, but the exact oracle needs g=None (exp is irrational); use "
            "method='mpmath' or 'double-double'."
        )


def exact_forward(problem: Problem) -> ExactForward:
    """Evaluate a rational problem exactly.

    Args:
        problem: A validated problem with feature map identity or relu and no (or all-zero)
            decay.

    Returns:
        The `ExactForward` result; the final state is always computed.

    Raises:
        InvalidArgument: for elu1 or a nonzero decay.
    """
    _check(problem)
    p = problem.to(torch.float64, "cpu")
    B, T, H, K, V = p.shape
    q = p.q.numpy()
    k = p.k.numpy()
    if p.query_map == "relu":
        q = np.maximum(q, 0.0)
    if p.feature_map == "relu":
        k = np.maximum(k, 0.0)
    Qi, eq = to_dyadic(q)
    Ki, ek = to_dyadic(k)
    Vi, ev = to_dyadic(p.v.numpy())
    if p.normalize:
        # The ones column (for the key sum) needs an exponent <= 0 to be an integer.
        Vi, ev = _shift(Vi, ev - min(ev, 0)), min(ev, 0)
        ones = np.full((B, T, H, 1), 1 << -ev, dtype=object)
        Vi = np.concatenate([Vi, ones], axis=-1)
    W = Vi.shape[-1]
    e_kv = ek + ev
    S0i, es = np.zeros((p.num_sequences, H, K, W), dtype=object), e_kv
    if p.initial_state is not None:
        S0 = p.initial_state.numpy()
        if p.initial_key_sum is not None:
            S0 = np.concatenate([S0, p.initial_key_sum.numpy()[..., None]], axis=-1)
        S0i, es = to_dyadic(S0)
    # The state S_t = S_0 + Σ k_j v_j^T is held with one exponent.
    e_state = min(e_kv, es)
    S0i = _shift(S0i, es - e_state)
    kv_shift = 1 << (e_kv - e_state)
    si, e_scale = to_dyadic(np.array(p.scale))
    scale_int = int(si.reshape(-1)[0])
    e_numer = e_scale + eq + e_state
    ei, e_eps = to_dyadic(np.array(p.eps))
    eps_int = int(ei.reshape(-1)[0])

    o = np.empty((B, T, H, V), dtype=object)
    S_T = np.empty((p.num_sequences, H, K, V), dtype=object)
    z_T = np.empty((p.num_sequences, H, K), dtype=object) if p.normalize else None
    for n, b, start, end in p.sequences():
        Qs = Qi[b, start:end].transpose(1, 0, 2)  # [H, L, K]
        Ks = Ki[b, start:end].transpose(1, 0, 2)
        Vs = Vi[b, start:end].transpose(1, 0, 2)  # [H, L, W]
        numer, state = _sequence(Qs, Ks, Vs, S0i[n], kv_shift)
        numer = numer * scale_int  # exponent e_numer
        for h in range(H):
            for t in range(end - start):
                row = numer[h, t]
                if p.normalize:
                    o[b, start + t, h] = _quotient(
                        row[:V], row[V], e_numer, eps_int, e_eps, clamp=p.clamp
                    )
                else:
                    o[b, start + t, h] = [_fraction(int(x), e_numer) for x in row]
            for m in range(K):
                S_T[n, h, m] = [_fraction(int(x), e_state) for x in state[h, m, :V]]
                if z_T is not None:
                    z_T[n, h, m] = _fraction(int(state[h, m, V]), e_state)
    return ExactForward(o=o, final_state=S_T, final_key_sum=z_T)


def _quotient(
    numer: ObjectArray, denom: int, e_numer: int, eps_int: int, e_eps: int, *, clamp: bool
) -> list[Fraction]:
    """Return the exact o = N / (Z + eps) (N / max(Z, eps): ``clamp``), or 0 where that is 0."""
    # Align Z (exponent e_numer) and eps (exponent e_eps) to one exponent to add them exactly.
    e = min(e_numer, e_eps)
    Z = int(denom) << (e_numer - e)
    eps = eps_int << (e_eps - e)
    Z = max(Z, eps) if clamp else Z + eps
    if Z == 0:
        return [Fraction(0)] * len(numer)
    # N / Z with N = n·2^e_numer, Z = Z·2^e: the powers of two leave a factor 2^(e_numer - e).
    factor = e_numer - e
    return [Fraction(int(x) << factor, Z) for x in numer]


def _sequence(
    Q: ObjectArray, K: ObjectArray, V: ObjectArray, S0: ObjectArray, kv_shift: int
) -> tuple[ObjectArray, ObjectArray]:
    """Return the unscaled numerator ints ``[H, L, W]`` and S_T ints ``[H, K, W]``.

    Picks the parallel form (tril(Q K^T) V, about L^2 (K + W) int operations) or the cumulative
    state form (about 2 L K W) by operation count.
    """
    H, L, D = Q.shape
    W = V.shape[-1]
    S = S0.copy()
    if L == 0:
        return np.zeros((H, 0, W), dtype=object), S
    if L * (D + W) <= 2 * D * W:
        A = np.matmul(Q, K.transpose(0, 2, 1))
        A = np.where(np.tril(np.ones((L, L), dtype=bool)), A, 0)
        numer = np.matmul(A, V) * kv_shift + np.matmul(Q, S0)
        S = S0 + np.matmul(K.transpose(0, 2, 1), V) * kv_shift
        return numer, S
    numer = np.empty((H, L, W), dtype=object)
    for t0 in range(0, L, _BLOCK_TOKENS):
        t1 = min(L, t0 + _BLOCK_TOKENS)
        outer = K[:, t0:t1, :, None] * V[:, t0:t1, None, :] * kv_shift  # [H, b, D, W]
        states = np.cumsum(outer, axis=1) + S[:, None]
        numer[:, t0:t1] = (Q[:, t0:t1, :, None] * states).sum(axis=2)
        S = states[:, -1]
    return numer, S


@judged
def exact_oracle(
    problem: Problem,
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None]:
    """Evaluate a rational problem exactly and round every result once (correctly) to float64.

    Args:
        problem: A validated problem with feature map identity or relu and no decay.

    Returns:
        ``(o, final_state)`` as float64 CPU tensors: o ``[B, T, H, V]``; final_state `None`
        (unless ``problem.output_final_state``), S_T ``[N, H, K, V]``, or ``(S_T, z_T)``.

    Raises:
        InvalidArgument: for elu1 or a nonzero decay.
    """
    result = exact_forward(problem)
    o = _to_tensor(result.o)
    if not problem.output_final_state:
        return o, None
    S = _to_tensor(result.final_state)
    if result.final_key_sum is None:
        return o, S
    return o, (S, _to_tensor(result.final_key_sum))


def _to_tensor(x: ObjectArray) -> torch.Tensor:
    # Fraction.__float__ is numerator / denominator, a correctly rounded int true division.
    flat = [float(f) for f in x.reshape(-1)]
    return torch.tensor(flat, dtype=torch.float64).reshape(x.shape)


__all__ = ["ExactForward", "exact_forward", "exact_oracle", "to_dyadic"]
