# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk (WY / UT) form's exact backward, evaluated exactly and on magnitudes.

`chunk_backward` evaluates one chunk's gradient sums term by term (the formulas are in
`linattn_verify.delta.chunk_gradient_bounds`, whose bound is built on them): with exact inputs it
reproduces float64 autograd of the oracle; with every input replaced by its absolute value, every
subtraction by an addition and T by M = |T| (I + |L - I|) |T|, it gives the magnitudes, and
`jvp` its first-order change along the errors of its primitives.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import jvp as _torch_jvp

from linattn_verify import interpreter
from linattn_verify.delta.bounds import InverseKind, inverse_magnitude
from linattn_verify.delta.reference import (
    DeltaSequence,
    forward_substitution_inverse,
    pair_weights,
)

PRIMITIVES = ("q", "k", "wqk", "wkk", "eG", "eGc", "ekout", "T", "S", "Lam")
"""The chunk's primitives that carry an error (in `chunk_backward`'s argument order)."""

STORED = ("q_in", "k_in", "Kt", "Aqk", "v", "W", "Vn", "Sn", "dVn", "Y", "dL", "SY")
"""Additive slots (zero in value) at the nodes a recipe may store in ``intermediate_dtype``:
their tangents are the store's error u_I |node| + φ (φ: half the smallest subnormal)."""


@dataclass(frozen=True)
class ChunkInputs:
    """One chunk's exact primitives (float64, heads first)."""

    q: torch.Tensor  # [H, c, K] normalised, unscaled
    k: torch.Tensor  # [H, c, K]
    wqk: torch.Tensor  # [H, c, c, K] e^{G_i - G_j}, j <= i, else 0 ([H, c, c, 1]: one decay)
    wkk: torch.Tensor  # [H, c, c, K] strict
    eG: torch.Tensor  # [H, c, K] ([H, c, 1]: one decay for every key dimension)
    eGc: torch.Tensor  # [H, K]
    ekout: torch.Tensor  # [H, c, K] e^{G_c - G}
    T: torch.Tensor  # [H, c, c]
    S: torch.Tensor  # [H, K, V] the state entering the chunk
    Lam: torch.Tensor  # [H, K, V] the adjoint of the state leaving it
    v: torch.Tensor  # [H, c, V]
    beta: torch.Tensor  # [H, c]
    dO: torch.Tensor  # [H, c, V]
    G: torch.Tensor  # [H, c, K or 1] the chunk-local cumulative gate (zeros without a gate)

    def primitives(self) -> tuple[torch.Tensor, ...]:
        """The primitives in `chunk_backward`'s order, the stored nodes' slots (zeros) last."""
        H, c, K = self.q.shape
        V = self.v.shape[-1]
        zeros = {
            "q_in": (H, c, K),
            "k_in": (H, c, K),
            "Kt": (H, c, K),
            "Aqk": (H, c, c),
            "v": (H, c, V),
            "W": (H, c, K),
            "Vn": (H, c, V),
            "Sn": (H, K, V),
            "dVn": (H, c, V),
            "Y": (H, c, V),
            "dL": (H, c, c),
            "SY": (H, c, K),
        }
        slots = tuple(self.q.new_zeros(zeros[n]) for n in STORED)
        return tuple(getattr(self, n) for n in PRIMITIVES) + slots


def jvp(
    f: Callable[..., dict[str, torch.Tensor]],
    primals: tuple[torch.Tensor, ...],
    tangents: tuple[torch.Tensor, ...],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``torch.func.jvp``: f at the primals and its derivative along the tangents.

    The first forward-mode call imports torch's jvp decompositions, which warn (a
    `DeprecationWarning` of ``torch.jit.script``) about nothing that concerns the result.
    """
    # Those decompositions import Triton: select its mode first (see `interpreter.select_mode`).
    interpreter.select_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out: Any = _torch_jvp(f, primals, tangents)
    return out[0], out[1]


def pair_scores(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Σ_m a_im b_jm w_ijm ``[H, c, c]``; w ``[H, c, c, K]`` or ``[H, c, c, 1]`` (one decay)."""
    if w.shape[-1] == 1:
        return (a @ b.transpose(-1, -2)) * w[..., 0]
    return torch.einsum("him,hjm,hijm->hij", a, b, w)


