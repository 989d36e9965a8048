# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""High-precision oracles of the delta rule: double-double (numpy) and mpmath, recurrent form.

Both evaluate the recurrence of `linattn_verify.delta.problem` token by token from the exact
float64 inputs, for small problems (O(T H K V) extended-precision operations, in Python loops
over the tokens), and round every result once to float64.

* `delta_double_double` uses the arithmetic of `linattn_verify.core.dd_arith`: the decay
  exp(g) by `dd_exp` (~2^-100 relative), every product by `dd_mul` (<= 7u² relative), the
  K-term dots S'^T k and S^T q by the pairwise `dd_sum` (~2u² ceil(log2 K)² Σ|x|), the updates
  by `dd_add` (<= 3u²), u = 2^-53. The L2 normalisation needs a square root, which dd_arith
  lacks: `dd_sqrt` here is one Newton step from the float64 root with an exact residual
  (relative error ~u²). The existing dd oracle carries no running error estimate, so neither
  does this one; its error is bounded a priori by the same running bound as the float64
  recurrence with u replaced by the dd operation bounds (see ``tests/delta``).
* `delta_mpmath` works with ``dps`` decimal digits (default 50): exact conversion of the inputs
  to mpf, ``mp.fdot`` for the dots, a local ``mp.workdps`` context; results rounded by
  `linattn_verify.core.dd_arith.mpf_to_float`.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np
import torch

from linattn_verify.core.dd_arith import (
    DD,
    Array,
    dd_add,
    dd_add_d,
    dd_div,
    dd_exp,
    dd_mul,
    dd_mul_d,
    dd_sum,
    fast_two_sum,
    mpf_to_float,
    two_prod,
    two_sum,
)
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import require_delta_problem
from linattn_verify.delta.value_gate import judged
from linattn_verify.errors import InvalidArgument


def dd_sqrt(ah: Array, al: Array) -> DD:
    """Return sqrt(a) for a > 0 in double-double (relative error about u²).

    s = fl(sqrt(ah)) is correct to u; the residual a - s² is formed exactly (TwoProd) and one
    Newton step s + (a - s²) / (2 s) doubles the number of correct bits.
    """
    s = np.sqrt(ah)
    ph, pl = two_prod(s, s)
    rh, _ = dd_add(ah, al, -ph, -pl)
    return fast_two_sum(s, rh / (2.0 * s))


def dd_l2norm(x: Array) -> DD:
    """Return x / sqrt(Σ x² + `L2NORM_EPS`) over the last axis as a dd pair."""
    ph, pl = two_prod(x, x)
    sh, sl = dd_sum(ph, pl, axis=-1)
    sh, sl = dd_add_d(sh, sl, L2NORM_EPS)
    rh, rl = dd_sqrt(sh, sl)
    return dd_div(x, np.zeros_like(x), rh[..., None], rl[..., None])


def _round(x: DD) -> torch.Tensor:
    hi, _ = two_sum(x[0], x[1])
    return torch.from_numpy(np.ascontiguousarray(hi))


