# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear-attention forward bound in O(T) memory and time, for long sequences (``drift``).

`linattn_verify.linear_attn.tolerance.forward_bounds` builds the T x (T+1) term structure of a
sequence (`linattn_verify.linear_attn._bounds.terms.SequenceTerms`): O(T²) float64 memory, about 34
GB per matrix at T = 65,536. This module evaluates the *same* bound (the same per-term counts c(t,
j), decay-weight errors ε_w(t, j), casts and absolute terms, docs/error-model.md §2.2-§2.4 and §4)
without it, for the problems ``drift`` draws: unnormalized output, feature map identity or relu
(exact features), no gate or a scalar gate, no initial state (each sequence of a varlen batch
alike).

**Why it is linear.** For a pair (t, j) in different blocks of P tokens (P a multiple of the
recipe's chunk size C), every part of U_tj = u_acc (K + 2 + a_tj) + ε_w(t, j) + u_pt is a sum
of a function of t and a non-negative "age" of j seen from the block boundary e < t:

    t - j = (t - e) + (e - j)        n(t) - n(j) = (n(t) - e/C) + (e/C - n(j))
    |G_t - G_j| = (G̃_t - G̃_e) + (G̃_e - G̃_j)     (G̃ = -G is non-decreasing: g <= 0)

plus functions of j alone (the block-local cumsum magnitudes of ε_w). Hence

    Σ_{j<=e} U_tj w_tj |A_tj| |v_j| = w_te |q_t|^T (α(t) M0 + Σ_m c_m M_m)

with running [K, V] states M_m = Σ_{j<=e} w_ej x_m(j) |k_j| |v_j|^T (x_m an age or a function of
j), carried from boundary to boundary like the attention state itself; every quantity is
non-negative, so nothing cancels. Pairs within one block are summed densely with the formula
of `SequenceTerms`. Rows cost O(P (K + V)) each, states O(K V) per block.

One absolute term, of rows and of the final state alike, is bounded from above rather than
reproduced: the lost-intermediate term (about 1e-37 per key) counts every key j <= t, not only
those whose float64 weight is nonzero. `tests/unit/test_drift.py` checks that the result equals
`forward_bounds`' on every recipe form, decay scan, gate, cast and dtype at small T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linattn_verify.core.bound import TensorBound
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn._bounds.terms import Units
from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem

ORACLE_CHUNK = 64
"""Chunk size of the float64 chunked oracle (O(T·C) per sequence; docs/error-model.md §6.4)."""

BLOCK_TOKENS = 64
"""Tokens per block of the bound's scan (rounded up to a multiple of the recipe's C)."""


@dataclass(frozen=True)
class _Coefficients:
    """The recipe's count and weight-error model split into its t, age and j parts."""

    A0: float  # constant part of a_tj
    At: float  # coefficient of t (parallel: a row of t + 1 terms)
    An: float  # coefficient of n(t) - n(j) (chunk crossings)
    Aage: float  # coefficient of t - j (recurrent steps)
    scan: str  # the decay scan: "per_step", "chunk_local" or "global"
    dec: int  # 1 with a gate


def _coefficients(recipe: PrecisionRecipe, decay: bool) -> _Coefficients:
    """The parts of a_tj (docs/error-model.md §2.4); an undeclared form is charged all three."""
    dec = int(decay)
    forms = (recipe.form,) if recipe.form is not None else ("parallel", "chunk", "recurrent")
    A0 = At = An = Aage = 0.0
    if "parallel" in forms:
        A0, At = A0 + 1 + dec, At + 1
    if "chunk" in forms:
        A0, An = A0 + recipe.chunk_size + 1 + 2 * dec, An + 1 + dec
    if "recurrent" in forms:
        A0, Aage = A0 + 2, Aage + 1 + dec
    return _Coefficients(A0, At, An, Aage, recipe.decay_scan, dec)


def linear_forward_bounds(problem: Problem, recipe: PrecisionRecipe) -> dict[str, TensorBound]:
    """Return the exact ``o`` and ``final_state`` with their bounds, in O(T) memory and time.

    Args:
        problem: The problem exactly as the kernel received it (any dtype); unnormalized, feature
            map identity or relu, no gate or a scalar gate ``[B, T, H]``, no initial state.
        recipe: The kernel's precision recipe for the problem's dtype.

    Returns:
        `TensorBound` by name, ``"o"`` ``[B, T, H, V]`` and (when the problem asks for it)
        ``"final_state"`` ``[N, H, K, V]``: float64 reference (the chunked oracle), bound B
        (equal to `linattn_verify.linear_attn.tolerance.forward_bounds`'), magnitude M, largest
        count.

    Raises:
        InvalidArgument: for a problem outside the scope above.
    """
    _check_scope(problem, recipe)
    units = Units.of(recipe, problem.q.dtype)
    p = problem.to(torch.float64)
    o_ref, S_ref = chunk_reference(p, chunk_size=ORACLE_CHUNK)
    co = _coefficients(recipe, p.g is not None)
    B, T, H, _, V = p.shape
    B_o = torch.zeros(B, T, H, V, dtype=torch.float64)
    M_o = torch.zeros_like(B_o)
    count_o = torch.zeros(B, T, H, 1, dtype=torch.float64)
    finals = []
    for _n, b, start, end in p.sequences():
        seq = _Sequence(p, b, start, end)
        bo, mo, co_rows = _rows(seq, recipe, units, co)
        N = o_ref[b, start:end].transpose(0, 1)  # [H, L, V]
        B_o[b, start:end] = (bo + units.out * N.abs() + units.out_abs).transpose(0, 1)
        M_o[b, start:end] = mo.transpose(0, 1)
        count_o[b, start:end] = co_rows[:, None, None].expand(-1, H, 1)
        finals.append(_final_state(seq, recipe, units, co))
    named = {
        "o": TensorBound(
            name="o",
            reference=o_ref,
            bound=B_o,
            magnitude=M_o,
            count=count_o.expand_as(o_ref),
            unit=units.acc,
            verifiable=torch.isfinite(B_o),
        )
    }
    if p.output_final_state:
        assert isinstance(S_ref, torch.Tensor)
        B_S = torch.stack([f[0] for f in finals])
        count_S = max((float(f[2]) for f in finals), default=0.0)
        named["final_state"] = TensorBound(
            name="final_state",
            reference=S_ref,
            bound=B_S,
            magnitude=torch.stack([f[1] for f in finals]),
            count=torch.full_like(S_ref, count_S),
            unit=units.acc,
            verifiable=torch.ones_like(S_ref, dtype=torch.bool),
        )
    return named


def _check_scope(problem: Problem, recipe: PrecisionRecipe) -> None:
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.linear_attn.semantics.Problem but got "
            f"{type(problem).__name__}."
        )
    if not isinstance(recipe, PrecisionRecipe):
        raise InvalidArgument(
            f"Expected recipe to be a PrecisionRecipe but got {type(recipe).__name__}."
        )
    reasons = [
        (problem.normalize, "normalize=True"),
        (problem.feature_map not in ("identity", "relu"), f"feature_map={problem.feature_map!r}"),
        (problem.vector_gate, "a vector gate g [B, T, H, K]"),
        (problem.initial_state is not None, "an initial state"),
    ]
    if given := [why for bad, why in reasons if bad]:
        raise InvalidArgument(
            f"Got {', '.join(given)}; the linear-cost bound covers unnormalized problems with "
            "feature map identity or relu, no gate or a scalar gate and no initial state."
        )


