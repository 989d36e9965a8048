# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule token by token, forward and backward, with the state in fp32 registers.

S'_t = diag(e^{g_t}) S_{t-1}, S_t = S'_t + k_t u_t^T with u_t = β_t (v_t - S'^T_t k_t), and
o_t = s S_t^T q_t, with no gate, a scalar gate g ``[B, T, H]`` or a vector gate g
``[B, T, H, K]``. One program per (sequence, head, V-block) walks the tokens with a
``[BK, BV]`` fp32 state tile: BK covers all of K, since the correction S'^T k needs whole key
columns, while value columns evolve independently and split into blocks.

The backward runs the adjoint Λ_t = ∂loss/∂S_t backwards in time (README.md beside this file
derives it). It needs S_{t-1} at every step in reverse order; rather than keep all T states, the
forward stores the state entering every segment of C tokens (the checkpoints), and the backward
recomputes one segment forward from its checkpoint into a C-state scratch buffer, then walks it
backwards: (T/C + C) K V fp32 per head instead of T K V, for one more forward sweep.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import triton
import triton.language as tl

from linattn_kernels.common.args import empty_output, finish_output
from linattn_kernels.common.blocks import recurrent_blocks
from linattn_kernels.common.delta import (
    INPUT_DTYPES,
    L2NORM_EPS,
    MAX_HEAD_DIM,
    DeltaInputs,
    checkpoint_interval,
    l2norm_grad,
    load_decay,
    load_unit,
    prepare_delta,
    segments,
)
from linattn_kernels.common.loads import load_tile, store_tile


@triton.jit
def recurrent_delta_fwd_kernel(
    q, k, v, g, beta, o, h0, ht, hc, bounds, offsets, scale,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    C: tl.constexpr, GATE: tl.constexpr, L2NORM: tl.constexpr, EPS: tl.constexpr,
    USE_H0: tl.constexpr, STORE_HT: tl.constexpr, STORE_HC: tl.constexpr,
):  # fmt: skip
    """o_t and S_T of one (sequence, head, V-block); with STORE_HC every C-th state too.

    Grid: (V-blocks, N·H).
    """
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos = tl.load(bounds + i_n)
    L = tl.load(bounds + i_n + 1) - bos
    c0 = tl.load(offsets + i_n)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V

    b_h = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV]
    if USE_H0:
        b_h += load_tile(h0, i_nh, K, V, o_k, o_v, m_k, m_v)
    for i_s in range((L + C - 1) // C):
        if STORE_HC:
            store_tile(hc, b_h, (c0 + i_s) * H + i_h, K, V, o_k, o_v, m_k, m_v)
        # The same two nested loops as the backward's recomputation, so both round alike.
        for i_t in range(bos + i_s * C, bos + tl.minimum(i_s * C + C, L)):
            i_th = i_t * H + i_h
            b_q, _ = load_unit(q, i_th, K, o_k, m_k, L2NORM, EPS)
            b_k, _ = load_unit(k, i_th, K, o_k, m_k, L2NORM, EPS)
            b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)  # [BV]
            b_beta = tl.load(beta + i_th).to(tl.float32)
            if GATE > 0:
                b_h = b_h * load_decay(g, i_th, K, o_k, m_k, GATE)[:, None]
            # u = β (v - S'^T k), S = S' + k u^T
            b_u = (b_v - tl.sum(b_h * b_k[:, None], axis=0)) * b_beta  # [BV]
            b_h += b_k[:, None] * b_u[None, :]
            b_o = tl.sum(b_h * (b_q * scale)[:, None], axis=0)  # [BV]
            tl.store(o + i_th * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
    if STORE_HT:
        store_tile(ht, b_h, i_nh, K, V, o_k, o_v, m_k, m_v)


@triton.jit
def recurrent_delta_bwd_kernel(
    q, k, v, g, beta, do, dht, hc, work, dq, dk, dv, dg, dbeta, dh0, bounds, offsets, scale,
    TOTAL,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    C: tl.constexpr, GATE: tl.constexpr, L2NORM: tl.constexpr, EPS: tl.constexpr,
    USE_DHT: tl.constexpr, STORE_DH0: tl.constexpr,
):  # fmt: skip
    """Every gradient of one (sequence, head, V-block), segment by segment backwards.

    Per segment: S_{t-1} for its C tokens, recomputed from the checkpoint into ``work``
    (this program's own [C, K, V-block] slice), then the adjoint step per token in reverse.
    dq, dk, dβ and dg are this V-block's partial sums ``[NV, ...]``; dv's columns are its own.
    Grid: (V-blocks, N·H).
    """
    i_v = tl.program_id(0).to(tl.int64)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    bos = tl.load(bounds + i_n)
    L = tl.load(bounds + i_n + 1) - bos
    c0 = tl.load(offsets + i_n)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    # Partial-sum slots of this V-block: [NV, tokens, H, K] and [NV, tokens, H].
    p_part = i_v * TOTAL

    b_dh = tl.zeros([BK, BV], dtype=tl.float32)  # [BK, BV] Λ
    if USE_DHT:
        b_dh += load_tile(dht, i_nh, K, V, o_k, o_v, m_k, m_v)
    NS = (L + C - 1) // C
    for i_r in range(NS):
        i_s = NS - 1 - i_r
        t0 = i_s * C
        t1 = tl.minimum(t0 + C, L)
        # Forward through the segment, keeping S_{t-1} of each token.
        b_h = load_tile(hc, (c0 + i_s) * H + i_h, K, V, o_k, o_v, m_k, m_v)
        for i_t in range(bos + t0, bos + t1):
            i_th = i_t * H + i_h
            store_tile(work, b_h, i_nh * C + (i_t - bos - t0), K, V, o_k, o_v, m_k, m_v)
            b_k, _ = load_unit(k, i_th, K, o_k, m_k, L2NORM, EPS)
            b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_beta = tl.load(beta + i_th).to(tl.float32)
            if GATE > 0:
                b_h = b_h * load_decay(g, i_th, K, o_k, m_k, GATE)[:, None]
            b_u = (b_v - tl.sum(b_h * b_k[:, None], axis=0)) * b_beta
            b_h += b_k[:, None] * b_u[None, :]
        # The scratch was written by this program's threads and is read back by them in
        # another order: a block-wide barrier makes the stores visible (no-op when interpreted).
        tl.debug_barrier()
        for i_j in range(bos + t0, bos + t1):
            i_t = 2 * bos + t0 + t1 - 1 - i_j
            i_th = i_t * H + i_h
            b_h0 = load_tile(work, i_nh * C + (i_t - bos - t0), K, V, o_k, o_v, m_k, m_v)
            b_q, b_nq = load_unit(q, i_th, K, o_k, m_k, L2NORM, EPS)
            b_k, b_nk = load_unit(k, i_th, K, o_k, m_k, L2NORM, EPS)
            b_v = tl.load(v + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)  # [BV]
            b_do = tl.load(do + i_th * V + o_v, mask=m_v, other=0.0).to(tl.float32)  # [BV]
            b_beta = tl.load(beta + i_th).to(tl.float32)
            b_a = load_decay(g, i_th, K, o_k, m_k, GATE)  # [BK]
            # Recompute the step: S' (b_hp), e = v - S'^T k, u = β e, S_t.
            b_hp = b_h0
            if GATE > 0:
                b_hp = b_h0 * b_a[:, None]
            b_e = b_v - tl.sum(b_hp * b_k[:, None], axis=0)  # [BV]
            b_u = b_e * b_beta
            b_h = b_hp + b_k[:, None] * b_u[None, :]
            # Λ_t gains o_t's term s q_t do_t^T; dq̂_t = s S_t do_t.
            b_dh += (b_q * scale)[:, None] * b_do[None, :]
            b_dq = tl.sum(b_h * b_do[None, :], axis=1) * scale  # [BK]
            # du = Λ^T k: dv = β du, dβ = du · e, dk̂ = Λ u - S' (β du).
            b_du = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV]
            b_bdu = b_du * b_beta
            b_dbeta = tl.sum(b_du * b_e, axis=0)
            # With a gate, S' (β du) and dg are formed as a ∘ (S_{t-1} ...), not from S': where
            # strong decays make S' subnormal its absolute rounding (2^-149) would be multiplied
            # by a large adjoint, while S_{t-1}'s error is the forward's own, already bounded.
            b_dk = tl.sum(b_dh * b_u[None, :], axis=1)  # [BK]
            if GATE > 0:
                b_dk -= b_a * tl.sum(b_h0 * b_bdu[None, :], axis=1)
            else:
                b_dk -= tl.sum(b_h0 * b_bdu[None, :], axis=1)
            # Λ' = (I - β k k^T) Λ, the adjoint of S'; dg_i = a_i Σ_j S_{t-1,ij} Λ'_ij;
            # Λ_{t-1} = D Λ'.
            b_dh = b_dh - b_k[:, None] * b_bdu[None, :]
            if GATE > 0:
                b_dgk = b_a * tl.sum(b_h0 * b_dh, axis=1)  # [BK]
                if GATE == 2:
                    tl.store(dg + (p_part + i_th) * K + o_k, b_dgk, mask=m_k)
                else:
                    tl.store(dg + p_part + i_th, tl.sum(b_dgk, axis=0))
                b_dh = b_dh * b_a[:, None]
            b_dq = l2norm_grad(b_dq, b_q, b_nq, L2NORM)
            b_dk = l2norm_grad(b_dk, b_k, b_nk, L2NORM)
            tl.store(dq + (p_part + i_th) * K + o_k, b_dq, mask=m_k)
            tl.store(dk + (p_part + i_th) * K + o_k, b_dk, mask=m_k)
            tl.store(dv + i_th * V + o_v, b_bdu, mask=m_v)
            tl.store(dbeta + p_part + i_th, b_dbeta)
        # The next segment overwrites the scratch: its reads here must be done first.
        tl.debug_barrier()
    if STORE_DH0:
        store_tile(dh0, b_dh, i_nh, K, V, o_k, o_v, m_k, m_v)