@judged
def delta_double_double(problem: DeltaProblem) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the delta rule token by token in double-double arithmetic.

    Args:
        problem: A validated `DeltaProblem` (converted exactly to float64 first).

    Returns:
        ``(o, final_state)`` rounded once to float64 (CPU): o ``[B, T, H, V]``; S_T
        ``[N, H, K, V]``, or `None` unless ``problem.output_final_state``.

    Raises:
        InvalidArgument: if ``problem`` is not a `DeltaProblem`.
    """
    require_delta_problem(problem)
    p = problem.to(torch.float64, "cpu")
    B, T, H, K, V = p.shape
    q, k, v = (x.detach().numpy() for x in (p.q, p.k, p.v))
    beta = p.beta.detach().numpy()
    g = None if p.g is None else p.g.detach().numpy()
    S0_all = None if p.initial_state is None else p.initial_state.detach().numpy()
    o = (np.zeros((B, T, H, V)), np.zeros((B, T, H, V)))
    N = p.num_sequences
    S_T = (np.zeros((N, H, K, V)), np.zeros((N, H, K, V)))
    for n, b, start, end in p.sequences():
        qs, ks = q[b, start:end], k[b, start:end]  # [L, H, K]
        if p.l2norm_qk:
            qd, kd = dd_l2norm(qs), dd_l2norm(ks)
        else:
            qd, kd = (qs, np.zeros_like(qs)), (ks, np.zeros_like(ks))
        qd = dd_mul_d(*qd, p.scale)
        S: DD = (np.zeros((H, K, V)), np.zeros((H, K, V)))
        if S0_all is not None:
            S = (S0_all[n].copy(), np.zeros((H, K, V)))
        decay: DD | None = None
        if g is not None:
            gs = g[b, start:end]  # [L, H] or [L, H, K]
            decay = dd_exp(gs, np.zeros_like(gs))
        for i, t in enumerate(range(start, end)):
            if decay is not None:
                # Row m of the state decays by exp(g_tm); a scalar gate by one exp(g_t).
                rows = (H, K, 1) if p.vector_gate else (H, 1, 1)
                S = dd_mul(*S, decay[0][i].reshape(rows), decay[1][i].reshape(rows))
            kh, kl = kd[0][i][:, :, None], kd[1][i][:, :, None]  # [H, K, 1]
            pred = dd_sum(*dd_mul(*S, kh, kl), axis=1)  # S'^T k: [H, V]
            e = dd_add_d(-pred[0], -pred[1], v[b, t])
            u = dd_mul_d(*e, beta[b, t][:, None])
            S = dd_add(*S, *dd_mul(kh, kl, u[0][:, None, :], u[1][:, None, :]))
            qh, ql = qd[0][i][:, :, None], qd[1][i][:, :, None]
            oh, ol = dd_sum(*dd_mul(*S, qh, ql), axis=1)
            o[0][b, t], o[1][b, t] = oh, ol
        S_T[0][n], S_T[1][n] = S
    return _round(o), (_round(S_T) if p.output_final_state else None)


@judged
def delta_mpmath(
    problem: DeltaProblem, *, dps: int = 50
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the delta rule token by token with mpmath at ``dps`` decimal digits.

    Args:
        problem: A validated `DeltaProblem` (converted exactly to float64 first).
        dps: Decimal digits of working precision, an int >= 15. Default: `50`.

    Returns:
        ``(o, final_state)`` rounded once to float64 (CPU), as `delta_double_double`.

    Raises:
        InvalidArgument: if ``problem`` is not a `DeltaProblem` or ``dps`` is not an int >= 15.
    """
    require_delta_problem(problem)
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < 15:
        raise InvalidArgument(f"Got dps={dps!r}, but dps must be an int >= 15.")
    p = problem.to(torch.float64, "cpu")
    B, T, H, K, V = p.shape
    q, k, v = (x.detach().numpy() for x in (p.q, p.k, p.v))
    beta = p.beta.detach().numpy()
    g = None if p.g is None else p.g.detach().numpy()
    S0_all = None if p.initial_state is None else p.initial_state.detach().numpy()
    o = np.zeros((B, T, H, V))
    S_T = np.zeros((p.num_sequences, H, K, V))
    with mpmath.mp.workdps(dps):
        mpf = mpmath.mpf
        scale = mpf(p.scale)
        for n, b, start, end in p.sequences():
            for h in range(H):
                # State stored by columns: S[j][m], so each dot over K is one fdot.
                S = [[mpf(0)] * K for _ in range(V)]
                if S0_all is not None:
                    S = [[mpf(x) for x in S0_all[n, h, :, j]] for j in range(V)]
                for t in range(start, end):
                    q_t, k_t = _row(q[b, t, h], p.l2norm_qk), _row(k[b, t, h], p.l2norm_qk)
                    if g is not None:
                        d = _decay(g[b, t, h], K)
                        S = [[d[m] * col[m] for m in range(K)] for col in S]
                    b_t = mpf(beta[b, t, h])
                    u = [b_t * (mpf(v[b, t, h, j]) - mpmath.fdot(k_t, S[j])) for j in range(V)]
                    S = [[S[j][m] + k_t[m] * u[j] for m in range(K)] for j in range(V)]
                    sq = [scale * x for x in q_t]
                    o[b, t, h] = [mpf_to_float(mpmath.fdot(sq, S[j])) for j in range(V)]
                S_T[n, h] = [[mpf_to_float(S[j][m]) for j in range(V)] for m in range(K)]
    return torch.from_numpy(o), (torch.from_numpy(S_T) if p.output_final_state else None)


def _row(x: Any, normalize: bool) -> list[Any]:
    """Return the float64 row x as mpf, L2-normalised when asked (current precision)."""
    row = [mpmath.mpf(e) for e in x]
    if not normalize:
        return row
    r = mpmath.sqrt(mpmath.fdot(row, row) + mpmath.mpf(L2NORM_EPS))
    return [e / r for e in row]


def _decay(g: Any, K: int) -> list[Any]:
    """Return exp(g) per key dimension: g is one float64 (scalar gate) or K of them."""
    if np.ndim(g) == 0:
        return [mpmath.exp(mpmath.mpf(float(g)))] * K
    return [mpmath.exp(mpmath.mpf(float(x))) for x in g]


__all__ = ["dd_l2norm", "dd_sqrt", "delta_double_double", "delta_mpmath"]
