# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule in float32 torch, as kernels in the family's calling convention.

Two correct kernels with exactly known precision recipes, beside which kernels under test are
judged and out of which the bug zoo (``tests/zoo/delta_bugs.py``) builds its broken variants:

* `delta_recurrent_torch`: token by token, S' = diag(exp g_t) S, u = beta_t (v_t - S'^T k_t),
  S = S' + k_t u^T, o_t = (s q_t)^T S, every operation in fp32;
* `delta_chunk_torch`: the WY / UT chunk form of ``linattn_verify/delta/README.md`` in fp32, with
  chunk-local cumulative gates, pair weights exp(G_i - G_j) formed from the masked difference of
  the exponents (never positive; a vector gate's weight stays inside the K-sum) and the
  triangular inverse T = L^-1 by forward substitution.

Inputs in fp16 / bf16 are upcast to fp32 exactly; o is rounded back to the input dtype once, the
final state is returned in fp32 ``[N, H, K, V]``. The in-kernel L2 norm x / sqrt(Σ x² + 1e-6) is
computed in fp32 (eps rounded to fp32, as FLA adds it). Both kernels are plain torch operations,
so their backward is torch autograd of the same fp32 operations, and they run on any device.

`delta_chunk_torch` also takes ``state_dtype=``: the chunk-boundary state is rounded to it where
the chunk's dots read it (W S and Q S), the running state staying fp32 (FLA stores ``h`` per
chunk in the input dtype); `with_state_dtype` gives the kernel whose recipe declares it
(`DeltaRecipe.state_dtype`). The default (`None`) is the fp32 kernel unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from linattn_verify.core.memory import contiguous_cotangent
from linattn_verify.delta.kernel import DeltaCapabilities, DeltaKernel, DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem, validate_delta
from linattn_verify.delta.reference import (
    DeltaSequence,
    assemble,
    forward_substitution_inverse,
    pair_weights,
    recurrent_sequence,
)
from linattn_verify.errors import InvalidArgument

DEFAULT_CHUNK_SIZE = 16
"""C of `delta_chunk_torch` when the caller passes none."""

