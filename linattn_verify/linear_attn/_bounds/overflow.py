# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Where a kernel's declared 16-bit arithmetic may overflow: docs/error-model.md §8.3.

A kernel that computes in its input dtype (``accumulation="input"``: fp16 running sums) or
divides there (``division_dtype="input"``) implements its recipe correctly and still returns
inf or NaN once an intermediate passes the dtype's largest value (65504 in fp16), though the
exact result is finite: the recipe cannot represent the case, the kernel is not wrong. Those
elements are unverifiable, and a non-finite value is allowed there.

Which intermediates exist depends on the kernel's evaluation order, so each is bounded by
the magnitude sum of its terms, grown by the rounding of the longest sum:
``(1 + u)^n <= exp(n u)``. Intermediates a correct kernel of the recipe forms are the running
state and key sum, the scores q·k, the numerator and denominator, their adjoints, and the
gradients; a kernel that forms rescaled decays (q e^{G_t} and k e^{-G_j}) in fp16 can overflow
sooner, and that is the kernel's choice, not excused here.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from linattn_verify.linear_attn._bounds.pairwise import PairMatrix
from linattn_verify.linear_attn._bounds.terms import SequenceTerms


class ForwardMagnitudes(Protocol):
    """What `backward_overflow` reads of the forward bound (`_bounds.forward.ForwardPieces`).

    Named structurally, so that this module does not import the modules that import it.
    """

    @property
    def seq(self) -> SequenceTerms: ...
    @property
    def overflow(self) -> torch.Tensor: ...
    @property
    def end_overflow(self) -> torch.Tensor: ...
    @property
    def bad(self) -> torch.Tensor: ...
    @property
    def Z(self) -> torch.Tensor: ...
    @property
    def o(self) -> torch.Tensor: ...
    @property
    def numerator_magnitude(self) -> torch.Tensor: ...


class CotangentMagnitudes(Protocol):
    """The cotangents `backward_overflow` reads (`_bounds.gradients.Cotangents`)."""

    @property
    def do_abs(self) -> torch.Tensor: ...
    @property
    def dS(self) -> torch.Tensor: ...
    @property
    def dz(self) -> torch.Tensor: ...


def _growth(seq: SequenceTerms) -> float:
    """How far a computed partial sum may exceed its terms' magnitude sum: exp(n u)."""
    n = seq.L + seq.dot_length + seq.V + 8
    return math.exp(n * seq.units.acc)


def _row_weights(seq: SequenceTerms) -> PairMatrix:
    """w_tj ``[H, L, L+1]``, the largest over key dimensions for a vector gate.

    The block scan of a vector gate (`SequenceTerms.lazy`) never forms a largest weight: there
    the bound w_tjm <= 1 (`SequenceTerms.W`), which may mark more rows, never fewer.
    """
    if seq.lazy:
        return seq.W
    if seq.vector:
        return seq.W.reshape(seq.H, seq.K, seq.L, seq.L + 1).amax(1)
    return seq.W.expand(seq.H, -1, -1)


def _end_weights(seq: SequenceTerms) -> torch.Tensor:
    """w_Tj ``[H, L+1]`` of the final state, the largest over key dimensions likewise."""
    if seq.vector:
        return seq.W_end.reshape(seq.H, seq.K, seq.L + 1).amax(1)
    return seq.W_end.expand(seq.H, -1)


def _largest_scores(
    seq: SequenceTerms, a: torch.Tensor, b: torch.Tensor, *, causal: bool = True
) -> torch.Tensor:
    """max_j a_t·b_j ``[H, L]`` over keys j <= t (``causal``) or all j; a, b >= 0.

    Exact for dense pair quantities. For the block scan (`SequenceTerms.lazy`), whose point is
    never to form all pairs, the upper bound Σ_m a_tm max_j b_jm: more rows may be marked as
    possibly overflowing, never fewer.
    """
    if not seq.lazy:
        scores = a @ b.transpose(-1, -2)
        if causal:
            scores = torch.where(seq.causal[:, 1:], scores, 0.0)
        return scores.amax(-1)
    if not seq.L:
        return a.new_zeros(a.shape[:2])
    widest = torch.cummax(b, 1).values if causal else b.amax(1, keepdim=True)
    return (a * widest).sum(-1)


