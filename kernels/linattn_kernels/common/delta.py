# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Pieces of the token-recurrent delta rule: argument checks (host) and per-token loads (device).

Host side: `DeltaInputs` and `prepare_delta` check a call in FLA's calling convention
(``fn(q, k, v, g, beta, *, scale, initial_state, output_final_state, cu_seqlens,
use_qk_l2norm_in_kernel)``) and return contiguous tensors plus the sequence bounds; `segments`
builds the checkpoint table of the backward. Device side: `load_unit` (a q or k row, optionally
L2-normalised), `l2norm_grad` (the chain rule through that norm) and `load_decay` (e^{g_t}).

The gate is a constexpr ``GATE``: 0 none, 1 scalar (g ``[tokens, H]``), 2 vector
(g ``[tokens, H, K]``). Every load comes back in fp32 at once (docs/interpreter.md: bf16
arithmetic is wrong under the interpreter, and the recipe accumulates in fp32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

L2NORM_EPS = 1e-6
"""eps of the in-kernel L2 norm x / sqrt(Σx² + eps) (FLA's ``use_qk_l2norm_in_kernel``); it is
added in fp32, i.e. as fl32(1e-6), as FLA's kernels add it."""

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""The dtypes q, k and v may have (one of them, shared)."""

MAX_HEAD_DIM = 256
"""Largest K (the whole key dimension is one register tile) and V (split into blocks)."""

GATE_NONE, GATE_SCALAR, GATE_VECTOR = 0, 1, 2
"""The ``GATE`` constexpr codes."""


@dataclass(frozen=True)
class DeltaInputs:
    """Validated, contiguous inputs of a delta-rule kernel (see `prepare_delta`).

    Attributes:
        q: Queries ``[B, T, H, K]``, input dtype.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Gate ``[B, T, H]`` or ``[B, T, H, K]`` (its own floating dtype), or `None`.
        beta: Write strengths ``[B, T, H]`` (its own floating dtype).
        scale: The resolved scale s of q.
        h0: S_0 ``[N, H, K, V]`` fp32, or `None`.
        bounds: Sequence boundaries ``[N+1]`` int64 on the inputs' device (dense batches too:
            row b is the packed tokens [b T, (b + 1) T)).
        lengths: The N sequence lengths (host ints).
        output_final_state: Whether S_T is returned.
        l2norm: Whether q and k are L2-normalised in the kernel.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    beta: torch.Tensor
    scale: float
    h0: torch.Tensor | None
    bounds: torch.Tensor
    lengths: tuple[int, ...]
    output_final_state: bool
    l2norm: bool

    @property
    def gate(self) -> int:
        """The ``GATE`` code of ``g``."""
        if self.g is None:
            return GATE_NONE
        return GATE_SCALAR if self.g.ndim == 3 else GATE_VECTOR

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """``(B, T, H, K, V, N)``."""
        B, T, H, K = self.q.shape
        return B, T, H, K, self.v.shape[-1], len(self.lengths)


def _shape(x: object) -> object:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


