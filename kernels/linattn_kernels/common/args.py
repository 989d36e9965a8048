# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Argument checking and preparation shared by the three forms' host launchers (torch only)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from linattn_kernels import _backend
from linattn_kernels.common.feature_maps import FEATURE_CODES

MAX_HEAD_DIM = 256
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

SCALAR_GATE = 1
"""The kernels' constexpr ``GATE`` for g ``[B, T, H]``, one log decay per token and head.

``GATE`` is 0 without a g; each kernel compiles only the branches of the gate it is given.
"""

VECTOR_GATE = 2
"""The kernels' constexpr ``GATE`` for g ``[B, T, H, K]``, one log decay per key dimension."""


@dataclass(frozen=True)
class Inputs:
    """Validated, contiguous kernel inputs (see `prepare`)."""

    q: torch.Tensor  # [B, T, H, K], input dtype, contiguous
    k: torch.Tensor  # [B, T, H, K]
    v: torch.Tensor  # [B, T, H, V]
    g: torch.Tensor | None  # [B, T, H] or [B, T, H, K] (vector gate) fp32, or None
    scale: float
    feature: int  # FEATURE_CODES value
    normalize: bool
    eps: float
    h0: torch.Tensor | None  # [N, H, K, V] fp32
    z0: torch.Tensor | None  # [N, H, K] fp32 (normalized only)
    output_final_state: bool
    cu_seqlens: torch.Tensor | None  # [N+1] int64 on the inputs' device
    B: int
    T: int
    H: int
    K: int
    V: int
    N: int  # number of sequences

    @property
    def gate(self) -> int:
        """The kernels' ``GATE``: 0 without g, else `SCALAR_GATE` or `VECTOR_GATE` by g's rank."""
        if self.g is None:
            return 0
        return VECTOR_GATE if self.g.ndim == 4 else SCALAR_GATE


def _tensor(name: str, x: object, layout: str, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim != ndim:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"Expected {name} of shape {layout} but got {got}.")
    return x


def prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    *,
    scale: float | None,
    normalize: bool,
    eps: float,
    feature_map: str,
    initial_state: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
) -> Inputs:
    """Check the calling convention (docs/design.md §3-4) and return contiguous kernel inputs.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    q = _tensor("q", q, "[B, T, H, K]", 4)
    B, T, H, K = q.shape
    k = _tensor("k", k, "[B, T, H, K]", 4)
    v = _tensor("v", v, "[B, T, H, V]", 4)
    V = v.shape[-1]
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"Expected k {tuple(q.shape)} and v [B, T, H, V] matching q but got k "
            f"{tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(
            f"Expected q, k, v of one dtype among float32, float16, bfloat16 but got "
            f"{q.dtype}, {k.dtype}, {v.dtype}."
        )
    if k.device != q.device or v.device != q.device:
        raise ValueError("Expected q, k, v on one device.")
    if min(B, T, H) < 1 or not (1 <= K <= MAX_HEAD_DIM and 1 <= V <= MAX_HEAD_DIM):
        raise ValueError(
            f"Expected B, T, H >= 1 and 1 <= K, V <= {MAX_HEAD_DIM} but got B={B}, T={T}, "
            f"H={H}, K={K}, V={V}."
        )
    if feature_map not in FEATURE_CODES:
        raise ValueError(
            f"Got feature_map={feature_map!r}, but feature_map must be one of "
            f"{tuple(FEATURE_CODES)}."
        )
    if scale is None:
        scale = K**-0.5
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ValueError(f"Expected scale to be a finite float or None but got scale={scale!r}.")
    if not isinstance(eps, int | float) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"Expected eps to be a float >= 0 but got eps={eps!r}.")
    if eps and not normalize:
        raise ValueError(
            f"Got eps={eps!r} with normalize=False; eps only applies to normalized output."
        )
    if g is not None:
        # A scalar gate (one decay per token and head) or a vector gate (one per key dimension).
        scalar, vector = tuple(q.shape[:3]), tuple(q.shape)
        if not isinstance(g, torch.Tensor) or tuple(g.shape) not in (scalar, vector):
            got = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
            raise ValueError(
                f"Expected g of shape [B, T, H] or [B, T, H, K], here {scalar} or {vector}, "
                f"but got {got}."
            )
        if not g.dtype.is_floating_point or g.device != q.device:
            raise ValueError(f"Expected g to be a floating tensor on {q.device}.")
        # One device sync, paid for rejecting a positive "decay" that would make exp(G) grow.
        if g.numel() and bool((g > 0).any()):
            raise ValueError(f"Expected g <= 0 (a log decay) but got max(g)={float(g.max()):.6g}.")
        g = g.float().contiguous()
    if cu_seqlens is not None:
        cu_seqlens = _tensor("cu_seqlens", cu_seqlens, "[N+1]", 1)
        if B != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype.is_floating_point:
            raise ValueError(
                f"Expected cu_seqlens to be an integer tensor [N+1] (N >= 1) with B == 1 but got "
                f"{cu_seqlens.numel()} entries, dtype={cu_seqlens.dtype}, B={B}."
            )
        bounds = cu_seqlens.to("cpu", torch.int64)
        if int(bounds[0]) != 0 or int(bounds[-1]) != T or bool((bounds[1:] < bounds[:-1]).any()):
            raise ValueError(
                f"Expected cu_seqlens to rise from 0 to T={T} but got {bounds.tolist()}."
            )
        cu_seqlens = bounds.to(q.device)
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    h0, z0 = _initial_state(initial_state, normalize, N, H, K, V, q.device)
    return Inputs(
        q=q.contiguous(),
        k=k.contiguous(),
        v=v.contiguous(),
        g=g,
        scale=float(scale),
        feature=FEATURE_CODES[feature_map],
        normalize=bool(normalize),
        eps=float(eps),
        h0=h0,
        z0=z0,
        output_final_state=bool(output_final_state),
        cu_seqlens=cu_seqlens,
        B=B,
        T=T,
        H=H,
        K=K,
        V=V,
        N=N,
    )


def _initial_state(
    initial_state: object, normalize: bool, N: int, H: int, K: int, V: int, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if initial_state is None:
        return None, None
    if normalize:
        if not (isinstance(initial_state, tuple | list) and len(initial_state) == 2):
            raise ValueError(
                "Expected initial_state=(S [N, H, K, V], z [N, H, K]) when normalize=True."
            )
        S0, z0 = initial_state
    else:
        S0, z0 = initial_state, None
    S0 = _tensor("initial_state", S0, "[N, H, K, V]", 4)
    if tuple(S0.shape) != (N, H, K, V) or S0.device != device:
        raise ValueError(
            f"Expected initial_state of shape {(N, H, K, V)} on {device} but got "
            f"{tuple(S0.shape)} on {S0.device}."
        )
    if z0 is not None:
        z0 = _tensor("initial_state[1]", z0, "[N, H, K]", 3)
        if tuple(z0.shape) != (N, H, K) or z0.device != device:
            raise ValueError(f"Expected initial_state[1] of shape {(N, H, K)} on {device}.")
        z0 = z0.float().contiguous()
    return S0.float().contiguous(), z0


def empty_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Allocate an output buffer the kernel stores into.

    Under the interpreter a bf16 store truncates instead of rounding (docs/interpreter.md), so bf16
    outputs are stored as fp32 and rounded by `finish_output`.
    """
    if _backend.INTERPRETING and dtype == torch.bfloat16:
        dtype = torch.float32
    return torch.empty(shape, dtype=dtype, device=device)


def forward_outputs(x: Inputs, *, unrounded: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Allocate the forward's output o ``[B, T, H, V]`` and denominator ``[B, T, H]`` buffers.

    With ``unrounded`` (a normalized output whose backward reads o before its rounding to the
    input dtype) o is fp32 and the denominator is kept; otherwise o is an `empty_output` in the
    input dtype and there is no denominator buffer.
    """
    shape = (x.B, x.T, x.H, x.V)
    device = x.q.device
    if unrounded:
        den = torch.empty(shape[:3], dtype=torch.float32, device=device)
        return torch.empty(shape, dtype=torch.float32, device=device), den
    return empty_output(shape, x.q.dtype, device), None


def finish_output(buffer: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round a buffer from `empty_output` to ``dtype`` (a no-op when it already is)."""
    return buffer if buffer.dtype == dtype else buffer.to(dtype)
