# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parallel (tiled, flash-style) form of causal linear attention, forward and backward.

Per sequence and head, o = s (φ(Q)φ(K)^T ⊙ M ⊙ W) V + s exp(G) ⊙ φ(Q) S_0, with
W_tj = exp(G_t - G_j) from whole-sequence cumulative sums G of g, masked before the exp. One
program owns a block of BT queries and loops over key blocks up to the diagonal, so the T x T
matrix never exists. Normalized outputs divide by s Σ_j P_tj + s exp(G_t) φ(q_t)·z_0 + eps; a
row whose denominator is exactly zero returns 0 (and passes no gradient).

Every sequence, packed (``cu_seqlens``) or not, is addressed through a host-built table of
(sequence, query block) pairs, so no block ever mixes tokens of two sequences. The per-block
kernels are in `parallel_kernels`; the final state S_T and the gradient of S_0 are tiled
reductions of their own, in `parallel_h`, with the decay scans. This module holds the host
launchers, the autograd Function and the public function; scalar and vector gates run the same
kernels, specialised by their ``GATE``. The derivation, the rounding structure and the design
notes live in this package's README.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import triton

from linattn_kernels import _backend
from linattn_kernels.common.args import (
    INPUT_DTYPES,
    VECTOR_GATE,
    Inputs,
    empty_output,
    finish_output,
    forward_outputs,
    prepare,
)
from linattn_kernels.common.blocks import VECTOR_PARALLEL_BT, blocks, chunk_block, dot_low
from linattn_kernels.common.feature_maps import SCORE_CODES
from linattn_kernels.common.results import (
    Forward,
    Gradients,
    State,
    final_state,
    final_state_decay_grad,
    save_for_backward,
    saved_for_backward,
)
from linattn_kernels.common.tables import chunk_table
from linattn_kernels.lifted import (
    LIFTED_MAPS,
    check_lifted_gate,
    lifted_attention,
    refuse_weights,
)
from linattn_kernels.linear_attn.parallel_h import (
    parallel_bwd_dh0,
    parallel_bwd_kernel_dg,
    parallel_fwd_h,
    parallel_fwd_kernel_cumsum,
)
from linattn_kernels.linear_attn.parallel_kernels import (
    parallel_bwd_kernel_dkv,
    parallel_bwd_kernel_dq,
    parallel_bwd_kernel_dv,
    parallel_fwd_kernel,
)


def _map_codes(x: Inputs) -> dict[str, int]:
    """The kernels' ``FEATURE`` and ``SCORE`` constexprs (a score map loads q, k as identity)."""
    if x.feature in SCORE_CODES.values():
        return {"FEATURE": 0, "SCORE": x.feature}
    return {"FEATURE": x.feature, "SCORE": 0}


def _tiles(x: Inputs) -> tuple[int, int]:
    """The (BT, BK) the per-block kernels launch with.

    The head dim whole (`blocks`) without a gate or with a scalar one; a vector gate's
    ``[BT, BT, BK]`` score products take blocks of `VECTOR_PARALLEL_BT` tokens and K tiles of
    at most 64 (`chunk_block`).
    """
    if x.gate == VECTOR_GATE:
        return VECTOR_PARALLEL_BT, chunk_block(x.K)
    bl = blocks(x.K, x.V)
    return bl.BT, bl.BK


def parallel_fwd(x: Inputs) -> Forward:
    """Run the forward kernels: decay cumsum, output, and the final state when asked.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).

    Returns:
        The output in the input dtype and the final state, plus what `parallel_bwd` reads: the
        fp32 output and the denominators (normalized only), the cumulative decay G and the
        table of query blocks.
    """
    if x.feature in SCORE_CODES.values() and (x.h0 is not None or x.output_final_state):
        # The state of a score map has F = K² (+ K + 1) rows: `lifted_attention` computes it.
        raise ValueError("A score map's initial or final state goes through lifted_attention.")
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    BT, BK = _tiles(x)
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, BT, device)
    low = dot_low(dtype)
    G = None
    if x.g is not None:
        # A vector gate's cumulative sums are per dimension, scanned in tiles of BK of them.
        vector = x.gate == VECTOR_GATE
        G = torch.empty(x.g.shape, dtype=torch.float32, device=device)
        parallel_fwd_kernel_cumsum[(N, H, triton.cdiv(K, BK) if vector else 1)](
            g=x.g, G=G, cu_seqlens=table.cu_seqlens, H=H, K=K, BT=64, BK=BK, GATE=x.gate
        )  # fmt: skip
    o_acc, Z = forward_outputs(x, unrounded=x.normalize)
    parallel_fwd_kernel[(table.num_chunks, H)](
        q=x.q, k=x.k, v=x.v, G=G, h0=x.h0, z0=x.z0, o=o_acc, Z=Z,
        chunk_indices=table.chunk_indices, cu_seqlens=table.cu_seqlens, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=BT, BK=BK, BV=blocks(K, V).BV, NORMALIZE=x.normalize, GATE=x.gate,
        USE_H0=x.h0 is not None, DOT_LOW=low, **_map_codes(x),
    )  # fmt: skip
    ht = zt = None
    if x.output_final_state:
        ht, zt = parallel_fwd_h(x, G=G, table=table, dot_low=low)
    return Forward(
        o=finish_output(o_acc, dtype), ht=ht, zt=zt, o_acc=o_acc if x.normalize else None, den=Z,
        G=G, table=table,
    )  # fmt: skip


