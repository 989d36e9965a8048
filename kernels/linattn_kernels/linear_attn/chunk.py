# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Chunked causal linear attention (the training path): host launchers, autograd, public API.

The sequence is cut into chunks of ``chunk_size`` tokens that never straddle a sequence boundary.
A sequential pass over chunks carries the state S (and the key sum z) and stores it at every
chunk start (`chunk_h`); a parallel pass then gives each chunk its output as an intra-chunk
masked quadratic plus the contribution of the stored state (`chunk_kernels`). Decay weights are
exponentials of differences of chunk-local cumulative sums of g, masked before the exponential.
The backward mirrors this: a reverse pass over chunks for dS (and dz), then parallel per-chunk
kernels for dv and for dq, dk and the decay gradient, and a reverse scan that turns per-token
dL/dG into dg. Scalar and vector gates run the same kernels, specialised by their ``GATE``.
"""

from __future__ import annotations

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
from linattn_kernels.common.blocks import chunk_block, chunk_num_warps, chunk_score_block, dot_low
from linattn_kernels.common.results import (
    Forward,
    Gradients,
    State,
    final_state,
    final_state_decay_grad,
    save_for_backward,
    saved_for_backward,
)
from linattn_kernels.common.tables import ChunkTable, chunk_table
from linattn_kernels.lifted import LIFTED_MAPS, lifted_attention, refuse_weights
from linattn_kernels.linear_attn.chunk_h import chunk_bwd_dh, chunk_fwd_h
from linattn_kernels.linear_attn.chunk_kernels import (
    chunk_bwd_kernel_dd,
    chunk_bwd_kernel_dg,
    chunk_bwd_kernel_dqk,
    chunk_bwd_kernel_dv,
    chunk_fwd_kernel_o,
)

CHUNK_SIZES = (16, 32, 64, 128)
"""The chunk sizes the kernels accept (powers of two, at least the 16 rows ``tl.dot`` needs)."""


def check_chunk_size(chunk_size: object) -> int:
    """Return ``chunk_size`` if it is a power of two in [16, 128], else raise ValueError."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise ValueError(
            f"Expected int but got chunk_size={chunk_size!r} (type={type(chunk_size).__name__})."
        )
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(
            f"Got chunk_size={chunk_size}, but chunk_size must be a power of two in [16, 128]."
        )
    return chunk_size


def chunk_fwd(x: Inputs, *, chunk_size: int) -> Forward:
    """Run the forward pass: the state at every chunk start, then every chunk's output.

    Args:
        x: Prepared inputs (`linattn_kernels.common.args.prepare`).
        chunk_size: Tokens per chunk, one of `CHUNK_SIZES`.

    Returns:
        The output in the input dtype and the final state, plus what `chunk_bwd` reads: the
        fp32 output and the denominators (normalized only) and the chunk table.
    """
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    device, dtype = x.q.device, x.q.dtype
    table = chunk_table(x.cu_seqlens, B, T, chunk_size, device)
    low = dot_low(dtype)
    states = chunk_fwd_h(x, table=table, store_final=x.output_final_state, dot_low=low)
    BV = chunk_block(V)
    # A vector gate's score is a [BT, BT, BK] product: its K tile shrinks with the chunk.
    BK = chunk_score_block(K, chunk_size) if x.gate == VECTOR_GATE else chunk_block(K)
    # The backward takes do · o from the unrounded output.
    o, den = forward_outputs(x, unrounded=x.normalize)
    chunk_fwd_kernel_o[(table.num_chunks, triton.cdiv(V, BV), H)](
        q=x.q, k=x.k, v=x.v, g=x.g, h=states.h, hz=states.hz, o=o, den=den,
        cu_seqlens=table.cu_seqlens, chunk_indices=table.chunk_indices, scale=x.scale, eps=x.eps,
        H=H, K=K, V=V, BT=chunk_size, BK=BK, BV=BV, FEATURE=x.feature, GATE=x.gate,
        NORMALIZE=x.normalize, DOT_LOW=low, num_warps=chunk_num_warps(chunk_size),
    )  # fmt: skip
    return Forward(
        o=finish_output(o, dtype), ht=states.ht, zt=states.zt, o_acc=o if x.normalize else None,
        den=den, table=table,
    )  # fmt: skip