class _Sequence:
    """One sequence's float64 inputs (heads first) and its decay quantities, positions 0..L."""

    def __init__(self, p: Problem, b: int, start: int, end: int) -> None:
        self.q = apply_feature_map(p.q[b, start:end], p.feature_map).transpose(0, 1).abs()
        self.k = apply_feature_map(p.k[b, start:end], p.feature_map).transpose(0, 1).abs()
        self.v = p.v[b, start:end].transpose(0, 1).abs()  # [H, L, V]
        self.scale = abs(p.scale)
        H, L, K = self.q.shape
        self.H, self.L, self.K, self.V = H, L, K, self.v.shape[-1]
        zero = torch.zeros(H, 1, dtype=torch.float64)
        g = p.g[b, start:end].transpose(0, 1) if p.g is not None else torch.zeros(H, L)
        # G̃ = -G at positions 0..L (G̃_0 = 0): non-decreasing since g <= 0.
        self.Gt = torch.cat([zero, -torch.cumsum(g.to(torch.float64), -1)], -1)  # [H, L+1]
        self._blocks: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def block_local(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Block index, |G - G_start| and the block's total |G_end - G_start| at 0..L."""
        if size not in self._blocks:
            self._blocks[size] = self._block_local(size)
        return self._blocks[size]

    def _block_local(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pos = torch.arange(0, self.L + 1)
        blk = torch.where(pos > 0, torch.div(pos - 1, size, rounding_mode="floor"), -1)
        first = torch.clamp(blk * size, min=0)
        last = torch.clamp((blk + 1) * size, max=self.L)
        local = self.Gt - self.Gt[:, first]
        total = torch.where(blk >= 0, self.Gt[:, last] - self.Gt[:, first], 0.0)
        return blk, local, total


def _chunk_index(pos: torch.Tensor, C: int) -> torch.Tensor:
    """n(x) = floor((x - 1) / C) for x >= 1, n(0) = -1 (the initial state)."""
    return torch.where(pos > 0, torch.div(pos - 1, C, rounding_mode="floor"), -1).to(torch.float64)


def _scan_block(recipe: PrecisionRecipe, L: int) -> int:
    """The block of the decay scan's cumulative sums (`SequenceTerms._weight_error`)."""
    return recipe.chunk_size if recipe.decay_scan == "chunk_local" else max(L, 1)


def _weight_error(
    seq: _Sequence,
    recipe: PrecisionRecipe,
    units: Units,
    t: torch.Tensor,
    j: torch.Tensor,
) -> torch.Tensor:
    """ε_w(t, j) for positions broadcast against each other (``[H, *t.shape]``): dense pairs."""
    u = units.arith
    D = seq.Gt[:, t] - seq.Gt[:, j]  # >= 0 for j <= t
    if recipe.decay_scan == "per_step":
        return 4 * u * (t - j).clamp(min=0).to(torch.float64) + 2.4 * u * D
    size = _scan_block(recipe, seq.L)
    blk, local, total = seq.block_local(size)
    same = blk[t] == blk[j]
    pieces = (blk[t] - blk[j] + 1).clamp(min=1).to(torch.float64)
    far = torch.where(same, 0.0, total[:, j] + D)
    return pieces * 5 * u + 3.4 * u * D + size * u * (local[:, t] + local[:, j] + far)


def _rows(
    seq: _Sequence, recipe: PrecisionRecipe, units: Units, co: _Coefficients
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """B^N (without the output rounding), M^N ``[H, L, V]`` and each row's largest count [L]."""
    H, L, K, V = seq.H, seq.L, seq.K, seq.V
    C = recipe.chunk_size
    P = C * max(1, -(-BLOCK_TOKENS // C))
    u, s, dec = units.arith, seq.scale, co.dec
    lam = units.underflow * dec  # absolute error of an underflowing weight, per operation
    f64 = torch.float64
    pos = torch.arange(0, L + 1)
    n = _chunk_index(pos, C)
    size = _scan_block(recipe, L)
    _, local, total = seq.block_local(size)
    # The coefficients of the ages (docs: module docstring), weight errors only with a gate.
    c_age = units.acc * co.Aage + dec * (4 * u if co.scan == "per_step" else 0.0)
    c_cross = units.acc * co.An + dec * (5 * u if co.scan == "chunk_local" else 0.0)
    c_dist = dec * {"per_step": 2.4 * u, "chunk_local": 3.4 * u + C * u}.get(co.scan, 3.4 * u)
    h = dec * (
        C * u * (local + total)
        if co.scan == "chunk_local"
        else (size * u * local if co.scan == "global" else 0.0 * local)
    )  # [H, L+1]: the part of ε_w that depends on j alone (j in an earlier block)
    base = units.acc * (K + 2 + co.A0) + units.per_term
    states = {name: torch.zeros(H, K, V, dtype=f64) for name in ("M0", "age", "cross", "dist", "h")}
    R0, R_age = torch.zeros(H, K, V, dtype=f64), torch.zeros(H, K, V, dtype=f64)
    m0 = torch.zeros(H, V, dtype=f64)
    B_N = torch.zeros(H, L, V, dtype=f64)
    M_N = torch.zeros(H, L, V, dtype=f64)
    for e in range(0, L, P):
        e1 = min(e + P, L)
        t = torch.arange(e + 1, e1 + 1)  # positions of the block
        q, k, v = seq.q[:, e:e1], seq.k[:, e:e1], seq.v[:, e:e1]
        Gt_t = seq.Gt[:, t]  # [H, c]
        # Earlier blocks, through the states at boundary e.
        rho = torch.exp(seq.Gt[:, e, None] - Gt_t)  # [H, c]: w_te
        alpha = (
            base
            + units.acc * co.At * t.to(f64)
            + c_age * (t - e).to(f64)
            + c_cross * (n[t] - e // C)
            + c_dist * (Gt_t - seq.Gt[:, e, None])
        )  # [H, c]
        if dec and co.scan in ("chunk_local", "global"):
            alpha = alpha + 5 * u + size * u * local[:, t]
        mixed = c_age * states["age"] + c_cross * states["cross"] + c_dist * states["dist"]
        qM0 = q @ states["M0"]
        inter = rho[..., None] * (alpha[..., None] * qM0 + q @ (mixed + states["h"]))
        inter = inter + units.underflow * (K + 2) * rho[..., None] * m0[:, None, :]
        inter = inter + lam * ((t - e + 2).to(f64)[:, None] * (q @ R0) + q @ R_age)
        # This block's own pairs, densely, with the formula of SequenceTerms.
        tt, jj = t[:, None], t[None, :]
        causal = jj <= tt
        W = torch.where(
            causal, torch.exp(torch.where(causal, -(Gt_t[:, :, None] - Gt_t[:, None, :]), 0.0)), 0.0
        )
        A = q @ k.transpose(-1, -2)  # |q̃_t|·|k̃_j|
        acc = co.A0 + co.At * tt + co.An * (n[tt] - n[jj]) + co.Aage * (tt - jj)
        U = units.acc * (K + 2 + acc) + units.per_term
        if dec:
            U = U + _weight_error(seq, recipe, units, tt.expand_as(causal), jj.expand_as(causal))
        absolute = units.underflow * (K + 2) * W + lam * (tt - jj + 2) * A * causal
        B_N[:, e:e1] = s * (inter + (U * W * A + absolute) @ v)
        M_N[:, e:e1] = s * (rho[..., None] * qM0 + (W * A) @ v)
        # Move the states to boundary e1 (module docstring).
        w_blk = torch.exp(seq.Gt[:, e, None, None] - seq.Gt[:, e1, None, None])  # [H, 1, 1]
        w_end = torch.exp(Gt_t - seq.Gt[:, e1, None])  # [H, c]: w_{e1, j}
        c = e1 - e

        def gathered(x: torch.Tensor, k: torch.Tensor = k, v: torch.Tensor = v) -> torch.Tensor:
            return (k * x[..., None]).transpose(-1, -2) @ v  # Σ_j x_j |k_j| |v_j|^T

        M0 = states["M0"]
        states["age"] = w_blk * (states["age"] + c * M0) + gathered(w_end * (e1 - t).to(f64))
        states["cross"] = w_blk * (states["cross"] + (e1 // C - e // C) * M0) + gathered(
            w_end * (e1 // C - n[t])
        )
        states["dist"] = w_blk * (
            states["dist"] + (seq.Gt[:, e1] - seq.Gt[:, e])[:, None, None] * M0
        ) + gathered(w_end * (seq.Gt[:, e1, None] - Gt_t))
        states["h"] = w_blk * states["h"] + gathered(w_end * h[:, t])
        states["M0"] = w_blk * M0 + gathered(w_end)
        R_age = R_age + c * R0 + gathered(torch.ones_like(w_end) * (e1 - t).to(f64))
        R0 = R0 + gathered(torch.ones_like(w_end))
        m0 = w_blk[..., 0] * m0 + (w_end[..., None] * v).sum(1)
    # Absolute terms of `forward_sequence`: underflow on a term's path, lost intermediates.
    t_all = pos[1:].to(f64)
    count = K + 2 + co.A0 + co.At * t_all + co.An * (n[1:] + 1) + co.Aage * t_all  # j = 0
    underflow = (units.underflow * (t_all + 1) * count)[None, :, None]
    lost = units.lost_intermediate
    cast_row = lost * s * seq.q.sum(-1, keepdim=True)
    B_N = B_N + underflow + cast_row + lost * torch.cumsum(seq.v, dim=1)
    return B_N, M_N, count


def _final_state(
    seq: _Sequence, recipe: PrecisionRecipe, units: Units, co: _Coefficients
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """B^S, M^S ``[H, K, V]`` and the largest count of the final state (O(L), no pairs)."""
    L, C, dec = seq.L, recipe.chunk_size, co.dec
    f64 = torch.float64
    j = torch.arange(0, L + 1)
    jf, n = j.to(f64), _chunk_index(j, C)
    forms = (recipe.form,) if recipe.form is not None else ("parallel", "chunk", "recurrent")
    count = torch.zeros(L + 1, dtype=f64)
    if "parallel" in forms:
        count = count + L + 2 + dec
    if "chunk" in forms:
        count = count + C + (1 + dec) * (float(_chunk_index(torch.tensor(L), C)) - n) + 2 + 2 * dec
    if "recurrent" in forms:
        count = count + 2 + (1 + dec) * (L - jf)
    U = units.acc * count + units.per_term  # [L+1]
    if dec:
        t = torch.full_like(j, L)
        U = U + _weight_error(seq, recipe, units, t, j)  # [H, L+1]
    wE = torch.exp(seq.Gt[:, 1:] - seq.Gt[:, -1:])  # [H, L]: w_Lj
    lam = units.underflow * dec
    x = seq.k * (wE * (U if U.ndim == 2 else U[None])[..., 1:])[..., None]
    x = x + seq.k * (lam * (L - jf[1:] + 2))[None, :, None]
    B_S = x.transpose(-1, -2) @ seq.v
    M_S = (seq.k * wE[..., None]).transpose(-1, -2) @ seq.v
    underflow = units.underflow * (L + 1) * float(count.max())
    lost = units.lost_intermediate * seq.v.sum(1)[:, None, :]  # [H, 1, V]
    return B_S + underflow + lost, M_S, float(count.max())


__all__ = ["BLOCK_TOKENS", "ORACLE_CHUNK", "linear_forward_bounds"]