def forward_overflow(
    seq: SequenceTerms, M_N: torch.Tensor, M_Z: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[H, L]`` whose forward may overflow, and heads ``[H]`` whose final state may.

    ``M_N`` ``[H, L, V]`` and ``M_Z`` ``[H, L, 1]`` (`None` unnormalized) are the magnitude
    sums of the numerator and denominator. A row overflows in the arithmetic when its state,
    key sum, a score, N or Z (scaled or not) may pass the dtype's largest value; in the
    division when N or Z may (they are cast to the input dtype before it).
    """
    u = seq.units
    rows = torch.zeros(seq.H, seq.L, dtype=torch.bool, device=M_N.device)
    end = torch.zeros(seq.H, dtype=torch.bool, device=M_N.device)
    if (u.overflow_arith == math.inf and u.overflow_division == math.inf) or not seq.L:
        return rows, end
    grow = _growth(seq)
    s = seq.scale
    unscaled = max(1.0, 1.0 / s) if s > 0 else 1.0
    numerators = M_N.amax(-1)  # [H, L]
    if M_Z is not None:  # only a normalized problem divides
        numerators = torch.maximum(numerators, M_Z[..., 0])
        rows = rows | (numerators * grow >= u.overflow_division)
    if u.overflow_arith == math.inf:
        return rows, end
    W = _row_weights(seq)
    qa, ka = seq.q_feat.abs(), seq.k_feat.abs()
    k_max, v_max = ka.amax(-1), seq.v.abs().amax(-1)  # [H, L]
    S0_max = seq.S0.abs().flatten(1).amax(-1)  # [H]
    z0_max = seq.z0.abs().amax(-1)
    state = (W[..., 1:] @ (k_max * v_max)[..., None])[..., 0] + W[..., 0] * S0_max[:, None]
    if seq.problem.normalize:
        keys = (W[..., 1:] @ k_max[..., None])[..., 0] + W[..., 0] * z0_max[:, None]
        state = torch.maximum(state, keys)
    scores = _largest_scores(seq, qa, ka) * max(1.0, s)
    widest = torch.maximum(torch.maximum(state, scores), numerators * unscaled)
    rows = rows | (widest * grow >= u.overflow_arith)
    end = state[:, -1] * grow >= u.overflow_arith
    return rows, end


def backward_overflow(
    f: ForwardMagnitudes, ct: CotangentMagnitudes, gradients: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Heads ``[H]`` of the sequence whose backward may overflow (or inherits the forward's).

    An overflow anywhere reaches every gradient of the (sequence, head): the forward's inf
    state meets a zero weight or cotangent in the backward (0·inf = NaN), and the adjoint state
    carries an overflow of its own to every earlier token. Checked: the forward's rows; the
    adjoints of the state and key sum (Σ_{s>=t} w_st s |q_s| |dN_s|, with dN_s = do_s / Z_s and
    dZ_s = (do_s·o_s) / Z_s), the score cotangents do·v, and the gradients' magnitudes; for a
    division in the input dtype, do_s·N_s and do_s / Z_s.
    """
    seq, u = f.seq, f.seq.units
    spread = f.overflow.any(-1) | f.end_overflow
    if (u.overflow_arith == math.inf and u.overflow_division == math.inf) or not seq.L:
        return spread
    grow = _growth(seq)
    doa = ct.do_abs
    normalize = seq.problem.normalize
    # Rows whose denominator is (or may round to) 0 are judged by the zero-denominator rules.
    zeta = torch.where(f.bad[..., None] | (f.Z == 0), 0.0, 1.0 / f.Z.abs())[..., 0]  # [H, L]
    dN = doa.amax(-1) * zeta
    dZ = (doa * f.o.abs()).sum(-1) * zeta * float(normalize)
    if normalize:
        division = torch.maximum(dN, (doa * f.numerator_magnitude).sum(-1))
        spread = spread | (division * grow >= u.overflow_division).any(-1)
    if u.overflow_arith == math.inf:
        return spread
    W = _row_weights(seq)[..., 1:]  # [H, L(s), L(t)]
    s = seq.scale
    q_max = seq.q_feat.abs().amax(-1)
    # Σ_s w_st s |q_s| |dN_s| (and |dZ_s|): [H, L]
    adjoint_S = (W.transpose(-1, -2) @ (s * q_max * dN)[..., None])[..., 0]
    adjoint_z = (W.transpose(-1, -2) @ (s * q_max * dZ)[..., None])[..., 0]
    end = _end_weights(seq)[:, 1:]
    final = torch.maximum(ct.dS.abs().flatten(1).amax(-1), ct.dz.abs().flatten(1).amax(-1))
    adjoint = torch.maximum(adjoint_S, adjoint_z) + end * final[:, None]
    scores = _largest_scores(seq, doa, seq.v.abs(), causal=False) * zeta
    widest = torch.maximum(adjoint, torch.maximum(scores, dN)).amax(-1)
    for name in ("M_q", "M_k", "M_v", "M_g"):
        M = gradients.get(name)
        if M is not None:
            widest = torch.maximum(widest, M.flatten(1).amax(-1))
    return spread | (widest * grow >= u.overflow_arith)