def recurrent_delta_fwd(
    x: DeltaInputs, *, checkpoint_every: int | None = None, for_backward: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor, int]:
    """Launch the forward on prepared inputs.

    Args:
        x: What `prepare_delta` returned.
        checkpoint_every: The segment length C of the backward; `None` picks about
            sqrt(longest sequence) (`checkpoint_interval`). Default: `None`.
        for_backward: Store the state entering every segment (the checkpoints). Default:
            `False`.

    Returns:
        ``(o, final_state, checkpoints, offsets, C)``: o ``[B, T, H, V]`` in the input dtype;
        S_T ``[N, H, K, V]`` fp32 or `None`; the checkpoints ``[NC, H, K, V]`` fp32 or `None`;
        the first checkpoint of each sequence ``[N]`` int64; C.
    """
    B, T, H, K, V, N = x.shape
    device = x.q.device
    BK, BV, num_warps = recurrent_blocks(K, V)
    C = checkpoint_interval(x.lengths, checkpoint_every)
    offsets, count = segments(x.lengths, C, device)
    f32 = torch.float32
    o = empty_output((B, T, H, V), x.q.dtype, device)
    ht = torch.empty(N, H, K, V, dtype=f32, device=device) if x.output_final_state else None
    hc = torch.empty(max(count, 1), H, K, V, dtype=f32, device=device) if for_backward else None
    recurrent_delta_fwd_kernel[(triton.cdiv(V, BV), N * H)](
        q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, o=o, h0=x.h0, ht=ht, hc=hc, bounds=x.bounds,
        offsets=offsets, scale=x.scale, H=H, K=K, V=V, BK=BK, BV=BV, C=C, GATE=x.gate,
        L2NORM=x.l2norm, EPS=L2NORM_EPS, USE_H0=x.h0 is not None,
        STORE_HT=x.output_final_state, STORE_HC=for_backward, num_warps=num_warps,
    )  # fmt: skip
    return finish_output(o, x.q.dtype), ht, hc, offsets, C