REFERENCE_CHUNK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""The chunk sizes `delta_reference_kernels` declares (the code takes any int >= 1)."""

F32 = torch.float32

DeltaResult = tuple[torch.Tensor, torch.Tensor | None]
"""o ``[B, T, H, V]`` in the input dtype and S_T ``[N, H, K, V]`` fp32 (or `None`)."""


def float32_problem(
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
) -> tuple[DeltaProblem, torch.dtype]:
    """Validate a call in the calling convention and return it in fp32, with the input dtype.

    The inputs are made contiguous first (as FLA's ``input_guard`` does), so reductions round
    the same way whatever the caller's strides (the kernels make their cotangents contiguous
    too, `contiguous_cotangent`). beta may lie in [0, 2) (negative eigenvalues).

    Raises:
        InvalidArgument: naming the first malformed argument (`validate_delta`).
    """

    def tracked(x: Any) -> Any:
        return x.contiguous() if isinstance(x, torch.Tensor) else x

    def detached(x: Any) -> Any:
        return x.detach() if isinstance(x, torch.Tensor) else x

    q, k, v, beta, g = tracked(q), tracked(k), tracked(v), tracked(beta), tracked(g)
    initial_state = tracked(initial_state)
    # Validation reads values (min, max, finiteness) as Python scalars, which autograd warns
    # about: it sees detached views, and the problem then gets the tensors autograd tracks.
    checked = validate_delta(
        detached(q),
        detached(k),
        detached(v),
        detached(beta),
        detached(g),
        scale=scale,
        l2norm_qk=use_qk_l2norm_in_kernel,
        initial_state=detached(initial_state),
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        allow_negative_eigenvalues=True,
    )
    problem = replace(checked, q=q, k=k, v=v, beta=beta, g=g, initial_state=initial_state)
    return problem.to(F32), problem.q.dtype


def chunk_terms(
    q: torch.Tensor, k: torch.Tensor, g: torch.Tensor | None
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None
]:
    """Return the gate-weighted pieces of one chunk: ``Akk, Aqk, k_in, q_in, k_out, decay``.

    With G the chunk-local cumulative gate (``[H, c]`` or ``[H, c, K]``):
    Akk = strict_tril(Σ_m K_im K_jm e^{G_im - G_jm}) and Aqk = tril(Σ_m Q_im K_jm
    e^{G_im - G_jm}) ``[H, c, c]``; k_in = K ⊙ e^G, q_in = Q ⊙ e^G, k_out = K ⊙ e^{G_c - G}
    ``[H, c, K]``; decay = e^{G_c} ``[H, 1, 1]`` or ``[H, K, 1]`` (`None` without a gate).

    Args:
        q: The chunk's queries ``[H, c, K]`` (unscaled).
        k: The chunk's keys ``[H, c, K]``.
        g: The chunk's gates ``[H, c]``, ``[H, c, K]`` or `None`.
    """
    c = q.shape[1]
    if g is None:
        ones = torch.ones(c, c, dtype=q.dtype, device=q.device)
        Akk = (k @ k.transpose(-1, -2)) * ones.tril(-1)
        Aqk = (q @ k.transpose(-1, -2)) * ones.tril()
        return Akk, Aqk, k, q, k, None
    if g.ndim == 2:
        G = g.cumsum(-1)  # [H, c]
        Akk = (k @ k.transpose(-1, -2)) * pair_weights(G, strict=True, vector=False)
        Aqk = (q @ k.transpose(-1, -2)) * pair_weights(G, strict=False, vector=False)
        eG = torch.exp(G)[..., None]
        k_out = k * torch.exp(G[:, -1:] - G)[..., None]
        return Akk, Aqk, k * eG, q * eG, k_out, torch.exp(G[:, -1])[:, None, None]
    # A vector gate: the weight of dimension m stays inside the K-sum.
    G = g.cumsum(-2)  # [H, c, K]
    Akk = (k[:, :, None, :] * k[:, None, :, :] * pair_weights(G, strict=True, vector=True)).sum(-1)
    Aqk = (q[:, :, None, :] * k[:, None, :, :] * pair_weights(G, strict=False, vector=True)).sum(-1)
    eG = torch.exp(G)
    k_out = k * torch.exp(G[:, -1:, :] - G)
    return Akk, Aqk, k * eG, q * eG, k_out, torch.exp(G[:, -1, :])[:, :, None]


STATE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
"""What `delta_chunk_torch`'s ``state_dtype=`` takes (float32: no rounding beyond fp32's)."""


def _state_dtype(state_dtype: str | None) -> torch.dtype | None:
    """The torch dtype the state is read in, `None` for fp32 (no rounding)."""
    if state_dtype is not None and state_dtype not in STATE_DTYPES:
        raise InvalidArgument(
            f"Got state_dtype={state_dtype!r}, but state_dtype must be one of {STATE_DTYPES} "
            "or None."
        )
    return None if state_dtype in (None, "float32") else getattr(torch, state_dtype)


def _chunk_sequence(
    seq: DeltaSequence, scale: float, C: int, low: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return o ``[L, H, V]`` and S_L ``[H, K, V]`` of one fp32 sequence in the chunk form.

    With ``low`` the chunk's dots read the state rounded to it (the running state stays fp32).
    """
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    outputs = []
    for start in range(0, L, C):
        end = min(start + C, L)
        c = end - start
        q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
        beta = seq.beta[:, start:end, None]  # [H, c, 1]
        g = None if seq.g is None else seq.g[:, start:end]
        Akk, Aqk, k_in, q_in, k_out, decay = chunk_terms(q, k, g)
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        T = forward_substitution_inverse(eye + beta * Akk)  # [H, c, c]
        W = T @ (beta * k_in)  # [H, c, K]
        U = T @ (beta * v)  # [H, c, V]
        S_in = S if low is None else S.to(low).to(S.dtype)
        Vn = U - W @ S_in  # [H, c, V]
        outputs.append(scale * (q_in @ S_in + Aqk @ Vn))  # [H, c, V]
        S = (S if decay is None else decay * S) + k_out.transpose(-1, -2) @ Vn
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.cat(outputs, dim=1).transpose(0, 1), S


