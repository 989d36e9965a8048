# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk (WY / UT) form's exact backward, evaluated exactly and on magnitudes.

`chunk_backward` evaluates one chunk's gradient sums term by term (the formulas are in
`linattn_verify.delta.chunk_gradient_bounds`, whose bound is built on them): with exact inputs it
reproduces float64 autograd of the oracle; with every input replaced by its absolute value, every
subtraction by an addition and T by M = |T| (I + |L - I|) |T|, it gives the magnitudes, and
`jvp` its first-order change along the errors of its primitives. `chunk_inputs` forms the
primitives of many chunks of equal length at once, folded into the leading (heads) axis: every
operation here is per leading index, so one call evaluates them all. `chunk_states` and
`chunk_adjoints` run the exact states and adjoints over such a batch, chunk by chunk, with only
the few products of the recurrences inside the loop.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.func import jvp as _torch_jvp

from linattn_verify import interpreter
from linattn_verify.delta.inverse import InverseKind, inverse_magnitude
from linattn_verify.delta.reference import (
    DeltaSequence,
    forward_substitution_inverse,
    pair_scores,
    pair_weights,
)

Outputs = Literal["all", "nodes", "bounds", "gradients"]
"""What `chunk_backward` returns: ``gradients`` (q, k, v, beta, g), ``bounds`` (and Lam_in and
S_next, the chunk's adjoint and state), ``nodes`` (only the stored nodes' values: ``node_*``),
``all`` (every one of them, and o)."""

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
    outputs: Outputs = "all",
) -> dict[str, torch.Tensor]:
    """The chunk's gradients, the adjoint entering it and the state leaving it (docstring).

    ``sign = -1`` evaluates them exactly; ``sign = +1`` on absolute values (and M for T) gives
    the magnitudes: every subtraction of the expanded sums becomes an addition. The ``z_``
    arguments are added where a recipe stores the node (zeros: the value is unchanged).
    ``outputs`` (`Outputs`) leaves out what a caller does not read (it would only cost its
    products); every output is computed the same way whichever others are.
    """
    c = q.shape[1]
    strict = torch.ones(c, c, dtype=q.dtype, device=q.device).tril(-1)
    incl = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()
    b = beta[..., None]
    # a + sign·b as one operation: the sign's product is exact (±1), so a - b is the same
    # number, and the magnitudes (sign = +1) skip a product per term.
    join = torch.add if sign > 0 else torch.sub
    k_in, q_in, Kt = k * eG + z_k_in, q * eG + z_q_in, k * ekout + z_Kt
    Aqk = pair_scores(q, k, wqk) + z_Aqk * incl
    pred = join(v + z_v, k_in @ S)  # v - K_in S
    W = T @ (b * k_in) + z_W
    U = T @ (b * (v + z_v))
    Vn = join(U, W @ S) + z_Vn  # U - W S
    local = scale * Aqk.transpose(-1, -2) @ dO
    dVn = local + Kt @ Lam + z_dVn
    Y = T.transpose(-1, -2) @ dVn + z_Y
    dL = join(z_dL, Y @ Vn.transpose(-1, -2)) * strict

    def stored() -> dict[str, torch.Tensor]:
        """The stored nodes (exact mode: their values, whose rounding the slots charge)."""
        return {
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

    if outputs == "nodes":
        return stored()
    Akk = pair_scores(k, k, wkk)
    dAkk = b * dL
    dAqk = scale * (dO @ Vn.transpose(-1, -2)) * incl
    # (S dO_i)_m, (S Y_i)_m, (Λ⁺ Vn_j)_m: rows of dO S^T, Y S^T and Vn Λ⁺^T.
    SdO = dO @ S.transpose(-1, -2)
    SY = Y @ S.transpose(-1, -2) + z_SY
    LVn = Vn @ Lam.transpose(-1, -2)
    dv = b * Y
    dbeta = (Y * pred).sum(-1) + (dL * Akk).sum(-1)
    # The pair sums, each once: over keys j (rows i) and over rows i (keys j) of a chunk.
    qk_rows, qk_cols = _pair_rows(dAqk, k, wqk), _pair_cols(dAqk, q, wqk)
    kk_rows, kk_cols = _pair_rows(dAkk, k, wkk), _pair_cols(dAkk, k, wkk)
    dq = scale * eG * SdO + qk_rows
    dk = join(qk_cols + kk_rows + kk_cols, b * eG * SY) + ekout * LVn
    # dG's pair terms Σ_j dA_ij x_im k_jm w_ijm (and over i) are those sums times x_im (k_jm).
    dG = join(k * kk_rows, k * kk_cols) + q * qk_rows
    dG = join(join(join(dG, k * qk_cols) + scale * q_in * SdO, b * k_in * SY), Kt * LVn)
    last = (Kt * LVn).sum(1) + eGc * (Lam * S).sum(-1)  # [H, K]
    dG = torch.cat([dG[:, :-1], (dG[:, -1] + last)[:, None]], 1)
    dg = dG.flip(1).cumsum(1).flip(1)
    out = {"q": dq, "k": dk, "v": dv, "beta": dbeta, "g": dg}
    if outputs == "gradients":
        return out
    out["Lam_in"] = join(
        eGc[..., None] * Lam + scale * q_in.transpose(-1, -2) @ dO,
        W.transpose(-1, -2) @ dVn,  # K_in^T diag(β) Y
    )
    out["S_next"] = eGc[..., None] * S + Kt.transpose(-1, -2) @ Vn + z_Sn
    if outputs == "bounds":
        return out
    return {**out, "o": scale * (q_in @ S + Aqk @ Vn), **stored()}


def chunk_inputs(
    seq: DeltaSequence,
    start: int,
    end: int,
    S: torch.Tensor,
    Lam: torch.Tensor,
    dO: torch.Tensor,
    *,
    inverse: InverseKind = "substitution",
    chunks: int = 1,
    T: torch.Tensor | None = None,
) -> tuple[ChunkInputs, torch.Tensor]:
    """Tokens ``start:end`` of ``seq`` as exact primitives, with M (`inverse_magnitude`).

    M = |T| (I + |L - I|) |T| for ``substitution``; the larger matrices of a pivoting solver
    or a product form otherwise. The tokens are ``chunks`` chunks of equal length, batched
    head-major: every tensor is ``[H·chunks, c, ...]``, chunk j of head h at h·chunks + j (S,
    Lam: ``[H·chunks, K, V]``, each chunk's own; dO: ``[H, end - start, V]``). ``T``: the
    chunks' inverses if already formed (`chunk_primitives`).
    """
    x, L_off = chunk_primitives(seq, start, end, S, Lam, dO, chunks=chunks, T=T)
    return x, inverse_magnitude(L_off, x.T, kind=inverse)


def chunk_primitives(
    seq: DeltaSequence,
    start: int,
    end: int,
    S: torch.Tensor,
    Lam: torch.Tensor,
    dO: torch.Tensor,
    *,
    chunks: int = 1,
    T: torch.Tensor | None = None,
) -> tuple[ChunkInputs, torch.Tensor]:
    """`chunk_inputs` without M: the primitives and the strictly lower part of L."""
    H = seq.q.shape[0]
    c = (end - start) // chunks

    def fold(x: torch.Tensor) -> torch.Tensor:
        """Tokens ``start:end`` of ``x`` ``[H, L, ...]`` as ``[H·chunks, c, ...]``."""
        return x[:, start:end].reshape(H * chunks, c, *x.shape[2:])

    q, k, v, beta = fold(seq.q), fold(seq.k), fold(seq.v), fold(seq.beta)
    # One decay for every key dimension (none, or a scalar gate) keeps a last dimension of 1:
    # the weights are then [B, c, c, 1] and every pair sum a matrix product (`pair_scores`).
    if seq.g is None:
        G = q.new_zeros(H * chunks, c, 1)
    elif seq.g.ndim == 2:
        G = fold(seq.g).cumsum(-1)[..., None]
    else:
        G = fold(seq.g).cumsum(-2)
    wqk = pair_weights(G, strict=False, vector=True)
    wkk = pair_weights(G, strict=True, vector=True)
    Akk = pair_scores(k, k, wkk)
    L_off = beta[..., None] * Akk
    if T is None:
        T = forward_substitution_inverse(torch.eye(c, dtype=q.dtype, device=q.device) + L_off)
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
        dO=dO.reshape(H * chunks, c, dO.shape[-1]),
        G=G,
    )
    return inputs, L_off