def prepare_delta(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    *,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
) -> DeltaInputs:
    """Check a call in the family's calling convention and return contiguous kernel inputs.

    Values are not inspected (beta in [0, 2), g <= 0 are the caller's contract): that would
    cost a device synchronisation per call. cu_seqlens is read on the host once.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if not isinstance(q, torch.Tensor) or q.ndim != 4:
        raise ValueError(f"Expected q of shape [B, T, H, K] but got {_shape(q)}.")
    B, T, H, K = q.shape
    if not isinstance(k, torch.Tensor) or k.shape != q.shape:
        raise ValueError(f"Expected k of shape {tuple(q.shape)} but got {_shape(k)}.")
    if not isinstance(v, torch.Tensor) or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"Expected v of shape [{B}, {T}, {H}, V] but got {_shape(v)}.")
    V = v.shape[-1]
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(
            f"Expected q, k, v of one dtype among float32, float16, bfloat16 but got "
            f"{q.dtype}, {k.dtype}, {v.dtype}."
        )
    if k.device != q.device or v.device != q.device:
        raise ValueError("Expected q, k, v on one device.")
    if not (1 <= K <= MAX_HEAD_DIM and 1 <= V <= MAX_HEAD_DIM):
        raise ValueError(f"Got K={K}, V={V}, but head dims must lie in [1, {MAX_HEAD_DIM}].")
    if (
        not isinstance(beta, torch.Tensor)
        or tuple(beta.shape) != (B, T, H)
        or not beta.dtype.is_floating_point
    ):
        raise ValueError(f"Expected beta, a floating tensor {(B, T, H)}, but got {_shape(beta)}.")
    if g is not None and (
        not isinstance(g, torch.Tensor)
        or tuple(g.shape) not in ((B, T, H), (B, T, H, K))
        or not g.dtype.is_floating_point
    ):
        raise ValueError(
            f"Expected g, a floating tensor {(B, T, H)} (scalar gate) or {(B, T, H, K)} "
            f"(vector gate), or None, but got {_shape(g)}."
        )
    if scale is None:
        scale = K**-0.5
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ValueError(f"Expected scale to be a finite float or None but got scale={scale!r}.")
    if cu_seqlens is None:
        lengths = (T,) * B
        bounds = torch.arange(B + 1, dtype=torch.int64) * T
    else:
        if (
            not isinstance(cu_seqlens, torch.Tensor)
            or cu_seqlens.ndim != 1
            or cu_seqlens.numel() < 2
            or cu_seqlens.dtype.is_floating_point
            or B != 1
        ):
            raise ValueError(
                f"Expected cu_seqlens, an integer tensor [N+1] (N >= 1), with B == 1 but got "
                f"{_shape(cu_seqlens)} and B={B}."
            )
        bounds = cu_seqlens.to("cpu", torch.int64)
        if int(bounds[0]) != 0 or int(bounds[-1]) != T or bool((bounds[1:] < bounds[:-1]).any()):
            raise ValueError(
                f"Expected cu_seqlens to rise from 0 to T={T} but got {bounds.tolist()}."
            )
        lengths = tuple(int(x) for x in bounds[1:] - bounds[:-1])
    N = len(lengths)
    h0 = None
    if initial_state is not None:
        if (
            not isinstance(initial_state, torch.Tensor)
            or tuple(initial_state.shape) != (N, H, K, V)
            or initial_state.device != q.device
        ):
            raise ValueError(
                f"Expected initial_state of shape {(N, H, K, V)} on {q.device} but got "
                f"{_shape(initial_state)}."
            )
        h0 = initial_state.float().contiguous()
    return DeltaInputs(
        q=q.contiguous(),
        k=k.contiguous(),
        v=v.contiguous(),
        g=None if g is None else g.contiguous(),
        beta=beta.contiguous(),
        scale=float(scale),
        h0=h0,
        bounds=bounds.to(q.device),
        lengths=lengths,
        output_final_state=bool(output_final_state),
        l2norm=bool(use_qk_l2norm_in_kernel),
    )


def checkpoint_interval(lengths: tuple[int, ...], requested: int | None) -> int:
    """The backward's segment length C: ``requested``, else about sqrt(longest sequence).

    The backward keeps one fp32 state per C tokens (the checkpoints) plus C states of one segment
    (the scratch), ``(L / C + C) K V`` per head, least at C = sqrt(L); a power of two keeps the
    number of compiled variants small.

    Raises:
        ValueError: if ``requested`` is not an int >= 1.
    """
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(
                f"Got checkpoint_every={requested!r}, but it must be an int >= 1 or None."
            )
        return requested
    longest = max(lengths, default=1)
    return int(min(256, max(8, triton.next_power_of_2(math.isqrt(max(longest, 1))))))


def segments(lengths: tuple[int, ...], C: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """The first checkpoint of each sequence ``[N]`` (int64) and the number of checkpoints.

    Sequence n owns ceil(L_n / C) checkpoints (none when it is empty), the state entering each
    of its segments of C tokens.
    """
    counts = torch.tensor([-(-n // C) for n in lengths], dtype=torch.int64)
    offsets = torch.cumsum(counts, 0) - counts
    return offsets.to(device), int(counts.sum())


@triton.jit
def load_unit(x, i_th, K, o_k, m_k, L2NORM: tl.constexpr, EPS: tl.constexpr):
    """Load row ``i_th`` of a [tokens·H, K] q or k in fp32: ``(x̂ [BK], n)``.

    With L2NORM x̂ = x / n, n = sqrt(Σx² + EPS), a correctly rounded sqrt and one correctly
    rounded division per element (the recipe's γ_{K+3}); without it x̂ = x and n = 1.
    """
    b_x = tl.load(x + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32)  # [BK]
    b_n = tl.sum(b_x * 0.0, axis=0) + 1.0
    if L2NORM:
        b_n = tl.sqrt_rn(tl.sum(b_x * b_x, axis=0) + EPS)
        b_x = tl.div_rn(b_x, b_n + b_x * 0.0)
    return b_x, b_n


@triton.jit
def l2norm_grad(b_dx, b_x, b_n, L2NORM: tl.constexpr):
    """The gradient of the raw row from that of x̂ = x / n: (dx̂ - x̂ (x̂ · dx̂)) / n."""
    if L2NORM:
        b_dx = tl.div_rn(b_dx - b_x * tl.sum(b_x * b_dx, axis=0), b_n + b_dx * 0.0)
    return b_dx


@triton.jit
def load_decay(g, i_th, K, o_k, m_k, GATE: tl.constexpr):
    """e^{g_t} of row ``i_th`` as [BK] (a scalar gate broadcast; ones without a gate)."""
    if GATE == 2:
        b_a = tl.exp(tl.load(g + i_th * K + o_k, mask=m_k, other=0.0).to(tl.float32))
    elif GATE == 1:
        b_a = tl.exp(tl.load(g + i_th).to(tl.float32)) + tl.zeros_like(o_k).to(tl.float32)
    else:
        b_a = tl.full(o_k.shape, 1.0, dtype=tl.float32)
    return b_a


__all__ = [
    "GATE_NONE",
    "GATE_SCALAR",
    "GATE_VECTOR",
    "INPUT_DTYPES",
    "L2NORM_EPS",
    "MAX_HEAD_DIM",
    "DeltaInputs",
    "checkpoint_interval",
    "l2norm_grad",
    "load_decay",
    "load_unit",
    "prepare_delta",
    "segments",
]
