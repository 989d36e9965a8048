# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule family, stated once, and the validation of a problem instance.

Per batch row b, head h and sequence (FLA's conventions, fla-core 0.6.0), with scale s
(default K^-1/2), write strength beta_t and natural-log gate g_t <= 0:

    S'_t = diag(exp(g_t)) S_{t-1}                      decay first ...
    S_t  = S'_t + beta_t k_t (v_t - S'_t^T k_t)^T      ... then the delta-rule correction
    o_t  = s S_t^T q_t

g is absent (DeltaNet: exp(g_t) = 1), one value per token and head ``[B, T, H]`` (Gated
DeltaNet: the same decay for every key dimension) or one per key dimension ``[B, T, H, K]``
(KDA). A scalar gate is the vector gate repeated over K.

The order is decay-before-error: the prediction S'_t^T k_t reads the *decayed* state. That is
what FLA computes (``fla/ops/gated_delta_rule/naive.py:54-58``: ``h = h * g.exp()`` before
``b_v - (h * b_k).sum(-2)``; ``fla/ops/kda/naive.py:61-62``; the fused recurrent kernel
``fla/ops/gated_delta_rule/fused_recurrent.py:138,159-161``), and FLA issue #885 confirms it is
the Gated DeltaNet paper's rule S_t = S_{t-1} α_t (I - β_t k_t k_t^T) + β_t v_t k_t^T (in the
transposed state layout), not a bug. The other reading, S_t = α_t S_{t-1} + β_t k_t
(v_t - S_{t-1}^T k_t)^T, is a different function whenever α_t != 1.

Per value column c of S the update is linear: c_t = A_t c_{t-1} + beta_t v_tj k_t with
A_t = (I - beta_t k_t k_t^T) diag(exp(g_t)), and

    ||A_t||_2 <= max(1, |1 - beta_t ||k_t||^2|) * max_i exp(g_ti),

so A_t is non-expansive (rounding errors are not amplified from step to step) exactly when
beta_t ||k_t||^2 <= 2. Validation does *not* require unit-norm keys: a kernel may expect them
(a later capability), and outside beta ||k||^2 <= 2 the problem is merely ill-conditioned.