def recurrent_delta_bwd(
    x: DeltaInputs,
    hc: torch.Tensor,
    offsets: torch.Tensor,
    C: int,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, Any]:
    """Launch the backward; sum the V-blocks' partial dq, dk, dβ and dg.

    Args:
        x: The forward's prepared inputs.
        hc: The forward's checkpoints (``for_backward=True``).
        offsets: The first checkpoint of each sequence, from the forward.
        C: The forward's segment length.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Final-state cotangent ``[N, H, K, V]``, or `None` (zero).

    Returns:
        ``(dq, dk, dv, dg, dbeta, dh0)`` each in its input's dtype (dh0 fp32; dg `None` without
        a gate, dh0 `None` without an initial state). Every gradient is accumulated and stored
        in fp32 and rounded once, here.
    """
    B, T, H, K, V, N = x.shape
    device = x.q.device
    BK, BV, num_warps = recurrent_blocks(K, V)
    NV = triton.cdiv(V, BV)
    f32 = torch.float32
    do = torch.zeros(B, T, H, V, dtype=f32, device=device) if do is None else do.contiguous()
    dht = None if dht is None else dht.float().contiguous()
    dq = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dk = torch.empty(NV, B, T, H, K, dtype=f32, device=device)
    dbeta = torch.empty(NV, B, T, H, dtype=f32, device=device)
    dg = None if x.g is None else torch.empty(NV, *x.g.shape, dtype=f32, device=device)
    dv = torch.empty(B, T, H, V, dtype=f32, device=device)
    dh0 = torch.empty(N, H, K, V, dtype=f32, device=device) if x.h0 is not None else None
    work = torch.empty(N * H * C, K, V, dtype=f32, device=device)
    recurrent_delta_bwd_kernel[(NV, N * H)](
        q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, do=do, dht=dht, hc=hc, work=work, dq=dq, dk=dk,
        dv=dv, dg=dg, dbeta=dbeta, dh0=dh0, bounds=x.bounds, offsets=offsets, scale=x.scale,
        TOTAL=B * T * H, H=H, K=K, V=V, BK=BK, BV=BV, C=C, GATE=x.gate,
        L2NORM=x.l2norm, EPS=L2NORM_EPS, USE_DHT=dht is not None, STORE_DH0=dh0 is not None,
        num_warps=num_warps,
    )  # fmt: skip
    dtype = x.q.dtype
    dg_out = None if dg is None or x.g is None else dg.sum(0).to(x.g.dtype)
    return (
        dq.sum(0).to(dtype),
        dk.sum(0).to(dtype),
        dv.to(dtype),
        dg_out,
        dbeta.sum(0).to(x.beta.dtype),
        dh0,
    )


