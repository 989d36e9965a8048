# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Lifted feature maps φ: R^K -> R^F (taylor2, rebased, favor+) as Triton kernels, and their VJP.

Rows of x ``[..., K]`` become fp32 features ``[..., F]`` in the i-major order of
docs/design.md §3: taylor2 (1, x, x_i x_j / √2), F = 1 + K + K²; rebased (x_i x_j), F = K²;
favor+ exp(W x - |x|²/2) / √m, F = m. An optional prescale p multiplies x first (the score
maps' query scale). The backward is dx = p J_φ(px)^T dφ in fp32, rounded to x's dtype on the
host. Jacobians and the rounding of every feature are derived in this package's README.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

LIFTED_CODES = {"taylor2": 0, "rebased": 1, "favor+": 2}
"""The constexpr ``MAP`` value each lifted map compiles to."""

LIFTED_MAPS = tuple(LIFTED_CODES)
"""The lifted maps' names."""

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# fl32(1/√2): the quadratic features' factor, one rounding of its own (README, "Rounding").
_INV_SQRT2 = tl.constexpr(0.5**0.5)


@triton.jit
def _load_rows(x, o_r, m_r, K, o_k, m_k, prescale):
    """Load a [BR, BK] block of the [R, K] rows in fp32 and multiply it by the prescale."""
    b_x = tl.load(x + o_r[:, None] * K + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0.0)
    return b_x.to(tl.float32) * prescale


@triton.jit
def _favor_exponent(b_x, b_n, w, K, o_k, m_k, o_m, m_m):
    """y = W x - |x|²/2 [BR, BM] for the feature rows o_m, with b_n = |x|²/2 [BR]."""
    # [BM, BK]
    b_w = tl.load(w + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None] & m_k[None, :], other=0.0)
    # A K-term fp32 sum of products, not tl.dot: tf32 operands would cost ~2^-11 per term.
    b_wx = tl.sum(b_x[:, None, :] * b_w[None, :, :], axis=2)
    return b_wx - b_n[:, None]


@triton.jit
def lift_fwd_kernel(
    x, w, phi, prescale, inv_sqrt_m, R, K, M, F, OFF,
    MAP: tl.constexpr, STABILISE: tl.constexpr,
    BR: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr,
):  # fmt: skip
    """φ(p x) of BR rows (grid: row blocks, i-blocks of BI rows of the x_i x_j square)."""
    i_r = tl.program_id(0).to(tl.int64)
    i_i = tl.program_id(1).to(tl.int64)
    o_r = i_r * BR + tl.arange(0, BR).to(tl.int64)
    m_r = o_r < R
    o_k = tl.arange(0, BK).to(tl.int64)
    m_k = o_k < K
    # [BR, BK]
    b_x = _load_rows(x, o_r, m_r, K, o_k, m_k, prescale)
    if MAP == 2:
        # |x|²/2: a K-term fp32 sum and an exact halving. [BR]
        b_n = 0.5 * tl.sum(b_x * b_x, axis=1)
        b_c = tl.zeros([BR], dtype=tl.float32)
        if STABILISE:
            # The row's largest exponent, over every feature block first.
            b_c = tl.full([BR], float("-inf"), tl.float32)
            for m0 in range(0, M, BM):
                o_m = m0 + tl.arange(0, BM).to(tl.int64)
                m_m = o_m < M
                b_y = _favor_exponent(b_x, b_n, w, K, o_k, m_k, o_m, m_m)
                b_c = tl.maximum(b_c, tl.max(tl.where(m_m[None, :], b_y, float("-inf")), axis=1))
        for m0 in range(0, M, BM):
            o_m = m0 + tl.arange(0, BM).to(tl.int64)
            m_m = o_m < M
            # Recomputed, not stored and reloaded: bitwise the same y as in the max above.
            b_y = _favor_exponent(b_x, b_n, w, K, o_k, m_k, o_m, m_m)
            if STABILISE:
                b_y = b_y - b_c[:, None]
            # [BR, BM]
            b_phi = tl.exp(b_y) * inv_sqrt_m
            p = phi + o_r[:, None] * F + o_m[None, :]
            tl.store(p, b_phi, mask=m_r[:, None] & m_m[None, :])
    else:
        if MAP == 0:
            # The constant and the linear features, written once: by the first i-block only.
            # The test is broadcast to a block first (the interpreter turns scalar & block
            # into ints).
            first = (o_k * 0 + i_i) == 0
            m = m_r[:, None] & (m_k & first)[None, :]
            tl.store(phi + o_r[:, None] * F + 1 + o_k[None, :], b_x, mask=m)
            m_one = m_r & ((o_r * 0 + i_i) == 0)
            tl.store(phi + o_r * F, tl.full([BR], 1.0, tl.float32), mask=m_one)
        o_i = i_i * BI + tl.arange(0, BI).to(tl.int64)
        m_i = o_i < K
        # [BR, BI]
        b_xi = _load_rows(x, o_r, m_r, K, o_i, m_i, prescale)
        # [BR, BI, BK]: x_i x_j, then (taylor2) times fl(1/√2): two roundings, as the README says.
        b_q = b_xi[:, :, None] * b_x[:, None, :]
        if MAP == 0:
            b_q = b_q * _INV_SQRT2
        p = phi + o_r[:, None, None] * F + OFF + o_i[None, :, None] * K + o_k[None, None, :]
        m = m_r[:, None, None] & m_i[None, :, None] & m_k[None, None, :]
        tl.store(p, b_q, mask=m)


