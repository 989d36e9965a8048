# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo's shared pieces: the reference forms in float32 and the parts its kernels break.

`bugs.py` (and through it `vector_bugs.py` and `lifted_bugs.py`) builds its correct twins and
broken kernels from these; loaded by path, as the zoo's other modules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from linattn_verify.linear_attn.feature_maps import apply_feature_map
from linattn_verify.linear_attn.oracles._sequence import divide_rows
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.reference_kernels import (
    REFERENCE_CHUNK_SIZE,
    evaluate_form,
)
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.registry import FULL as EVERYTHING

# The elementwise feature maps: the lifted ones have their own zoo (lifted_bugs.py), and several
# twins here build their features elementwise.
FULL = replace(EVERYTHING, gates=("scalar",), feature_maps=("identity", "elu1", "relu"))
"""What the scalar-gate kernels here support: everything the function allows, g ``[B, T, H]``
(the vector-gate kernels are in `vector_bugs.py`)."""

F32 = torch.float32
C = REFERENCE_CHUNK_SIZE
State = Any
Impl = Callable[[Problem], tuple[torch.Tensor, State]]


# Helpers: the reference forms in float32, and the pieces the broken kernels break.


def _out(p: Problem, o: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
    """Round o to the input dtype (the state stays float32) and drop an unrequested state."""
    return o.to(p.q.dtype), state if p.output_final_state else None


def reference(form: str, p: Problem) -> tuple[torch.Tensor, State]:
    """The correct float32 kernel of ``form`` (what `float32_reference` computes)."""
    return _out(p, *evaluate_form(form, p.to(F32)))


def normalized_parts(
    p: Problem,
    *,
    z_scale: float | None = None,
    z_keys: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, State]:
    """A normalized kernel built from two unnormalized chunked runs (a common kernel design).

    N_t = s φ(q_t)^T S_t runs with the values; Z_t - eps = s φ(q_t)^T z_t is the same run with a
    column of ones for v and z_0 as the initial state. ``z_scale`` and ``z_keys`` let a broken
    kernel give the denominator run a different scale or keys.
    """
    if not p.normalize:
        return reference("chunk", p)
    x = p.to(F32)
    plain = replace(x, normalize=False, eps=0.0, initial_key_sum=None, output_final_state=True)
    o_num, S_T = chunk_reference(plain, chunk_size=C)
    z0 = None if x.initial_key_sum is None else x.initial_key_sum[..., None]
    den = replace(
        plain,
        k=x.k if z_keys is None else z_keys(x.k),
        v=x.v.new_ones(*x.v.shape[:3], 1),
        scale=x.scale if z_scale is None else z_scale,
        initial_state=z0,
    )
    o_den, z_T = chunk_reference(den, chunk_size=C)
    o = divide_rows(o_num, o_den[..., 0] + x.eps)
    return _out(p, o, (S_T, z_T[..., 0]))


def _sequence_problem(
    p: Problem, b: int, start: int, end: int, S0: torch.Tensor | None, z0: torch.Tensor | None
) -> Problem:
    """The single sequence ``p[b, start:end]`` as its own problem (B = 1, final state on)."""
    return replace(
        p,
        q=p.q[b : b + 1, start:end],
        k=p.k[b : b + 1, start:end],
        v=p.v[b : b + 1, start:end],
        g=None if p.g is None else p.g[b : b + 1, start:end],
        initial_state=S0,
        initial_key_sum=z0,
        output_final_state=True,
        cu_seqlens=None,
    )


def _row(x: torch.Tensor | None, n: int) -> torch.Tensor | None:
    return None if x is None else x[n : n + 1]


def _zeros_state(p: Problem) -> tuple[torch.Tensor, torch.Tensor | None]:
    _, _, H, K, V = p.shape
    z = p.q.new_zeros(1, H, K) if p.normalize else None
    return p.q.new_zeros(1, H, K, V), z


def per_sequence(
    p: Problem,
    run: Callable[[Problem], tuple[torch.Tensor, State]],
    *,
    carry_at: Callable[[int], bool] = lambda start: False,
    drop_empty: bool = False,
) -> tuple[torch.Tensor, State]:
    """Run ``run`` on each sequence separately (the launch grid of a varlen kernel).

    ``carry_at(start)`` says whether the previous sequence's final state leaks into the one
    starting at ``start``; ``drop_empty`` launches only non-empty sequences and indexes the
    initial state by launch position (both bugs; the defaults are correct).
    """
    x = p.to(F32)
    outputs, finals = [], []
    carried: tuple[torch.Tensor, torch.Tensor | None] | None = None
    launched = 0
    for n, b, start, end in x.sequences():
        if drop_empty and end == start:
            finals.append(_zeros_state(x))
            continue
        row = launched if drop_empty else n
        launched += 1
        S0, z0 = _row(x.initial_state, row), _row(x.initial_key_sum, row)
        if carried is not None and carry_at(start):
            base_S, base_z = _zeros_state(x) if S0 is None else (S0, z0)
            S0 = base_S + carried[0]
            z0 = None if base_z is None or carried[1] is None else base_z + carried[1]
        o, final = run(_sequence_problem(x, b, start, end, S0, z0))
        outputs.append(o[0])
        carried = final if isinstance(final, tuple) else (final, None)
        finals.append(carried)
    B, T, H, _, V = x.shape
    o = torch.cat(outputs, dim=0).reshape(B, T, H, V) if outputs else x.v.new_zeros(B, T, H, V)
    S_T = torch.cat([f[0] for f in finals], dim=0)
    state = (S_T, torch.cat([f[1] for f in finals], dim=0)) if x.normalize else S_T
    return _out(p, o, state)


def _chunk_form(p: Problem) -> tuple[torch.Tensor, State]:
    return chunk_reference(p, chunk_size=C)


class _TotalMinusPrefixCumsum(torch.autograd.Function):
    """G = cumsum(g) whose backward forms the suffix sum Σ_{s>=t} dG_s as total - prefix."""

    @staticmethod
    def forward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(g, dim=-1)

    @staticmethod
    def backward(ctx: Any, dG: torch.Tensor) -> torch.Tensor:
        # The bug (fla PR #1095): total - inclusive prefix + own term cancels catastrophically
        # when the suffix is small next to the total; torch's flip-cumsum-flip does not.
        return dG.sum(-1, keepdim=True) - torch.cumsum(dG, dim=-1) + dG


def parallel_one(x: Problem, bug: str | None = None) -> tuple[torch.Tensor, State]:
    """The parallel form on one float32 sequence (B = 1), with an optional bug.

    Correct (``bug=None``) it is `parallel_reference`. The bugs: ``"exp_before_mask"``
    exponentiates G_i - G_j everywhere and multiplies by the mask (inf * 0 = NaN once
    G_i - G_j > 88 above the diagonal); ``"factored"`` computes exp(G_i) / exp(G_j) (0/0 and
    x/0 once exp(G) underflows, subnormal precision before that); ``"unit_gate_guard"`` clamps
    g <= -1e-6 to guard a log, changing every gate = 1 result; ``"total_minus_prefix"`` takes
    dg from `_TotalMinusPrefixCumsum`; ``"short_unmasked"`` drops the causal mask on sequences
    of at most one block (C tokens).
    """
    s = x.scale
    q = apply_feature_map(x.q[0], x.feature_map).transpose(0, 1)  # [H, L, K]
    k = apply_feature_map(x.k[0], x.feature_map).transpose(0, 1)  # [H, L, K]
    v = x.v[0].transpose(0, 1)  # [H, L, V]
    H, L, K = q.shape
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if bug == "short_unmasked" and L <= C:
        mask = torch.ones(L, L, dtype=torch.bool)
    w_start = w_end = q.new_ones(H, L)
    if x.g is None:
        W = mask.to(q.dtype).expand(H, L, L)
    else:
        g = x.g[0].transpose(0, 1)  # [H, L]
        if bug == "unit_gate_guard":
            g = g.clamp(max=-1e-6)
        G = _TotalMinusPrefixCumsum.apply(g) if bug == "total_minus_prefix" else g.cumsum(-1)
        diff = G[:, :, None] - G[:, None, :]
        w_start = torch.exp(G)
        if bug == "factored":
            W = torch.where(mask, w_start[:, :, None] / w_start[:, None, :], 0.0)
            w_end = w_start[:, -1:] / w_start
        else:
            if bug == "exp_before_mask":
                W = torch.exp(diff) * mask
            else:
                W = torch.exp(diff.masked_fill(~mask, float("-inf")))
            w_end = torch.exp(G[:, -1:] - G)
    P = s * (q @ k.transpose(-1, -2)) * W  # [H, L, L]
    S0 = x.q.new_zeros(H, K, v.shape[-1]) if x.initial_state is None else x.initial_state[0]
    z0 = x.q.new_zeros(H, K) if x.initial_key_sum is None else x.initial_key_sum[0]
    o = P @ v + s * w_start[..., None] * (q @ S0)
    total = w_start[:, -1] if L else q.new_ones(H)
    S_T = (k * w_end[..., None]).transpose(-1, -2) @ v + total[:, None, None] * S0
    z_T = (k * w_end[..., None]).sum(dim=1) + total[:, None] * z0
    if x.normalize:
        Z = P.sum(-1) + s * w_start * (q @ z0[..., None])[..., 0] + x.eps
        o = divide_rows(o, Z)
    o = o.transpose(0, 1)[None]
    return o, (S_T[None], z_T[None]) if x.normalize else S_T[None]


def _parallel_with(bug: str, doc: str) -> Impl:
    """`parallel_one` with ``bug`` on each sequence, as a kernel named ``parallel_<bug>``."""

    def impl(p: Problem) -> tuple[torch.Tensor, State]:
        return per_sequence(p, functools.partial(parallel_one, bug=bug))

    impl.__name__ = f"parallel_{bug}"
    impl.__doc__ = doc
    return impl


def stepwise(x: Problem, state_dtype: torch.dtype = F32) -> tuple[torch.Tensor, State]:
    """The recurrent form on one float32 sequence, keeping the state in ``state_dtype``."""
    S, z = x.initial_state, x.initial_key_sum
    outputs, final = [], None
    for t in range(x.q.shape[1]):
        step = replace(
            x,
            q=x.q[:, t : t + 1],
            k=x.k[:, t : t + 1],
            v=x.v[:, t : t + 1],
            g=None if x.g is None else x.g[:, t : t + 1],
            initial_state=S,
            initial_key_sum=z,
        )
        o, final = recurrent_reference(step)
        outputs.append(o)
        S, z = final if isinstance(final, tuple) else (final, None)
        # The running state lives in state_dtype between steps (a no-op for float32).
        S = S.to(state_dtype).to(F32)
        z = None if z is None else z.to(state_dtype).to(F32)
    if not outputs:
        return recurrent_reference(x)
    return torch.cat(outputs, dim=1), final


def flat_cumsum_denominator(p: Problem, *, over_heads: bool = False) -> tuple[torch.Tensor, State]:
    """Normalized output as N_t / (s φ(q_t)·z_t + eps), z_t a cumulative sum of φ(k).

    Correct, z_t sums over tokens. With ``over_heads`` the cumsum runs over the flattened
    token-head axis of ``[B, T*H, K]``: right for H = 1, mixing heads otherwise.
    """
    x = p.to(F32)
    plain = replace(x, normalize=False, eps=0.0, initial_key_sum=None, output_final_state=True)
    N, S_T = parallel_reference(plain)
    phi_k = apply_feature_map(x.k, x.feature_map)
    B, T, H, K = phi_k.shape
    z = phi_k.reshape(B, T * H, K).cumsum(1).reshape(B, T, H, K) if over_heads else phi_k.cumsum(1)
    Z = x.scale * (apply_feature_map(x.q, x.feature_map) * z).sum(-1) + x.eps
    return _out(p, divide_rows(N, Z), (S_T, z[:, -1]))


DENOMINATOR_CAPS = replace(FULL, normalize=(True,), decay=False, varlen=False, initial_state=False)
"""What `flat_cumsum_denominator` supports: normalized output; no decay, initial state, varlen."""


def _truncated_to_chunks(x: Problem) -> tuple[torch.Tensor, State]:
    L = x.q.shape[1]
    full = L - L % C
    cut = _sequence_problem(x, 0, 0, full, x.initial_state, x.initial_key_sum)
    o, state = chunk_reference(cut, chunk_size=C)
    # The tail rows come from a zero-initialised output buffer nobody writes.
    tail = o.new_zeros(1, L - full, *o.shape[2:])
    return torch.cat([o, tail], dim=1), state


class _MisstridedStateGradient(torch.autograd.Function):
    """Identity forward on S_T ``[N, H, K, V]``; backward reads dS_T with row stride K, not V."""

    @staticmethod
    def forward(ctx: Any, S: torch.Tensor) -> torch.Tensor:
        return S.clone()

    @staticmethod
    def backward(ctx: Any, dS: torch.Tensor) -> torch.Tensor:
        N, H, K, V = dS.shape
        flat = dS.reshape(N, H, K * V)
        index = torch.arange(K)[:, None] * K + torch.arange(V)[None, :]  # [K, V]
        valid = index < K * V
        # Reads past the end are masked to 0, as a masked tl.load would.
        return torch.where(valid, flat[..., index.clamp(max=K * V - 1)], 0.0)


def _head_first(x: torch.Tensor) -> torch.Tensor:
    """Read ``[B, T, H, ...]`` in its logical order as if it were ``[B, H, T, ...]``."""
    B, T, H = x.shape[:3]
    return x.reshape(B, H, T, *x.shape[3:]).transpose(1, 2)


def _raw(x: torch.Tensor) -> torch.Tensor:
    """Read ``x``'s storage from its offset as if ``x`` were contiguous."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.append(step)
        step *= size
    return torch.as_strided(x, x.shape, tuple(reversed(strides)), x.storage_offset())


class _ScaledGradient(torch.autograd.Function):
    """Identity forward; backward multiplies the incoming gradient by a constant."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None