def chunk_bwd(
    x: Inputs,
    fwd: Forward,
    do: torch.Tensor | None,
    dht: torch.Tensor | None,
    dzt: torch.Tensor | None,
) -> Gradients:
    """Run the backward pass: recompute the chunk states, then dS, dv, dq and dk, and dg.

    Args:
        x: The prepared inputs of the forward pass.
        fwd: What `chunk_fwd` returned.
        do: Output cotangent ``[B, T, H, V]``, or `None` (zero).
        dht: Final-state cotangent ``[N, H, K, V]``, or `None` (zero).
        dzt: Final key-sum cotangent ``[N, H, K]``, or `None` (zero); normalized only.

    Returns:
        The gradients of q, k, v (input dtype), g (g's shape), S_0 and z_0 (fp32).
    """
    B, T, H, K, V = x.B, x.T, x.H, x.K, x.V
    table = fwd.table
    assert table is not None
    N, NC, BT = table.num_sequences, table.num_chunks, table.chunk_size
    device, dtype = x.q.device, x.q.dtype
    vector = x.gate == VECTOR_GATE
    BK, BV = chunk_score_block(K, BT) if vector else chunk_block(K), chunk_block(V)
    NK = triton.cdiv(K, BK)
    use_g, low = x.g is not None, dot_low(dtype)
    do = torch.zeros(B, T, H, V, dtype=dtype, device=device) if do is None else do.contiguous()
    use_dht = dht is not None or dzt is not None
    if use_dht:
        dht = torch.zeros(N, H, K, V, dtype=torch.float32, device=device) if dht is None else dht
        dht = dht.float().contiguous()
        if x.normalize:
            dzt = torch.zeros(N, H, K, dtype=torch.float32, device=device) if dzt is None else dzt
            dzt = dzt.float().contiguous()
    # S is recomputed rather than saved by the forward.
    states = chunk_fwd_h(x, table=table, store_final=use_g and use_dht, dot_low=low)
    dd = None
    if x.normalize and vector:
        assert fwd.o_acc is not None
        assert fwd.den is not None
        # dd_t = -(do_t · o_t) / D_t, and 0 where D_t vanishes (as the kernels' `vanishes`).
        # Vector gates take it from torch, scalar ones from `chunk_bwd_kernel_dd`: the two
        # round differently, and each gate keeps the results it was validated with.
        zero = fwd.den.abs() < torch.finfo(torch.float32).tiny
        dd = torch.where(
            zero, 0.0, -(do.float() * fwd.o_acc).sum(-1) / torch.where(zero, 1.0, fwd.den)
        ).contiguous()
    elif x.normalize:
        dd = torch.empty(B, T, H, dtype=torch.float32, device=device)
        chunk_bwd_kernel_dd[(triton.cdiv(B * T, BT), H)](
            o=fwd.o_acc, do=do, den=fwd.den, dd=dd, T_total=B * T, H=H, V=V, BT=BT, BV=BV,
            num_warps=chunk_num_warps(BT),
        )  # fmt: skip
    grads = chunk_bwd_dh(x, table=table, do=do, den=fwd.den, dd=dd, dht=dht, dzt=dzt, dot_low=low)
    common = {
        "g": x.g, "do": do, "den": fwd.den, "dh": grads.dh, "cu_seqlens": table.cu_seqlens,
        "chunk_indices": table.chunk_indices, "scale": x.scale, "H": H, "K": K, "V": V,
        "BT": BT, "BK": BK, "BV": BV, "FEATURE": x.feature, "GATE": x.gate,
        "NORMALIZE": x.normalize, "DOT_LOW": low, "num_warps": chunk_num_warps(BT),
    }  # fmt: skip
    dv = empty_output((B, T, H, V), dtype, device)
    chunk_bwd_kernel_dv[(NC, triton.cdiv(V, BV), H)](q=x.q, k=x.k, dv=dv, **common)
    dq = empty_output((B, T, H, K), dtype, device)
    dk = empty_output((B, T, H, K), dtype, device)
    # dL/dG: a scalar gate's K-block partials, or a vector gate's whole per dimension.
    dgp_shape = (B, T, H, K) if vector else (NK, B * T, H)
    dgp = torch.empty(dgp_shape, dtype=torch.float32, device=device) if use_g else None
    chunk_bwd_kernel_dqk[(NC, NK, H)](
        q=x.q, k=x.k, v=x.v, h=states.h, hz=states.hz, dd=dd, dhz=grads.dhz, dq=dq, dk=dk,
        dgp=dgp, T_total=B * T, **common,
    )  # fmt: skip
    dg = None
    if use_g:
        per_key = (K,) if vector else ()
        if use_dht:
            assert states.ht is not None
            assert dht is not None
            fin = final_state_decay_grad(dht, states.ht, dzt, states.zt, per_row=vector)
        else:
            fin = torch.zeros(N, H, *per_key, dtype=torch.float32, device=device)
        dg = torch.empty(B, T, H, *per_key, dtype=torch.float32, device=device)
        # A vector gate scans each dimension on its own, in tiles of BKG dimensions.
        BKG = chunk_block(K)
        chunk_bwd_kernel_dg[(N * H, triton.cdiv(K, BKG) if vector else 1)](
            dgp=dgp, fin=fin.contiguous(), dg=dg, cu_seqlens=table.cu_seqlens, T_total=B * T,
            H=H, K=K, NK=NK, BT=BT, BK=BKG, GATE=x.gate, num_warps=chunk_num_warps(BT),
        )  # fmt: skip
    return Gradients(
        dq=finish_output(dq, dtype), dk=finish_output(dk, dtype), dv=finish_output(dv, dtype),
        dg=dg, dh0=grads.dh0, dz0=grads.dz0,
    )  # fmt: skip