@triton.jit
def lift_bwd_kernel(
    x, w, phi, dphi, dx, prescale, R, K, M, F, OFF,
    MAP: tl.constexpr, STABILISE: tl.constexpr,
    BR: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr,
):  # fmt: skip
    """dx = p J_φ(p x)^T dφ of BR rows in fp32 (grid: row blocks, i-blocks of BI dims of x)."""
    i_r = tl.program_id(0).to(tl.int64)
    i_i = tl.program_id(1).to(tl.int64)
    o_r = i_r * BR + tl.arange(0, BR).to(tl.int64)
    m_r = o_r < R
    o_i = i_i * BI + tl.arange(0, BI).to(tl.int64)
    m_i = o_i < K
    # [BR, BI]
    b_dx = tl.zeros([BR, BI], dtype=tl.float32)
    if MAP == 2:
        # favor+: dx_i = Σ_f φ_f dφ_f (W_fi - x_i). Summed in this form, not as (φ⊙dφ)W - Σ(φ⊙dφ) x:
        # the error then scales with Σ|φ dφ||W - x|, not with Σ|φ dφ|(|W| + |x|).
        b_xi = _load_rows(x, o_r, m_r, K, o_i, m_i, prescale)
        for m0 in range(0, M, BM):
            o_m = m0 + tl.arange(0, BM).to(tl.int64)
            m_m = o_m < M
            m = m_r[:, None] & m_m[None, :]
            # [BR, BM]
            b_phi = tl.load(phi + o_r[:, None] * F + o_m[None, :], mask=m, other=0.0)
            b_dphi = tl.load(dphi + o_r[:, None] * F + o_m[None, :], mask=m, other=0.0)
            b_pc = b_phi * b_dphi.to(tl.float32)
            # [BM, BI]
            m_w = m_m[:, None] & m_i[None, :]
            b_w = tl.load(w + o_m[:, None] * K + o_i[None, :], mask=m_w, other=0.0)
            # [BR, BM, BI]
            if STABILISE:
                # The consumer ignores every per-row factor (README, "Stabilised favor+"):
                # exp(-|x|²/2 - c) is one, so only W x carries a gradient. Dropping the -x_i
                # Σ_f φ_f dφ_f term (exactly 0 for such a consumer) also drops its cancellation
                # error, u |x| Σ|φ dφ|, which dominates for large |x|.
                b_t = b_pc[:, :, None] * b_w[None, :, :]
            else:
                b_t = b_pc[:, :, None] * (b_w[None, :, :] - b_xi[:, None, :])
            b_dx += tl.sum(b_t, axis=1)
    else:
        o_k = tl.arange(0, BK).to(tl.int64)
        m_k = o_k < K
        # [BR, BK]
        b_x = _load_rows(x, o_r, m_r, K, o_k, m_k, prescale)
        m = m_r[:, None, None] & m_i[None, :, None] & m_k[None, None, :]
        base = dphi + o_r[:, None, None] * F + OFF
        # [BR, BI, BK]: dΦ_ij and dΦ_ji, the two places x_i enters x_a x_b.
        b_d1 = tl.load(base + o_i[None, :, None] * K + o_k[None, None, :], mask=m, other=0.0)
        b_d2 = tl.load(base + o_k[None, None, :] * K + o_i[None, :, None], mask=m, other=0.0)
        b_s = (b_d1.to(tl.float32) + b_d2.to(tl.float32)) * b_x[:, None, :]
        b_dx = tl.sum(b_s, axis=2)
        if MAP == 0:
            m_lin = m_r[:, None] & m_i[None, :]
            b_lin = tl.load(dphi + o_r[:, None] * F + 1 + o_i[None, :], mask=m_lin, other=0.0)
            b_dx = b_dx * _INV_SQRT2 + b_lin.to(tl.float32)
    b_dx = b_dx * prescale
    tl.store(dx + o_r[:, None] * K + o_i[None, :], b_dx, mask=m_r[:, None] & m_i[None, :])