class RecurrentDeltaRuleFunction(torch.autograd.Function):
    """Autograd of `recurrent_delta_fwd` / `recurrent_delta_bwd` (sequencing and ``ctx`` only)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: DeltaInputs,
        checkpoint_every: int | None,
        store: bool,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        beta: torch.Tensor,
        h0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # q .. h0 are x's tensors again, passed so autograd sees them as inputs. ``store``: a
        # gradient will be asked for (needs_input_grad stays set under torch.no_grad()).
        o, ht, hc, offsets, C = recurrent_delta_fwd(
            x, checkpoint_every=checkpoint_every, for_backward=store
        )
        # The inputs go through save_for_backward (version-checked); x keeps the options only.
        ctx.save_for_backward(q, k, v, g, beta, h0, hc, offsets)
        empty = q.new_empty(0)
        ctx.x = replace(x, q=empty, k=empty, v=empty, g=None, beta=empty, h0=None)
        ctx.C = C
        return o, ht

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, beta, h0, hc, offsets = ctx.saved_tensors
        x = replace(ctx.x, q=q, k=k, v=v, g=g, beta=beta, h0=h0)
        dq, dk, dv, dg, dbeta, dh0 = recurrent_delta_bwd(x, hc, offsets, ctx.C, do, dht)
        return None, None, None, dq, dk, dv, dg, dbeta, dh0


def recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    checkpoint_every: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the (gated) delta rule token by token in fp32; differentiable in every input.

    S_t = (I - β_t k_t k_t^T) diag(e^{g_t}) S_{t-1} + β_t k_t v_t^T and o_t = s S_t^T q_t.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16; 16-bit inputs are upcast on load).
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log gate ``[B, T, H]`` (scalar) or ``[B, T, H, K]`` (vector), <= 0, or
            `None` (no gate).
        beta: Write strengths ``[B, T, H]``, in [0, 1], or [0, 2) (negative eigenvalues).
        scale: Scale of q (after any L2 norm); `None` means K^-1/2. Default: `None`.
        initial_state: S_0 ``[N, H, K, V]`` (read in fp32). Default: `None`.
        output_final_state: Return S_T. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1). Default: `None`.
        use_qk_l2norm_in_kernel: Replace q, k by x / sqrt(Σx² + 1e-6) in the kernel (fp32).
            Default: `False`.
        checkpoint_every: The backward's segment length C (one fp32 state kept per C tokens);
            `None` picks about sqrt(T). Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the dtype of q; S_T ``[N, H, K, V]`` fp32,
        or `None` unless ``output_final_state``.

    Raises:
        ValueError: naming the first malformed argument.
    """
    x = prepare_delta(
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )  # fmt: skip
    checkpoint_interval(x.lengths, checkpoint_every)
    tensors = (x.q, x.k, x.v, x.g, x.beta, x.h0)
    store = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    o, ht = RecurrentDeltaRuleFunction.apply(x, checkpoint_every, store, *tensors)
    return o, ht


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Describe how this kernel rounds, as `linattn_verify.delta.DeltaRecipe` keywords.

    The token-recurrent recipe (docs/error-model.md §8.3): the state, the in-kernel L2-normalised
    q and k, the corrections u_t and every gradient partial stay in fp32 registers or fp32
    buffers (no storage rounding: ``intermediate_dtype`` and ``state_dtype`` `None`); there is
    no ``tl.dot`` (so no tf32), every reduction is an fp32 ``tl.sum`` (IEEE adds); the L2 norm
    uses a correctly rounded sqrt and division (``sqrt_rn``, ``div_rn``) in both modes. 16-bit
    inputs are upcast exactly on load; only o and the gradients are rounded to their dtypes,
    once. The backward recomputes states from fp32 checkpoints with the forward's own
    operations, never from stored corrections.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16); it does not change the recipe.

    Returns:
        The recipe's keyword arguments (the same in interpreter and CUDA mode).

    Raises:
        ValueError: if ``dtype`` is not an input dtype the kernel accepts.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype float32, float16 or bfloat16 but got dtype={dtype}.")
    return {
        "form": "recurrent",
        "accumulation": "ieee",
        "tf32": False,
        "intermediate_dtype": None,
        "state_dtype": None,
        "inverse_dtype": None,
        "casts_on_path": 0,
        "stored_corrections": False,
    }


__all__ = [
    "L2NORM_EPS",
    "MAX_HEAD_DIM",
    "RecurrentDeltaRuleFunction",
    "precision_recipe",
    "recurrent_delta_bwd",
    "recurrent_delta_fwd",
    "recurrent_delta_rule",
]