def _pair_rows(P: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Σ_j P_ij b_jm w_ijm ``[H, c, K]`` (as `pair_scores`)."""
    if w.shape[-1] == 1:
        return (P * w[..., 0]) @ b
    return torch.einsum("hij,hjm,hijm->him", P, b, w)


def _pair_cols(P: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Σ_i P_ij a_im w_ijm ``[H, c, K]`` over j (as `pair_scores`)."""
    if w.shape[-1] == 1:
        return (P * w[..., 0]).transpose(-1, -2) @ a
    return torch.einsum("hij,him,hijm->hjm", P, a, w)


def chunk_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    wqk: torch.Tensor,
    wkk: torch.Tensor,
    eG: torch.Tensor,
    eGc: torch.Tensor,
    ekout: torch.Tensor,
    T: torch.Tensor,
    S: torch.Tensor,
    Lam: torch.Tensor,
    z_q_in: torch.Tensor,
    z_k_in: torch.Tensor,
    z_Kt: torch.Tensor,
    z_Aqk: torch.Tensor,
    z_v: torch.Tensor,
    z_W: torch.Tensor,
    z_Vn: torch.Tensor,
    z_Sn: torch.Tensor,
    z_dVn: torch.Tensor,
    z_Y: torch.Tensor,
    z_dL: torch.Tensor,
    z_SY: torch.Tensor,
    *,
    v: torch.Tensor,
    beta: torch.Tensor,
    dO: torch.Tensor,
    scale: float,
    sign: float,
) -> dict[str, torch.Tensor]:
    """The chunk's gradients, the adjoint entering it and the state leaving it (docstring).

    ``sign = -1`` evaluates them exactly; ``sign = +1`` on absolute values (and M for T) gives
    the magnitudes: every subtraction of the expanded sums becomes an addition. The ``z_``
    arguments are added where a recipe stores the node (zeros: the value is unchanged).
    """
    c = q.shape[1]
    strict = torch.ones(c, c, dtype=q.dtype, device=q.device).tril(-1)
    incl = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()
    b = beta[..., None]
    k_in, q_in, Kt = k * eG + z_k_in, q * eG + z_q_in, k * ekout + z_Kt
    Akk = pair_scores(k, k, wkk)
    Aqk = pair_scores(q, k, wqk) + z_Aqk * incl
    pred = v + z_v + sign * (k_in @ S)  # v - K_in S
    W = T @ (b * k_in) + z_W
    U = T @ (b * (v + z_v))
    Vn = U + sign * (W @ S) + z_Vn  # U - W S
    local = scale * Aqk.transpose(-1, -2) @ dO
    dVn = local + Kt @ Lam + z_dVn
    Y = T.transpose(-1, -2) @ dVn + z_Y
    dL = (sign * (Y @ Vn.transpose(-1, -2)) + z_dL) * strict
    dAkk = b * dL
    dAqk = scale * (dO @ Vn.transpose(-1, -2)) * incl
    SdO = torch.einsum("hmv,hiv->him", S, dO)
    SY = torch.einsum("hmv,hiv->him", S, Y) + z_SY
    LVn = torch.einsum("hmv,hjv->hjm", Lam, Vn)
    dv = b * Y
    dbeta = (Y * pred).sum(-1) + (dL * Akk).sum(-1)
    # The pair sums, each once: over keys j (rows i) and over rows i (keys j) of a chunk.
    qk_rows, qk_cols = _pair_rows(dAqk, k, wqk), _pair_cols(dAqk, q, wqk)
    kk_rows, kk_cols = _pair_rows(dAkk, k, wkk), _pair_cols(dAkk, k, wkk)
    dq = scale * eG * SdO + qk_rows
    dk = qk_cols + kk_rows + kk_cols + sign * b * eG * SY + ekout * LVn
    # dG's pair terms Σ_j dA_ij x_im k_jm w_ijm (and over i) are those sums times x_im (k_jm).
    dG = (
        k * kk_rows
        + sign * k * kk_cols
        + q * qk_rows
        + sign * k * qk_cols
        + scale * q_in * SdO
        + sign * b * k_in * SY
        + sign * Kt * LVn
    )
    last = (Kt * LVn).sum(1) + eGc * (Lam * S).sum(-1)  # [H, K]
    dG = torch.cat([dG[:, :-1], (dG[:, -1] + last)[:, None]], 1)
    dg = dG.flip(1).cumsum(1).flip(1)
    Lam_in = (
        eGc[..., None] * Lam
        + scale * q_in.transpose(-1, -2) @ dO
        + sign * W.transpose(-1, -2) @ dVn  # K_in^T diag(β) Y
    )
    S_next = eGc[..., None] * S + Kt.transpose(-1, -2) @ Vn + z_Sn
    return {
        "q": dq,
        "k": dk,
        "v": dv,
        "beta": dbeta,
        "g": dg,
        "Lam_in": Lam_in,
        "S_next": S_next,
        "o": scale * (q_in @ S + Aqk @ Vn),
        # The stored nodes (exact mode: their values, whose rounding the slots charge).
        "node_q_in": q_in,
        "node_k_in": k_in,
        "node_Kt": Kt,
        "node_Aqk": Aqk * incl,
        "node_U": U,
        "node_W": W,
        "node_Vn": Vn,
        "node_R": b * pred,
        "node_local": local,
        "node_dVn": dVn,
        "node_Y": Y,
        "node_dL": dL,
        "node_dW": dVn @ S.transpose(-1, -2),
    }