def feature_count(feature_map: str, K: int, M: int) -> int:
    """F for a lifted map of K-vectors (M: the rows of favor+'s W)."""
    return {"taylor2": 1 + K + K * K, "rebased": K * K, "favor+": M}[feature_map]


def _blocks(code: int, K: int, M: int) -> tuple[int, int, int, int]:
    """(BR, BI, BK, BM): tiles of at most ~4096 fp32 values, whole K rows."""
    BK = triton.next_power_of_2(K)
    if code == 2:
        BM = min(triton.next_power_of_2(M), max(1, 4096 // BK))
        return max(1, min(64, 4096 // (BM * BK))), BK, BK, BM
    BI = min(BK, max(1, 4096 // BK))
    return max(1, min(64, 4096 // (BI * BK))), BI, BK, 1


def lift_fwd(
    x: torch.Tensor, w: torch.Tensor | None, *, code: int, prescale: float, stabilise: bool
) -> torch.Tensor:
    """φ(p x) ``[R, F]`` fp32 of rows x ``[R, K]`` (contiguous; w ``[M, K]`` fp32 for favor+)."""
    R, K = x.shape
    M = 0 if w is None else w.shape[0]
    F = feature_count(tuple(LIFTED_CODES)[code], K, M)
    phi = torch.empty(R, F, dtype=torch.float32, device=x.device)
    if R == 0:
        return phi
    BR, BI, BK, BM = _blocks(code, K, M)
    grid = (triton.cdiv(R, BR), triton.cdiv(K, BI) if code != 2 else 1)
    lift_fwd_kernel[grid](
        x=x, w=x if w is None else w, phi=phi, prescale=prescale,
        inv_sqrt_m=1.0 / math.sqrt(max(M, 1)), R=R, K=K, M=M, F=F, OFF=F - K * K, MAP=code,
        STABILISE=stabilise, BR=BR, BI=BI, BK=BK, BM=BM,
    )  # fmt: skip
    return phi


def lift_bwd(
    x: torch.Tensor,
    w: torch.Tensor | None,
    phi: torch.Tensor | None,
    dphi: torch.Tensor,
    *,
    code: int,
    prescale: float,
    stabilise: bool = False,
) -> torch.Tensor:
    """dx = p J^T dφ ``[R, K]`` fp32 (favor+ reads its forward features ``phi``).

    With ``stabilise`` (favor+) the per-row factor exp(-|x|²/2 - c) is held constant.
    """
    R, K = x.shape
    M = 0 if w is None else w.shape[0]
    F = dphi.shape[1]
    dx = torch.empty(R, K, dtype=torch.float32, device=x.device)
    if R == 0:
        return dx
    BR, BI, BK, BM = _blocks(code, K, M)
    lift_bwd_kernel[(triton.cdiv(R, BR), triton.cdiv(K, BI))](
        x=x, w=x if w is None else w, phi=dphi if phi is None else phi, dphi=dphi, dx=dx,
        prescale=prescale, R=R, K=K, M=M, F=F, OFF=F - K * K, MAP=code, STABILISE=stabilise,
        BR=BR, BI=BI, BK=BK, BM=BM,
    )  # fmt: skip
    return dx


class LiftFeaturesFunction(torch.autograd.Function):
    """Autograd glue: runs `lift_fwd`, keeps x (and favor+'s features), runs `lift_bwd`."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        w: torch.Tensor | None,
        code: int,
        prescale: float,
        stabilise: bool,
    ) -> torch.Tensor:
        """Return φ ``[..., F]`` fp32 of x ``[..., K]``."""
        K = x.shape[-1]
        rows = x.reshape(-1, K).contiguous()
        phi = lift_fwd(rows, w, code=code, prescale=prescale, stabilise=stabilise)
        ctx.code, ctx.prescale, ctx.stabilise = code, prescale, stabilise
        ctx.shape, ctx.dtype = x.shape, x.dtype
        ctx.save_for_backward(rows, w, phi if code == 2 else None)
        return phi.reshape(*x.shape[:-1], phi.shape[-1])

    @staticmethod
    def backward(ctx: Any, dphi: torch.Tensor) -> tuple[Any, ...]:
        """Return dx in x's dtype (rounded here, on the host); W and the options get none."""
        rows, w, phi = ctx.saved_tensors
        d = dphi.reshape(rows.shape[0], -1).float().contiguous()
        dx = lift_bwd(
            rows, w, phi, d, code=ctx.code, prescale=ctx.prescale, stabilise=ctx.stabilise
        )
        return dx.reshape(ctx.shape).to(ctx.dtype), None, None, None, None


def _fail(message: str) -> ValueError:
    return ValueError(message)


def _check_weights(weights: object, feature_map: str, x: torch.Tensor) -> torch.Tensor | None:
    """Return W ``[m, K]`` as contiguous fp32 for favor+ (required), None otherwise (refused)."""
    if feature_map != "favor+":
        if weights is not None:
            raise _fail(
                f"Got weights with feature_map={feature_map!r}; only 'favor+' takes a projection W."
            )
        return None
    K = x.shape[-1]
    if not isinstance(weights, torch.Tensor):
        raise _fail(
            f"feature_map='favor+' needs weights: the projection W [m, K], here [m, {K}], "
            f"but got {type(weights).__name__}."
        )
    if weights.ndim != 2 or weights.shape[1] != K or weights.shape[0] < 1:
        raise _fail(f"Expected weights of shape [m >= 1, K={K}] but got {tuple(weights.shape)}.")
    if not weights.dtype.is_floating_point or weights.device != x.device:
        raise _fail(
            f"Expected weights to be a floating tensor on {x.device} (as x) but got "
            f"{weights.dtype} on {weights.device}."
        )
    if not bool(torch.isfinite(weights).all()):
        raise _fail("Expected weights to be finite.")
    # fp32, fp16 and bf16 weights convert exactly; float64 ones are rounded once here.
    return weights.detach().to(torch.float32).contiguous()


def lift_features(
    x: torch.Tensor,
    feature_map: str,
    *,
    prescale: float = 1.0,
    weights: torch.Tensor | None = None,
    stabilise: bool = False,
) -> torch.Tensor:
    """Apply a lifted feature map to the rows of x in a Triton kernel; differentiable in x.

    Args:
        x: Rows ``[..., K]`` (K >= 1), float32, float16 or bfloat16.
        feature_map: ``"taylor2"`` (1, x, x_i x_j/√2), ``"rebased"`` (x_i x_j) or ``"favor+"``
            (exp(W x - |x|²/2)/√m), features in i-major order.
        prescale: A finite float p multiplying x (in fp32) before the map: the score maps'
            query scale. Default: `1.0`.
        weights: favor+'s projection W ``[m, K]`` on x's device (rounded to fp32); it gets no
            gradient (fixed random features). Must be `None` for the other maps.
            Default: `None`.
        stabilise: favor+ only: subtract each row's largest exponent c = max_f (W x - |x|²/2)_f
            before the exp. The backward then holds the whole per-row factor exp(-|x|²/2 - c)
            constant (dx = p Σ_f φ_f dφ_f W_f), which is the exact gradient only for a consumer
            invariant to one positive factor per row (normalized attention with eps = 0); it
            is not the Jacobian of the returned tensor. Default: `False`.

    Returns:
        φ ``[..., F]`` in fp32 (F = 1 + K + K², K² or m).

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if feature_map not in LIFTED_CODES:
        raise _fail(
            f"Got feature_map={feature_map!r}, but feature_map must be one of {LIFTED_MAPS}."
        )
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] < 1:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise _fail(f"Expected x of shape [..., K] with K >= 1 but got {got}.")
    if x.dtype not in INPUT_DTYPES:
        raise _fail(f"Expected x of dtype float32, float16 or bfloat16 but got {x.dtype}.")
    if (
        isinstance(prescale, bool)
        or not isinstance(prescale, int | float)
        or not math.isfinite(prescale)
    ):
        raise _fail(f"Expected prescale to be a finite float but got prescale={prescale!r}.")
    if not isinstance(stabilise, bool) or (stabilise and feature_map != "favor+"):
        raise _fail(
            f"Got stabilise={stabilise!r} with feature_map={feature_map!r}; stabilise must be "
            "a bool, and True only for 'favor+'."
        )
    w = _check_weights(weights, feature_map, x)
    phi: torch.Tensor = LiftFeaturesFunction.apply(
        x, w, LIFTED_CODES[feature_map], float(prescale), stabilise
    )
    return phi


__all__ = [
    "LIFTED_CODES",
    "LIFTED_MAPS",
    "LiftFeaturesFunction",
    "feature_count",
    "lift_bwd",
    "lift_bwd_kernel",
    "lift_features",
    "lift_fwd",
    "lift_fwd_kernel",
]