def parallel_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the backward kernels: dq, then dk and dv, then dg and dS_0 (dz_0).

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `parallel_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Cotangent of S_T ``[N, H, K, V]``, or `None` (zero).
        dzt: Cotangent of z_T ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g (g's shape), S_0 and z_0 (fp32).
    """
    B, T, H, K, V, N = x.B, x.T, x.H, x.K, x.V, x.N
    assert fwd.table is not None
    BT, BK = _tiles(x)
    BV = blocks(K, V).BV
    vector = x.gate == VECTOR_GATE
    # A vector gate's dq and dk programs own one K tile each (grid axis 2).
    NK = triton.cdiv(K, BK) if vector else 1
    device, dtype = x.q.device, x.q.dtype
    use_dht, low = dht is not None or dzt is not None, dot_low(dtype)
    if use_dht:
        dht = torch.zeros(N, H, K, V, device=device) if dht is None else dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, device=device) if dzt is None else dzt.float().contiguous()
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    delta = None
    if x.normalize and vector:
        assert fwd.o_acc is not None
        # δ_t = do_t·o_t from the unrounded fp32 output. A vector gate's dq programs own one K
        # tile each, so torch computes it once here; the others' dq pass computes and stores it.
        delta = (do.float() * fwd.o_acc).sum(-1).contiguous()
    elif x.normalize:
        delta = torch.empty(B, T, H, dtype=torch.float32, device=device)
    common = {
        "chunk_indices": fwd.table.chunk_indices, "cu_seqlens": fwd.table.cu_seqlens,
        "scale": x.scale, "H": H, "K": K, "V": V, "BT": BT, "BK": BK, "BV": BV,
        "NORMALIZE": x.normalize, "GATE": x.gate, "DOT_LOW": low, **_map_codes(x),
    }  # fmt: skip
    NB = fwd.table.num_chunks
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    dv = empty_output((B, T, H, V), dtype, device)
    # dL/dG's query and key parts: per token and head, and per key dimension for a vector gate.
    dGq = dGk = None
    if x.g is not None:
        dGq = torch.empty(x.g.shape, dtype=torch.float32, device=device)
        dGk = torch.empty(x.g.shape, dtype=torch.float32, device=device)
    parallel_bwd_kernel_dq[(NB, H, NK)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, h0=x.h0, z0=x.z0, o=fwd.o_acc, Z=fwd.den, do=do, dq=dq,
        dGq=dGq, delta=delta, USE_H0=x.h0 is not None, **common,
    )  # fmt: skip
    parallel_bwd_kernel_dkv[(NB, H, NK)](
        q=x.q, k=x.k, v=x.v, G=fwd.G, Z=fwd.den, delta=delta, do=do, dht=dht, dzt=dzt, dk=dk,
        dv=dv, dGk=dGk, USE_DHT=use_dht, **common,
    )  # fmt: skip
    if vector:
        parallel_bwd_kernel_dv[(NB, H)](
            q=x.q, k=x.k, G=fwd.G, Z=fwd.den, do=do, dht=dht, dv=dv,
            chunk_indices=fwd.table.chunk_indices, cu_seqlens=fwd.table.cu_seqlens,
            scale=x.scale, H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, FEATURE=x.feature,
            NORMALIZE=x.normalize, USE_DHT=use_dht, DOT_LOW=low,
        )  # fmt: skip
    dg = None
    if x.g is not None:
        dGend = None
        if dht is not None and fwd.ht is not None:
            # ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩: S_T scales as exp(G_T), so this enters dL/dG_T.
            dGend = final_state_decay_grad(dht, fwd.ht, dzt, fwd.zt, per_row=vector)
            dGend = dGend.contiguous()
        dg = torch.empty(x.g.shape, dtype=torch.float32, device=device)
        parallel_bwd_kernel_dg[(N, H, NK)](
            dGq=dGq, dGk=dGk, dGend=dGend, dg=dg, cu_seqlens=fwd.table.cu_seqlens, H=H, K=K,
            BT=64, BK=BK, USE_DHT=dGend is not None, GATE=x.gate,
        )  # fmt: skip
    dh0 = dz0 = None
    if x.h0 is not None:
        dh0, dz0 = parallel_bwd_dh0(x, fwd, do=do, delta=delta, dht=dht, dzt=dzt, dot_low=low)
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=dh0, dz0=dz0,
    )  # fmt: skip


class ParallelLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `parallel_fwd`, keeps its result, runs `parallel_bwd`."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Inputs,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None,
        h0: torch.Tensor | None,
        z0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Tensors are passed beside ``x`` (which holds the same ones) so autograd tracks them."""
        fwd = parallel_fwd(x)
        save_for_backward(ctx, x, fwd)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for ``x`` and absent inputs)."""
        x, fwd = saved_for_backward(ctx)
        return None, *parallel_bwd(x, fwd, do, dht, dzt)


def parallel_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    normalize: bool = False,
    eps: float = 0.0,
    feature_map: str = "identity",
    initial_state: State | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    feature_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention in the parallel (tiled quadratic) form, differentiable.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay (<= 0): ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension: the score weights become
            Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm)), or `None` for no decay. Default: `None`.
        scale: s; `None` means K^-1/2 (K of the input, whatever the map). Default: `None`.
        normalize: Divide by s φ(q_t)·z_t + eps (a zero denominator gives 0). Default: `False`.
        eps: Denominator offset, added in fp32; normalized only. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel; or a
            lifted map (R^K -> R^F): ``"taylor2"`` (weight κ(s q·k), κ(x) = 1 + x + x²/2,
            F = 1 + K + K²) or ``"rebased"`` (κ(x) = x², F = K²), whose scale multiplies the
            query before the map, so no outer scale applies; or ``"favor+"`` (φ(x) =
            exp(W x - |x|²/2)/√m, F = m, outer scale s). The two score maps are fused (κ of
            the K-dim score, no features) unless there is an initial or a final state; those
            cases and favor+ lift q and k first (`linattn_kernels.lifted`). A lifted map takes
            a scalar gate or none. Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized (F rows instead of K for a lifted map). Default: `None`.
        output_final_state: Also return S_T (fp32), or ``(S_T, z_T)`` when normalized.
            Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1). Default: `None`.
        feature_weights: favor+'s projection W ``[m, K]`` on q's device (required there, and
            refused with any other map). Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``.

    Raises:
        ValueError: naming the argument that is malformed and what was expected.
    """
    if feature_map in LIFTED_MAPS:
        check_lifted_gate(g, feature_map)
        if feature_map == "favor+" or initial_state is not None or output_final_state:
            return lifted_attention(
                parallel_linear_attention, q, k, v, g, scale=scale, normalize=normalize, eps=eps,
                feature_map=feature_map, feature_weights=feature_weights,
                initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens,
            )  # fmt: skip
    refuse_weights(feature_map, feature_weights)
    score = SCORE_CODES.get(feature_map)
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps,
        feature_map="identity" if score is not None else feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    if score is not None:
        x = replace(x, feature=score)
    o, ht, zt = ParallelLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0)
    return o, final_state(x, ht, zt)


def precision_recipe(dtype: torch.dtype) -> dict[str, object]:
    """Return the `linattn_verify.linear_attn.recipe.PrecisionRecipe` keyword arguments for this
    kernel.

    The recipe describes the current mode: under the interpreter every tl.dot is exact-product
    fp32 with round-to-nearest division; on CUDA fp32 operands go through tf32, accumulation is
    tensor-core (MMA) and division is ``div.full.f32``; bf16 inputs on CUDA round φ(q), φ(k) and
    P (and in the backward dP, P/Z, dN) to bf16, at most three such roundings per term.

    A vector gate (g ``[B, T, H, K]``, the kernels' ``GATE == 2``) takes the same roundings
    per term (its scores are elementwise products summed over K, docs/error-model.md §2.7), so
    one recipe describes both gates.

    Args:
        dtype: The input dtype (float32, float16 or bfloat16).

    Raises:
        ValueError: if ``dtype`` is not an input dtype.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype among float32, float16, bfloat16 but got dtype={dtype}.")
    interpreting = _backend.INTERPRETING
    low = dot_low(dtype)
    return {
        "form": "parallel",
        "accumulation": "ieee" if interpreting else "mma",
        "dot_precision": "ieee" if interpreting or low else "tf32",
        "dots_on_path": 2,
        "intermediate_dtype": "input" if low else None,
        "casts_on_path": 3 if low else 0,
        "decay_scan": "global",
        "division": "rn" if interpreting else "full",
        "naive_elu1": False,
        "eps_dtype": "float32",
    }


__all__ = [
    "ParallelLinearAttentionFunction",
    "blocks",
    "parallel_bwd",
    "parallel_fwd",
    "parallel_linear_attention",
    "precision_recipe",
]