def chunk_inputs(
    seq: DeltaSequence,
    start: int,
    end: int,
    S: torch.Tensor,
    Lam: torch.Tensor,
    dO: torch.Tensor,
    *,
    inverse: InverseKind = "substitution",
) -> tuple[ChunkInputs, torch.Tensor]:
    """Tokens ``start:end`` of ``seq`` as exact primitives, with M (`inverse_magnitude`).

    M = |T| (I + |L - I|) |T| for ``substitution``; the larger matrices of a pivoting solver
    or a product form otherwise.
    """
    H = seq.q.shape[0]
    q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
    beta = seq.beta[:, start:end]
    c = end - start
    # One decay for every key dimension (none, or a scalar gate) keeps a last dimension of 1:
    # the weights are then [H, c, c, 1] and every pair sum a matrix product (`pair_scores`).
    if seq.g is None:
        G = q.new_zeros(H, c, 1)
    elif seq.g.ndim == 2:
        G = seq.g[:, start:end].cumsum(-1)[..., None]
    else:
        G = seq.g[:, start:end].cumsum(-2)
    wqk = pair_weights(G, strict=False, vector=True)
    wkk = pair_weights(G, strict=True, vector=True)
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    Akk = pair_scores(k, k, wkk)
    L_off = beta[..., None] * Akk
    T = forward_substitution_inverse(eye + L_off)
    M = inverse_magnitude(L_off, T, kind=inverse)
    inputs = ChunkInputs(
        q=q,
        k=k,
        wqk=wqk,
        wkk=wkk,
        eG=torch.exp(G),
        eGc=torch.exp(G[:, -1]),
        ekout=torch.exp(G[:, -1:] - G),
        T=T,
        S=S,
        Lam=Lam,
        v=v,
        beta=beta,
        dO=dO,
        G=G,
    )
    return inputs, M


def evaluate(
    x: ChunkInputs, scale: float, *, magnitude: bool, T_abs: torch.Tensor | None = None
) -> Callable[..., dict[str, torch.Tensor]]:
    """`chunk_backward` as a function of the primitives (for jvp), exact or on magnitudes."""
    v, beta, dO = (x.v.abs(), x.beta.abs(), x.dO.abs()) if magnitude else (x.v, x.beta, x.dO)

    def f(*prims: torch.Tensor) -> dict[str, torch.Tensor]:
        return chunk_backward(
            *prims,
            v=v,
            beta=beta,
            dO=dO,
            scale=abs(scale) if magnitude else scale,
            sign=1.0 if magnitude else -1.0,
        )

    return f


__all__ = [
    "PRIMITIVES",
    "STORED",
    "ChunkInputs",
    "chunk_backward",
    "chunk_inputs",
    "evaluate",
    "jvp",
    "pair_scores",
]