def delta_recurrent_torch(
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
) -> DeltaResult:
    """Evaluate the delta rule token by token in fp32 (differentiable by autograd).

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16).
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log gate ``[B, T, H]`` or ``[B, T, H, K]``, <= 0, or `None`.
        beta: Write strengths ``[B, T, H]`` in [0, 2).
        scale: Scale of q; `None` means K^-1/2. Default: `None`.
        initial_state: S_0 ``[N, H, K, V]``. Default: `None`.
        output_final_state: Return S_T. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1). Default: `None`.
        use_qk_l2norm_in_kernel: L2-normalise q and k first, in fp32. Default: `False`.

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` in the dtype of q; S_T ``[N, H, K, V]`` fp32,
        or `None` unless ``output_final_state``.

    Raises:
        InvalidArgument: naming the first malformed argument.
    """
    p, dtype = float32_problem(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    # The float64 reference's recurrence, evaluated in the sequence's fp32, one sequence at a
    # time as a kernel runs them.
    o, S = assemble(p, lambda seq: recurrent_sequence(seq, p.scale), most=1)
    # Cotangents are made contiguous too: layout-exact backward (`float32_problem`).
    return contiguous_cotangent(o.to(dtype)), contiguous_cotangent(S)


def delta_chunk_torch(
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
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    state_dtype: str | None = None,
) -> DeltaResult:
    """Evaluate the delta rule in the WY / UT chunk form in fp32 (differentiable by autograd).

    Per chunk of C tokens (the last of a sequence may be shorter; nothing is padded):
    L = I + strict_tril(diag(beta) Akk), T = L^-1 by forward substitution, W = T diag(beta)
    (K ⊙ e^G), U = T diag(beta) V, Vn = U - W S, O = s [(Q ⊙ e^G) S + Aqk Vn] and
    S <- e^{G_c} ⊙ S + (K ⊙ e^{G_c - G})^T Vn (`chunk_terms` gives Akk, Aqk and the weights).

    Args:
        q: Queries ``[B, T, H, K]`` (fp32, fp16 or bf16).
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log gate ``[B, T, H]`` or ``[B, T, H, K]``, <= 0, or `None`.
        beta: Write strengths ``[B, T, H]`` in [0, 2).
        scale: Scale of q; `None` means K^-1/2. Default: `None`.
        initial_state: S_0 ``[N, H, K, V]``. Default: `None`.
        output_final_state: Return S_T. Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]`` (B == 1). Default: `None`.
        use_qk_l2norm_in_kernel: L2-normalise q and k first, in fp32. Default: `False`.
        chunk_size: C, an int >= 1. Default: `16`.
        state_dtype: What the chunk's dots read the state in (``"float16"``, ``"bfloat16"``;
            ``"float32"`` or `None`: fp32, no extra rounding). Default: `None`.

    Returns:
        ``(o, final_state)`` as `delta_recurrent_torch` returns them.

    Raises:
        InvalidArgument: naming the first malformed argument.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidArgument(f"Got chunk_size={chunk_size!r}, but chunk_size must be an int >= 1.")
    low = _state_dtype(state_dtype)
    p, dtype = float32_problem(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    # One sequence at a time, as a kernel runs them: its packed and separate runs agree bit for
    # bit (`varlen_matches_separate_runs`).
    o, S = assemble(p, lambda seq: _chunk_sequence(seq, p.scale, chunk_size, low), most=1)
    return contiguous_cotangent(o.to(dtype)), contiguous_cotangent(S)


REFERENCE_CAPABILITIES = DeltaCapabilities(
    gates=("none", "scalar", "vector"),
    l2norm_qk=(False, True),
    negative_eigenvalues=True,
    # fp32 throughout and no normalisation assumed: keys of any norm are within its contract
    # (outside beta ||k||² <= 2 the problem is ill-conditioned, which the bound shows).
    unit_norm_keys=False,
    backward=True,
    varlen=True,
    initial_state=True,
    final_state=True,
    dtypes=("float32", "float16", "bfloat16"),
    # Plain torch on a CPU: the same operations in the same order on every run; the chunk form
    # inverts by forward substitution (the inverse stays lower triangular). Inputs and
    # cotangents are made contiguous first, so no reduction follows a caller's strides.
    deterministic=True,
    causal_exact=True,
    layout_exact=True,
)
"""What both reference kernels support: the whole function, in fp32, fp16 and bf16 (the chunk
kernel also declares `REFERENCE_CHUNK_SIZES`)."""


def delta_reference_kernels() -> list[DeltaKernel]:
    """Return the fp32 torch references: ``torch/delta.recurrent`` and ``torch/delta.chunk``.

    Their recipes name no storage rounding: every intermediate stays fp32 (IEEE adds, no tf32),
    only o is rounded to the input dtype.
    """
    recurrent = DeltaKernel(
        name="torch/delta.recurrent",
        fn=delta_recurrent_torch,
        capabilities=REFERENCE_CAPABILITIES,
        recipe=DeltaRecipe(form="recurrent"),
    )
    chunk = DeltaKernel(
        name="torch/delta.chunk",
        fn=delta_chunk_torch,
        capabilities=replace(REFERENCE_CAPABILITIES, chunk_sizes=REFERENCE_CHUNK_SIZES),
        recipe=DeltaRecipe(form="chunk", chunk_size=DEFAULT_CHUNK_SIZE),
    )
    return [recurrent, chunk]


def with_state_dtype(kernel: DeltaKernel, state_dtype: str) -> DeltaKernel:
    """Return ``kernel`` (`delta_chunk_torch`'s) reading its state in ``state_dtype``, declared.

    The call option ``state_dtype=`` and the recipe's `DeltaRecipe.state_dtype` say the same
    thing, so the bound charges the rounding; the name gets a ``[state=...]`` suffix.

    Raises:
        InvalidArgument: if ``kernel`` is not a chunk kernel of `delta_chunk_torch` or the dtype
            is not one of `STATE_DTYPES`.
    """
    _state_dtype(state_dtype)
    if kernel.fn is not delta_chunk_torch:
        raise InvalidArgument(
            f"Got kernel {kernel.name!r}, but only delta_chunk_torch (torch/delta.chunk) takes "
            "state_dtype=."
        )
    if state_dtype == "float32":
        return kernel
    declared = kernel.recipe

    def recipe(dtype: torch.dtype) -> DeltaRecipe:
        base = declared if isinstance(declared, DeltaRecipe) else declared(dtype)
        return replace(base, state_dtype=state_dtype)

    renamed = kernel.with_options(f"{kernel.name}[state={state_dtype}]", state_dtype=state_dtype)
    return replace(renamed, recipe=recipe)


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "REFERENCE_CAPABILITIES",
    "REFERENCE_CHUNK_SIZES",
    "STATE_DTYPES",
    "chunk_terms",
    "delta_chunk_torch",
    "delta_recurrent_torch",
    "delta_reference_kernels",
    "float32_problem",
    "with_state_dtype",
]