class ChunkLinearAttentionFunction(torch.autograd.Function):
    """Autograd glue: runs `chunk_fwd`, keeps its result, runs `chunk_bwd`."""

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
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Tensors are passed beside ``x`` (which holds the same ones) so autograd tracks them."""
        fwd = chunk_fwd(x, chunk_size=chunk_size)
        save_for_backward(ctx, x, fwd)
        assert fwd.o is not None
        return fwd.o, fwd.ht, fwd.zt

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dht: torch.Tensor | None, dzt: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """Return the gradients of q, k, v, g, S_0, z_0 (None for the options, absent inputs)."""
        x, fwd = saved_for_backward(ctx)
        return None, *chunk_bwd(x, fwd, do, dht, dzt), None


def chunked_linear_attention(
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
    chunk_size: int = 64,
    feature_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, State | None]:
    """Causal linear attention in the chunked form, differentiable in every tensor input.

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16), before the feature map.
        k: Keys ``[B, T, H, K]``, before the feature map.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay (<= 0): ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension: row m of the state decays
            by exp(g_t,m)), or `None` for no decay. Default: `None`.
        scale: The scale s; `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)^T z_t + eps; a row whose denominator is exactly 0
            returns 0. Default: `False`.
        eps: Denominator offset, added in fp32; must be 0 unless normalized. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"`` or ``"relu"``, applied inside the kernel; or
            a lifted map ``"taylor2"``, ``"rebased"`` or ``"favor+"`` (F = 1 + K + K², K² or
            m features, at most 256), applied by `linattn_kernels.lifted.lifted_attention`
            in its own kernel before this form runs on fp32 features (the state and
            initial_state then have F rows; the scale of taylor2 and rebased multiplies q
            before φ). Default: `"identity"`.
        initial_state: S_0 ``[N, H, K, V]``, or ``(S_0, z_0)`` with z_0 ``[N, H, K]`` when
            normalized. Default: `None`.
        output_final_state: Return the final state. Default: `False`.
        cu_seqlens: Packed sequence boundaries ``[N+1]`` (int, B == 1); the state restarts at
            each boundary and empty sequences are allowed. Default: `None`.
        chunk_size: Tokens per chunk, a power of two in [16, 128]. Default: `64`.
        feature_weights: The projection W ``[m, K]`` of ``"favor+"`` (on q's device; it gets no
            gradient); must be `None` for every other map. Default: `None`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the input dtype; final_state `None` unless
        ``output_final_state``, else S_T ``[N, H, K, V]`` fp32, or ``(S_T, z_T)`` when
        normalized.

    Raises:
        ValueError: naming the offending argument and what was expected.
    """
    if feature_map in LIFTED_MAPS:
        return lifted_attention(
            chunked_linear_attention, q, k, v, g, scale=scale, normalize=normalize, eps=eps,
            feature_map=feature_map, feature_weights=feature_weights,
            initial_state=initial_state, output_final_state=output_final_state,
            cu_seqlens=cu_seqlens, chunk_size=chunk_size,
        )  # fmt: skip
    refuse_weights(feature_map, feature_weights)
    chunk_size = check_chunk_size(chunk_size)
    x = prepare(
        q, k, v, g, scale=scale, normalize=normalize, eps=eps, feature_map=feature_map,
        initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
    )  # fmt: skip
    o, ht, zt = ChunkLinearAttentionFunction.apply(x, x.q, x.k, x.v, x.g, x.h0, x.z0, chunk_size)
    return o, final_state(x, ht, zt)


def precision_recipe(dtype: torch.dtype, *, chunk_size: int = 64) -> dict[str, object]:
    """Describe how the kernels round for inputs of ``dtype`` in the current mode.

    The result is the keyword arguments of ``linattn_verify.linear_attn.recipe.PrecisionRecipe``.
    Compiled on CUDA, dots accumulate on tensor cores (``mma``), fp32 operands go in as tf32 and
    fp32 division is ``div.full``. Compiled with bf16 inputs every dot operand is bf16, which rounds
    φ(q), φ(k), decayed keys, the stored state, P and dS: at most three such roundings meet any
    one product term, forward or backward. Under the interpreter dots and division are IEEE
    fp32 and no intermediate is rounded.

    A vector gate (g ``[B, T, H, K]``, the kernels' ``GATE == 2``) takes the same roundings
    per term (its scores are elementwise products summed over K, docs/error-model.md §2.7), so
    one recipe describes both gates.

    A lifted feature map (`linattn_kernels.lifted`) runs the fp32 path on fp32 features and
    rounds o once: the recipe of float32, exactly. For compiled bf16 inputs the bf16 recipe
    returned here over-covers it (three bf16 casts per term against at most four tf32 operand
    roundings); see lifted/README.md, "Precision recipes".

    Args:
        dtype: The input dtype (float32, float16 or bfloat16).
        chunk_size: The chunk size the kernels run with. Default: `64`.

    Returns:
        The recipe as a dict.

    Raises:
        ValueError: for an unsupported dtype or chunk size.
    """
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"Expected dtype among float32, float16, bfloat16 but got dtype={dtype}.")
    chunk_size = check_chunk_size(chunk_size)
    interpreting = _backend.INTERPRETING
    low = dot_low(dtype)
    return {
        "form": "chunk",
        "chunk_size": chunk_size,
        "accumulation": "ieee" if interpreting else "mma",
        "dot_precision": "ieee" if interpreting or low else "tf32",
        "dots_on_path": 2,
        "intermediate_dtype": "input" if low else None,
        "casts_on_path": 3 if low else 0,
        "decay_scan": "chunk_local",
        "division": "rn" if interpreting else "full",
        "naive_elu1": False,
        "eps_dtype": "float32",
    }


__all__ = [
    "CHUNK_SIZES",
    "ChunkLinearAttentionFunction",
    "ChunkTable",
    "check_chunk_size",
    "chunk_bwd",
    "chunk_fwd",
    "chunk_fwd_h",
    "chunk_table",
    "chunked_linear_attention",
    "precision_recipe",
]