def chunk_states(x: ChunkInputs, S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact states entering each chunk of a batch (`chunk_inputs`), and the state after.

    ``S`` ``[H, K, V]`` enters the batch's first chunk (x.S is not read). W, U and the decayed
    keys are formed for every chunk at once; the loop over the chunks is then
    S⁺ = e^{G_c} ⊙ S + K~^T (U - W S), each operation as `chunk_backward` forms it (its
    ``S_next``, to the bit: the stored-node slots it adds are zeros).

    Returns:
        The states ``[H·chunks, K, V]`` (head-major, as the batch) and the state leaving it.
    """
    H = S.shape[0]
    n = x.q.shape[0] // H
    b = x.beta[..., None]
    W = x.T @ (b * (x.k * x.eG))
    U = x.T @ (b * x.v)
    Kt = x.k * x.ekout

    def per_chunk(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(H, n, *t.shape[1:])

    W, U, Kt, eGc = per_chunk(W), per_chunk(U), per_chunk(Kt), per_chunk(x.eGc)
    states = []
    for j in range(n):
        states.append(S)
        Vn = U[:, j] - W[:, j] @ S
        S = eGc[:, j, :, None] * S + Kt[:, j].transpose(-1, -2) @ Vn
    return torch.stack(states, 1).reshape(H * n, *S.shape[1:]), S


def chunk_adjoints(
    x: ChunkInputs, Lam: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact adjoints Λ⁺ leaving each chunk of a batch, and the adjoint entering it.

    ``Lam`` ``[H, K, V]`` leaves the batch's last chunk (x.Lam is not read). The chunk-local
    parts s Aqk^T dO, s Q_in^T dO and -W^T are formed for every chunk at once; the loop runs
    backward: dVn = s Aqk^T dO + K~ Λ⁺, Λ = e^{G_c} ⊙ Λ⁺ + s Q_in^T dO - W^T dVn, each
    operation as `chunk_backward` forms it (its ``Lam_in``, to the bit).

    Returns:
        The adjoints ``[H·chunks, K, V]`` (head-major) and the adjoint entering the first chunk.
    """
    H = Lam.shape[0]
    n = x.q.shape[0] // H
    b = x.beta[..., None]
    W = x.T @ (b * (x.k * x.eG))
    local = scale * pair_scores(x.q, x.k, x.wqk).transpose(-1, -2) @ x.dO
    from_out = scale * (x.q * x.eG).transpose(-1, -2) @ x.dO
    Wt = -1.0 * W.transpose(-1, -2)

    def per_chunk(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(H, n, *t.shape[1:])

    local, from_out, Wt = per_chunk(local), per_chunk(from_out), per_chunk(Wt)
    Kt, eGc = per_chunk(x.k * x.ekout), per_chunk(x.eGc)
    adjoints: list[torch.Tensor] = []
    for j in reversed(range(n)):
        adjoints.append(Lam)
        dVn = local[:, j] + Kt[:, j] @ Lam
        Lam = eGc[:, j, :, None] * Lam + from_out[:, j] + Wt[:, j] @ dVn
    return torch.stack(adjoints[::-1], 1).reshape(H * n, *Lam.shape[1:]), Lam


def evaluate(
    x: ChunkInputs, scale: float, *, magnitude: bool, outputs: Outputs = "all"
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
            outputs=outputs,
        )

    return f


__all__ = [
    "PRIMITIVES",
    "STORED",
    "ChunkInputs",
    "Outputs",
    "chunk_adjoints",
    "chunk_backward",
    "chunk_inputs",
    "chunk_primitives",
    "chunk_states",
    "evaluate",
    "jvp",
]
