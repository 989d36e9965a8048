# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The mpmath (tier-2) oracle: the function evaluated with ``dps`` decimal digits.

Inputs are converted once to mpf (exactly: every float64 is an mpf), dot products go through
``mp.fdot`` (one call, near-exact internal accumulation, one rounding), and the precision is set
with a local ``mp.workdps`` context, so the caller's global mpmath precision is untouched.
Two forms are implemented, and the cheaper one is used per sequence (docs/error-model.md §6.1):
the parallel form, O(T^2 (K + V)) mpf operations, and the recurrent form, O(T K V).

The decay weights are exp(G_t - G_j). The parallel form obtains them as exp(G_t)·exp(-G_j):
mpf exponents are unbounded, so the factored form neither overflows nor loses relative accuracy
here (each factor is correct to 2^-prec relative), unlike in float arithmetic. A vector gate
(g ``[B, T, H, K]``) is handled the same way per key dimension m: the parallel form folds
exp(G_tm) into φ(q_t)_m and exp(-G_jm) into φ(k_j)_m, and the recurrent form scales row m of the
state by exp(g_tm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import mpmath
import numpy as np
import numpy.typing as npt
import torch

from linattn_verify.core.dd_arith import mpf_to_float
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import judged
from linattn_verify.typing import LIFTED_MAPS

ObjectArray = npt.NDArray[np.object_]
MPForm = Literal["auto", "parallel", "recurrent"]


@dataclass(frozen=True)
class MPForward:
    """The mpmath forward result as numpy object arrays of ``mpmath.mpf``.

    Attributes:
        o: The output ``[B, T, H, V]``.
        final_state: S_T ``[N, H, K, V]``.
        final_key_sum: z_T ``[N, H, K]`` (normalized problems) or `None`.
        dps: The decimal precision the values were computed with.
    """

    o: ObjectArray
    final_state: ObjectArray
    final_key_sum: ObjectArray | None
    dps: int


def choose_form(L: int, K: int, W: int) -> Literal["parallel", "recurrent"]:
    """Return the cheaper form for a sequence of length L, K features and W value columns.

    Costs in microseconds fitted on this machine's pure-Python mpmath (dps 50): about 0.4 per
    fdot term plus 2 per fdot call, and 3 per state element update.
    """
    parallel = L * (L + 1) / 2 * (0.4 * K + 3) + L * W * (0.2 * L + 2)
    recurrent = L * K * W * 3 + L * W * (0.4 * K + 2)
    return "parallel" if parallel <= recurrent else "recurrent"


def mpmath_forward(problem: Problem, *, dps: int = 50, form: MPForm = "auto") -> MPForward:
    """Evaluate the problem with mpmath at ``dps`` decimal digits.

    Args:
        problem: A validated problem (converted exactly to float64 first).
        dps: Decimal digits of working precision, >= 15. Default: `50`.
        form: ``"parallel"``, ``"recurrent"`` or ``"auto"`` (the cheaper, per sequence).
            Default: `"auto"`.

    Returns:
        The `MPForward` result; the final state is always computed.

    Raises:
        InvalidArgument: for a ``dps`` that is not an int >= 15 or an unknown ``form``.
    """
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < 15:
        raise InvalidArgument(f"Got dps={dps!r}, but dps must be an int >= 15.")
    if form not in ("auto", "parallel", "recurrent"):
        raise InvalidArgument(
            f"Got form={form!r}, but form must be 'auto', 'parallel' or 'recurrent'."
        )
    p = problem.to(torch.float64, "cpu")
    B, T, H, _, V = p.shape
    K = p.feature_dim
    W = V + 1 if p.normalize else V
    q, k, v = p.q.numpy(), p.k.numpy(), p.v.numpy()
    g = None if p.g is None else p.g.numpy()
    S0_all = None if p.initial_state is None else p.initial_state.numpy()
    z0_all = None if p.initial_key_sum is None else p.initial_key_sum.numpy()
    o = np.empty((B, T, H, V), dtype=object)
    S_T = np.empty((p.num_sequences, H, K, V), dtype=object)
    z_T = np.empty((p.num_sequences, H, K), dtype=object) if p.normalize else None
    with mpmath.mp.workdps(dps):
        mpf = mpmath.mpf
        scale, eps = mpf(p.outer_scale), mpf(p.eps)
        for n, b, start, end in p.sequences():
            L = end - start
            chosen = choose_form(L, K, W) if form == "auto" else form
            for h in range(H):
                qs = [_features(q[b, t, h], p, query=True) for t in range(start, end)]
                ks = [_features(k[b, t, h], p, query=False) for t in range(start, end)]
                vs = [[mpf(x) for x in v[b, t, h]] for t in range(start, end)]
                if p.normalize:
                    vs = [[*row, mpf(1)] for row in vs]
                # One mpf per token, or per token a list of K (a vector gate).
                gs: Any = None
                if g is not None and p.vector_gate:
                    gs = [[mpf(x) for x in row] for row in g[b, start:end, h]]
                elif g is not None:
                    gs = [mpf(x) for x in g[b, start:end, h]]
                S0 = [[mpf(0)] * W for _ in range(K)]
                if S0_all is not None:
                    S0 = [[mpf(x) for x in row] for row in S0_all[n, h]]
                    if z0_all is not None:
                        S0 = [[*row, mpf(z0_all[n, h, m])] for m, row in enumerate(S0)]
                if p.vector_gate:
                    run = _parallel_vector if chosen == "parallel" else _recurrent_vector
                else:
                    run = _parallel if chosen == "parallel" else _recurrent
                numer, state = run(qs, ks, vs, gs, S0)
                for t in range(L):
                    row = [scale * x for x in numer[t]]
                    if p.normalize:
                        Z = max(row[V], eps) if p.clamp else row[V] + eps
                        row = [mpf(0) if Z == 0 else x / Z for x in row[:V]]
                    o[b, start + t, h, :] = row[:V]
                for m in range(K):
                    S_T[n, h, m, :] = state[m][:V]
                    if z_T is not None:
                        z_T[n, h, m] = state[m][V]
    return MPForward(o=o, final_state=S_T, final_key_sum=z_T, dps=dps)


def _features(x: npt.NDArray[np.float64], p: Problem, *, query: bool) -> list[Any]:
    """φ of one query or key row as the problem defines it (`Problem.query_features`)."""
    feature_map = p.map_of(query=query)
    if feature_map not in LIFTED_MAPS:
        return _feature_row(x, feature_map)
    mpf = mpmath.mpf
    if feature_map == "softmax":
        exps = [mpmath.exp(mpf(e)) for e in x]
        total = mpmath.fsum(exps)
        return [e / total for e in exps]
    if p.feature_map in ("taylor2", "rebased"):
        xs = [mpf(e) * (mpf(p.query_prescale) if query else 1) for e in x]
        quad = [a * b for a in xs for b in xs]
        if p.feature_map == "rebased":
            return quad
        half = 1 / mpmath.sqrt(2)
        return [mpf(1), *xs, *(e * half for e in quad)]
    assert p.feature_weights is not None
    xs = [mpf(e) for e in x]
    norm2 = mpmath.fdot(xs, xs)
    ys = [mpmath.fdot([mpf(w) for w in row], xs) - norm2 / 2 for row in p.feature_weights.numpy()]
    if query and p.stabilised_queries:
        top = max(ys)
        ys = [y - top for y in ys]
    root = mpmath.sqrt(len(ys))
    return [mpmath.exp(y) / root for y in ys]


def _feature_row(x: npt.NDArray[np.float64], feature_map: str) -> list[Any]:
    mpf = mpmath.mpf
    if feature_map == "identity":
        return [mpf(e) for e in x]
    if feature_map == "relu":
        return [mpf(e) if e > 0 else mpf(0) for e in x]
    if feature_map == "exp":
        return [mpmath.exp(mpf(e)) for e in x]
    return [mpf(e) + 1 if e > 0 else mpmath.exp(mpf(e)) for e in x]


def _parallel(
    qs: list[list[Any]],
    ks: list[list[Any]],
    vs: list[list[Any]],
    gs: list[Any] | None,
    S0: list[list[Any]],
) -> tuple[list[list[Any]], list[list[Any]]]:
    """Return the unscaled numerator rows ``[L][W]`` and S_T ``[K][W]`` by the parallel form."""
    L, K, W = len(qs), len(S0), len(S0[0])
    fdot = mpmath.fdot
    if gs is None:
        E = Einv = [mpmath.mpf(1)] * (L + 1)
    else:
        # E[t] = exp(G_t), with E[0] = exp(G_0) = 1 before the first token.
        G = [mpmath.mpf(0)]
        for x in gs:
            G.append(G[-1] + x)
        E = [mpmath.exp(x) for x in G]
        Einv = [mpmath.exp(-x) for x in G]
    columns = [[row[i] for row in vs] for i in range(W)]
    S0_columns = [[S0[m][i] for m in range(K)] for i in range(W)]
    has_state = any(x != 0 for row in S0 for x in row)
    numer = []
    for t in range(L):
        P = [fdot(qs[t], ks[j]) * (E[t + 1] * Einv[j + 1]) for j in range(t + 1)]
        row = [fdot(P, columns[i][: t + 1]) for i in range(W)]
        if has_state:
            row = [row[i] + E[t + 1] * fdot(qs[t], S0_columns[i]) for i in range(W)]
        numer.append(row)
    weighted = [[ks[j][m] * (E[L] * Einv[j + 1]) for j in range(L)] for m in range(K)]
    state = [[fdot(weighted[m], columns[i]) + E[L] * S0[m][i] for i in range(W)] for m in range(K)]
    return numer, state


def _recurrent(
    qs: list[list[Any]],
    ks: list[list[Any]],
    vs: list[list[Any]],
    gs: list[Any] | None,
    S0: list[list[Any]],
) -> tuple[list[list[Any]], list[list[Any]]]:
    """Return the unscaled numerator rows ``[L][W]`` and S_T ``[K][W]`` token by token."""
    K, W = len(S0), len(S0[0])
    fdot = mpmath.fdot
    # Stored by columns so each output element is one fdot over the K features.
    S = [[S0[m][i] for m in range(K)] for i in range(W)]
    numer = []
    for t in range(len(qs)):
        k_t, v_t = ks[t], vs[t]
        if gs is None:
            S = [[S[i][m] + k_t[m] * v_t[i] for m in range(K)] for i in range(W)]
        else:
            a = mpmath.exp(gs[t])
            S = [[fdot((a, k_t[m]), (S[i][m], v_t[i])) for m in range(K)] for i in range(W)]
        numer.append([fdot(qs[t], S[i]) for i in range(W)])
    return numer, [[S[i][m] for i in range(W)] for m in range(K)]


def _parallel_vector(
    qs: list[list[Any]],
    ks: list[list[Any]],
    vs: list[list[Any]],
    gs: list[list[Any]],
    S0: list[list[Any]],
) -> tuple[list[list[Any]], list[list[Any]]]:
    """`_parallel` for a vector gate ``gs[t][m]``: the decays taken per key dimension."""
    L, K, W = len(qs), len(S0), len(S0[0])
    fdot, exp = mpmath.fdot, mpmath.exp
    G = [[mpmath.mpf(0)] * K]
    for row in gs:
        G.append([G[-1][m] + row[m] for m in range(K)])
    # φ(q_t) ⊙ exp(G_t) and φ(k_j) ⊙ exp(-G_j): P_tj = Σ_m of their products.
    qE = [[qs[t][m] * exp(G[t + 1][m]) for m in range(K)] for t in range(L)]
    kE = [[ks[j][m] * exp(-G[j + 1][m]) for m in range(K)] for j in range(L)]
    E_end = [exp(x) for x in G[L]]
    columns = [[row[i] for row in vs] for i in range(W)]
    S0_columns = [[S0[m][i] for m in range(K)] for i in range(W)]
    has_state = any(x != 0 for row in S0 for x in row)
    numer = []
    for t in range(L):
        P = [fdot(qE[t], kE[j]) for j in range(t + 1)]
        row = [fdot(P, columns[i][: t + 1]) for i in range(W)]
        if has_state:
            row = [row[i] + fdot(qE[t], S0_columns[i]) for i in range(W)]
        numer.append(row)
    weighted = [[kE[j][m] * E_end[m] for j in range(L)] for m in range(K)]
    state = [
        [fdot(weighted[m], columns[i]) + E_end[m] * S0[m][i] for i in range(W)] for m in range(K)
    ]
    return numer, state


def _recurrent_vector(
    qs: list[list[Any]],
    ks: list[list[Any]],
    vs: list[list[Any]],
    gs: list[list[Any]],
    S0: list[list[Any]],
) -> tuple[list[list[Any]], list[list[Any]]]:
    """`_recurrent` for a vector gate ``gs[t][m]``: row m of the state decays by exp(g_tm)."""
    K, W = len(S0), len(S0[0])
    fdot = mpmath.fdot
    S = [[S0[m][i] for m in range(K)] for i in range(W)]
    numer = []
    for t in range(len(qs)):
        k_t, v_t = ks[t], vs[t]
        a = [mpmath.exp(x) for x in gs[t]]
        S = [[fdot((a[m], k_t[m]), (S[i][m], v_t[i])) for m in range(K)] for i in range(W)]
        numer.append([fdot(qs[t], S[i]) for i in range(W)])
    return numer, [[S[i][m] for i in range(W)] for m in range(K)]


@judged
def mpmath_oracle(
    problem: Problem, *, dps: int = 50, form: MPForm = "auto"
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None]:
    """Evaluate the problem with mpmath and round every result once to float64.

    Args:
        problem: A validated problem.
        dps: See `mpmath_forward`. Default: `50`.
        form: See `mpmath_forward`. Default: `"auto"`.

    Returns:
        ``(o, final_state)`` as float64 CPU tensors: o ``[B, T, H, V]``; final_state `None`
        (unless ``problem.output_final_state``), S_T ``[N, H, K, V]``, or ``(S_T, z_T)``.
    """
    result = mpmath_forward(problem, dps=dps, form=form)
    o = _to_tensor(result.o)
    if not problem.output_final_state:
        return o, None
    S = _to_tensor(result.final_state)
    if result.final_key_sum is None:
        return o, S
    return o, (S, _to_tensor(result.final_key_sum))


def _to_tensor(x: ObjectArray) -> torch.Tensor:
    flat = [mpf_to_float(e) for e in x.reshape(-1)]
    return torch.tensor(flat, dtype=torch.float64).reshape(x.shape)


__all__ = ["MPForward", "choose_form", "mpmath_forward", "mpmath_oracle"]