With ``l2norm_qk`` (FLA's ``use_qk_l2norm_in_kernel``) q and k are first replaced by

    x / sqrt(sum_i x_i^2 + eps),     eps = 1e-6 (`L2NORM_EPS`)

per token and head (``fla/modules/norm/l2norm.py:36,80`` with the default ``eps=1e-6`` of
``l2norm_fwd``, line 112, called by ``fla/ops/gated_delta_rule/chunk.py:282-284`` and
``fla/ops/kda/chunk.py:57``; the fused recurrent kernel inlines the same formula with the
literal ``1e-6``, ``fused_recurrent.py:118-120``). The scale multiplies the normalized q. So
normalized keys have ||k||^2 = r / (r + eps) < 1 and every A_t is a contraction for beta < 2.

beta lies in [0, 1], or in [0, 2) when negative eigenvalues are allowed (FLA's
``allow_neg_eigval``: 2·sigmoid, ``fla/ops/gated_delta_rule/chunk.py:288``).

A value gate gv ``[B, T, H, V]`` (FLA's ``gv`` of ``fused_recurrent_gated_delta_rule``), every
entry <= 0, decays the state's value columns as well: S'_t = diag(exp(g_t)) S_{t-1}
diag(exp(gv_t)). Column c then follows the rule above with the gate g_t + gv_tc, on its own:
the prediction S'^T k and the correction read one column each
(`linattn_verify.delta.value_gate` judges such a problem as H·V single-column ones).

The initial state S_0 is ``[N, H, K, V]``; the final state S_T is returned per sequence when
asked. With ``cu_seqlens`` (int ``[N+1]``, B == 1) the T axis packs N sequences, the state
restarts at every boundary from that sequence's S_0, and an empty sequence returns its S_0.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from linattn_verify.core.tokens import (
    PackedTokens,
    check_cu_seqlens,
    check_flag,
    check_real,
    check_tensor,
)
from linattn_verify.errors import InvalidArgument

DELTA_OMITTABLE = (
    "scale",
    "initial_state",
    "output_final_state",
    "cu_seqlens",
    "use_qk_l2norm_in_kernel",
)
"""The keywords of the calling convention a call may leave out at their default."""

L2NORM_EPS = 1e-6
"""The eps of FLA's in-kernel L2 normalisation x / sqrt(Σ x² + eps), used exactly as given."""


@dataclass(frozen=True)
class DeltaProblem(PackedTokens):
    """A validated instance of the delta rule: inputs plus every option resolved.

    Attributes:
        q: Queries ``[B, T, H, K]`` (before any L2 normalisation).
        k: Keys ``[B, T, H, K]`` (before any L2 normalisation).
        v: Values ``[B, T, H, V]``.
        beta: Write strengths ``[B, T, H]``, in [0, 1] (or [0, 2)).
        g: Natural-log gate ``[B, T, H]`` (scalar), ``[B, T, H, K]`` (vector), every entry
            finite and <= 0, or `None` (no decay).
        scale: The resolved scale s (K^-1/2 when the caller passed `None`).
        l2norm_qk: Whether q and k are L2-normalised first (eps = `L2NORM_EPS`).
        initial_state: S_0 ``[N, H, K, V]`` or `None` (zeros).
        output_final_state: Whether S_T is part of the result.
        cu_seqlens: Sequence boundaries ``[N+1]`` (int64, CPU) or `None`.
        omit: Keyword arguments (`DELTA_OMITTABLE`) a kernel call leaves out where their value
            is the calling convention's default (`at_default`), so the kernel's own defaults
            are exercised. Default: none.
        gv: The value gate ``[B, T, H, V]`` (natural log, <= 0), or `None`. Default: `None`.
        gate_factors: How many exp-and-multiply factors each step's decay is made of: 2 in a
            problem whose g is a folded g + gv (`linattn_verify.delta.value_gate`), where the
            kernel decays by exp(g) and exp(gv) one after the other. Default: `1`.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    beta: torch.Tensor
    g: torch.Tensor | None
    scale: float
    l2norm_qk: bool
    initial_state: torch.Tensor | None
    output_final_state: bool
    cu_seqlens: torch.Tensor | None
    omit: frozenset[str] = frozenset()
    gv: torch.Tensor | None = None
    gate_factors: int = 1

    family = "delta"

    def at_default(self) -> frozenset[str]:
        """The keywords (of `DELTA_OMITTABLE`) whose value is the convention's default.

        The scale is at its default when it equals K^-1/2 exactly (``scale=None`` resolved).
        """
        defaults = {
            "scale": self.scale == self.q.shape[-1] ** -0.5,
            "initial_state": self.initial_state is None,
            "output_final_state": not self.output_final_state,
            "cu_seqlens": self.cu_seqlens is None,
            "use_qk_l2norm_in_kernel": not self.l2norm_qk,
        }
        return frozenset(name for name, default in defaults.items() if default)

    def describe(self) -> str:
        """Return a one-line description: shapes, dtype and every option."""
        B, T, H, K, V = self.shape
        parts = [f"B={B} T={T} H={H} K={K} V={V}", str(self.q.dtype).replace("torch.", "")]
        parts.append(f"scale={self.scale:.6g}")
        parts.append(f"beta in [{float(self.beta.min()):.3g}, {float(self.beta.max()):.3g}]")
        if self.g is not None:
            gate = "vector gate g[B,T,H,K]" if self.vector_gate else "gate g[B,T,H]"
            parts.append(f"{gate} in [{float(self.g.min()):.3g}, {float(self.g.max()):.3g}]")
        if self.gv is not None:
            lo, hi = float(self.gv.min()), float(self.gv.max())
            parts.append(f"value gate gv in [{lo:.3g}, {hi:.3g}]")
        if self.l2norm_qk:
            parts.append("l2norm_qk")
        if self.initial_state is not None:
            parts.append("initial_state")
        if self.output_final_state:
            parts.append("final_state")
        if self.cu_seqlens is not None:
            parts.append(f"cu_seqlens={self.cu_seqlens.tolist()}")
        if omitted := [n for n in DELTA_OMITTABLE if n in self.omit & self.at_default()]:
            parts.append(f"called without {','.join(omitted)}")
        return " ".join(parts)

    def token_span(self, lo: int, hi: int) -> DeltaProblem:
        """This problem with tokens ``lo:hi`` of every per-token input (q, k, v, beta, g, gv).

        A piece of the problem (a split, one packed sequence): the caller sets the piece's
        initial state and ``cu_seqlens``.
        """

        def cut(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[:, lo:hi]

        return replace(
            self,
            q=self.q[:, lo:hi],
            k=self.k[:, lo:hi],
            v=self.v[:, lo:hi],
            beta=self.beta[:, lo:hi],
            g=cut(self.g),
            gv=cut(self.gv),
        )

    def inputs(self) -> dict[str, torch.Tensor]:
        """Return the differentiable inputs that exist, by name (``q`` ... ``initial_state``)."""
        named = {
            "q": self.q,
            "k": self.k,
            "v": self.v,
            "beta": self.beta,
            "g": self.g,
            "gv": self.gv,
            "initial_state": self.initial_state,
        }
        return {name: t for name, t in named.items() if t is not None}


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """Return x / sqrt(Σ_i x_i² + `L2NORM_EPS`) over the last axis, in the dtype of x."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def _fail(message: str) -> InvalidArgument:
    return InvalidArgument(message)


def _check_device(name: str, x: torch.Tensor, device: torch.device) -> None:
    if x.device != device:
        raise _fail(f"Expected {name} on {device} (as q) but got {x.device}.")


def validate_delta(
    q: Any,
    k: Any,
    v: Any,
    beta: Any,
    g: Any = None,
    *,
    scale: Any = None,
    l2norm_qk: Any = False,
    initial_state: Any = None,
    output_final_state: Any = False,
    cu_seqlens: Any = None,
    allow_negative_eigenvalues: Any = False,
    gv: Any = None,
) -> DeltaProblem:
    """Check one instance of the delta rule and resolve its options.

    Keys need not be unit-norm: A_t is non-expansive only while beta_t ||k_t||^2 <= 2 (see the
    module docstring), but a problem outside that is valid, merely ill-conditioned.

    Args:
        q: Queries ``[B, T, H, K]``.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        beta: Write strengths ``[B, T, H]`` in [0, 1], or [0, 2) with
            ``allow_negative_eigenvalues``.
        g: Natural-log gate, finite and <= 0: ``[B, T, H]`` (Gated DeltaNet) or
            ``[B, T, H, K]`` (KDA). Default: `None`.
        scale: Scale applied to q; `None` means K^-1/2. Default: `None`.
        l2norm_qk: L2-normalise q and k first (FLA's ``use_qk_l2norm_in_kernel``).
            Default: `False`.
        initial_state: S_0 ``[N, H, K, V]``. Default: `None`.
        output_final_state: Return S_T ``[N, H, K, V]``. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]``, rising from 0 to T, needs B == 1.
            Default: `None`.
        allow_negative_eigenvalues: Accept beta in [0, 2) instead of [0, 1]. Default: `False`.
        gv: Value gate ``[B, T, H, V]``, finite and <= 0. Default: `None`.

    Returns:
        The validated `DeltaProblem`.

    Raises:
        InvalidArgument: naming the first argument that is malformed and what was expected.
    """
    q = check_tensor("q", q, 4, "[B, T, H, K]")
    B, T, H, K = q.shape
    k = check_tensor("k", k, 4, "[B, T, H, K]")
    v = check_tensor("v", v, 4, "[B, T, H, V]")
    if k.shape != q.shape:
        raise _fail(f"Expected k of shape {tuple(q.shape)} (as q) but got {tuple(k.shape)}.")
    if v.shape[:3] != q.shape[:3]:
        raise _fail(
            f"Expected v of shape [B={B}, T={T}, H={H}, V] (as q) but got {tuple(v.shape)}."
        )
    if min(B, T, H, K, v.shape[-1]) < 1:
        raise _fail(
            f"Expected q, v with B, T, H, K, V >= 1 but got q {tuple(q.shape)}, v {tuple(v.shape)}."
        )
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise _fail(f"Expected q, k, v of one dtype but got {q.dtype}, {k.dtype}, {v.dtype}.")
    _check_device("k", k, q.device)
    _check_device("v", v, q.device)
    negative = check_flag("allow_negative_eigenvalues", allow_negative_eigenvalues)
    beta = check_tensor("beta", beta, 3, "[B, T, H]")
    if beta.shape != q.shape[:3]:
        raise _fail(f"Expected beta of shape {tuple(q.shape[:3])} but got {tuple(beta.shape)}.")
    _check_device("beta", beta, q.device)
    lo, hi = float(beta.min()), float(beta.max())
    if negative and (lo < 0 or hi >= 2):
        raise _fail(
            f"Expected beta in [0, 2) (allow_negative_eigenvalues=True) but got "
            f"min(beta)={lo:.6g}, max(beta)={hi:.6g}."
        )
    if not negative and (lo < 0 or hi > 1):
        raise _fail(
            f"Expected beta in [0, 1] but got min(beta)={lo:.6g}, max(beta)={hi:.6g} "
            "(beta in [0, 2) needs allow_negative_eigenvalues=True)."
        )
    if g is not None:
        layout = "[B, T, H] or [B, T, H, K]"
        g = check_tensor("g", g, 4 if getattr(g, "ndim", None) == 4 else 3, layout)
        if g.shape not in (q.shape[:3], q.shape):
            raise _fail(
                f"Expected g of shape {layout} = {tuple(q.shape[:3])} or {tuple(q.shape)} "
                f"but got {tuple(g.shape)}."
            )
        _check_device("g", g, q.device)
        if bool((g > 0).any()):
            raise _fail(f"Expected g <= 0 (a log decay) but got max(g)={float(g.max()):.6g}.")
    if gv is not None:
        gv = check_tensor("gv", gv, 4, "[B, T, H, V]")
        if gv.shape != v.shape:
            raise _fail(
                f"Expected gv of shape [B, T, H, V] = {tuple(v.shape)} but got {tuple(gv.shape)}."
            )
        _check_device("gv", gv, q.device)
        if bool((gv > 0).any()):
            raise _fail(f"Expected gv <= 0 (a log decay) but got max(gv)={float(gv.max()):.6g}.")
    resolved_scale = K**-0.5 if scale is None else check_real("scale", scale)
    l2norm_qk = check_flag("l2norm_qk", l2norm_qk)
    output_final_state = check_flag("output_final_state", output_final_state)
    bounds = None if cu_seqlens is None else check_cu_seqlens(cu_seqlens, B, T)
    N = B if bounds is None else bounds.numel() - 1
    if initial_state is not None:
        initial_state = check_tensor("initial_state", initial_state, 4, "[N, H, K, V]")
        expected = (N, H, K, v.shape[-1])
        if tuple(initial_state.shape) != expected:
            raise _fail(
                f"Expected initial_state of shape [N, H, K, V] = {expected} but got "
                f"{tuple(initial_state.shape)}."
            )
        _check_device("initial_state", initial_state, q.device)
    return DeltaProblem(
        q=q,
        k=k,
        v=v,
        beta=beta,
        g=g,
        scale=resolved_scale,
        l2norm_qk=l2norm_qk,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=bounds,
        gv=gv,
    )


__all__ = ["DELTA_OMITTABLE", "L2NORM_EPS", "DeltaProblem", "l2norm", "validate_delta"]
