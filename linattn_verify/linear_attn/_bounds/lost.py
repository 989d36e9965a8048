# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The charge of partial products lost to underflow or casts, one gradient at a time.

A partial product of a gradient term that underflows (or is cast to the intermediate dtype)
loses up to c = `Units.lost_intermediate` before the remaining factors multiply it. Which
factors remain depends on the kernel's evaluation order, but their product is at most the
product of max(1, |f|) over all the term's factors, so each term is charged c · Π max(1, |f|):
a bound valid for every order (weights w <= 1 contribute 1). Every pair of tokens j <= t is
charged, those whose float64 weight underflows to 0 too: an over-count (the terms are ~ℓ, 1e-37
for fp32) that keeps the charge a block scan.

`LostCharges` gives each gradient's charge on its own (`dq`, `dk`, `dv`, `states`), so that the
gradient bounds (`_bounds.gradients`, `_bounds.vector_gradients`) form one gradient's working
tensors, write it out and free them before the next: the max(1, |f|) factors (``[H, L, K]``
each) are formed where a charge needs them, not kept.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn._bounds.forward import ForwardPieces
from linattn_verify.linear_attn._bounds.magnitudes import at_least_one
from linattn_verify.linear_attn._bounds.pairwise import PairMatrix


class LostCharges:
    """The lost-intermediate charges of one sequence's gradients.

    Memory: ``[H, L, 1]`` row factors only; each method forms the ``[H, L, K|V]`` factors it
    reads (max(1, |·|) of φ(q), φ(k), v, do: an elementwise pass each) and frees them.
    """

    def __init__(
        self,
        f: ForwardPieces,
        do_abs: torch.Tensor,
        dS: torch.Tensor,
        dz: torch.Tensor,
        zeta: torch.Tensor,
    ) -> None:
        seq = f.seq
        self.seq = seq
        self.c = seq.units.lost_intermediate
        self.s1 = max(1.0, seq.scale)
        # max(1, |do|) is all a charge reads of the output's cotangent: |do| is given.
        self.do_abs, self.dS1, self.dz1 = do_abs, at_least_one(dS), at_least_one(dz)
        self.z1 = at_least_one(zeta)  # [H, L, 1]
        # Σ_i max(1, |do_ti|) max(1, |o_ti|), [H, L, 1]
        self.do_o1 = (at_least_one(do_abs) * at_least_one(f.o)).sum(-1, keepdim=True)

    def _P1(self, do1: torch.Tensor) -> PairMatrix:
        """dP_tj's factor products summed over the value index, times max(1, ζ_t): pairs."""
        seq = self.seq
        return (seq.outer(do1, at_least_one(seq.v)) + self.do_o1) * self.z1

    def dq(self) -> torch.Tensor:
        """The charge to dφ(q) ``[H, L, K]``."""
        seq = self.seq
        do1 = at_least_one(self.do_abs)
        S01, z01 = at_least_one(seq.S0), at_least_one(seq.z0)
        P0 = (do1 @ S01.transpose(-1, -2) + self.do_o1 * z01[:, None, :]) * self.z1
        mask: PairMatrix = seq.token_pairs()
        charge: torch.Tensor = (
            self.c * self.s1 * ((mask * self._P1(do1)) @ at_least_one(seq.k_feat) + P0)
        )
        return charge

    def dk(self) -> torch.Tensor:
        """The charge to dφ(k) ``[H, L, K]``."""
        seq = self.seq
        do1 = at_least_one(self.do_abs)
        final_k = at_least_one(seq.v) @ self.dS1.transpose(-1, -2) + self.dz1[:, None, :]
        mask: PairMatrix = seq.token_pairs()
        pairs = (mask * self._P1(do1)).transpose(-1, -2)
        charge: torch.Tensor = self.c * (self.s1 * pairs @ at_least_one(seq.q_feat) + final_k)
        return charge

    def dv(self) -> torch.Tensor:
        """The charge to dv ``[H, L, V]``."""
        seq = self.seq
        k1 = at_least_one(seq.k_feat)
        A1 = seq.outer(at_least_one(seq.q_feat), k1)  # Σ_m of max1 factor products of q̃·k̃
        mask: PairMatrix = seq.token_pairs()
        z_do = self.z1 * at_least_one(self.do_abs)
        charge: torch.Tensor = self.c * (
            self.s1 * (mask * A1).transpose(-1, -2) @ z_do + k1 @ self.dS1
        )
        return charge

    def states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The charges to dS_0 ``[H, K, V]`` and dz_0 ``[H, K]``."""
        qz1 = at_least_one(self.seq.q_feat) * self.z1  # [H, L, K]
        do1 = at_least_one(self.do_abs)
        dS0 = self.c * (self.s1 * qz1.transpose(-1, -2) @ do1 + self.dS1)
        dz0 = self.c * (self.s1 * (qz1 * self.do_o1).sum(1) + self.dz1)
        return dS0, dz0


__all__ = ["LostCharges"]
