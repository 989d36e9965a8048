# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The reference forms run in float32 by torch, as kernels in the calling convention.

They are correct kernels the harness must accept (beside our Triton kernels), with exactly known
precision recipes: global fp32 cumsum for the parallel form, chunk-local cumsums for the chunked
form, per-step exp(g) for the recurrent form, no tl.dot operand rounding, correctly rounded
division. Inputs in fp16/bf16 are upcast exactly; the output is rounded back to the input dtype.

The chunked kernel also takes ``state_dtype=`` (`float32_chunk_reference`): the chunk-boundary
state S (and key sum z) is rounded to that format where the next chunk's dots read it (q·S), while
the running state stays fp32, as FLA's chunk kernels store ``h`` per chunk for the output pass.
Every term that passes through the state then meets one rounding to it, which the precision
recipe declares as ``intermediate_dtype=state_dtype, casts_on_path=1`` (`chunk_recipe`;
docs/error-model.md §2.4, "Casts dominate"). The default (`None`) is the fp32 kernel unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from linattn_verify.core.memory import contiguous_cotangent
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.oracles._sequence import (
    SequenceResult,
    assemble,
    divide_rows,
    require_problem,
    sequence_inputs,
)
from linattn_verify.linear_attn.oracles.chunk import chunk_reference
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.oracles.recurrent import recurrent_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.typing import Form

if TYPE_CHECKING:
    from linattn_verify.linear_attn.kernel import Kernel

REFERENCE_CHUNK_SIZE = 8

RECIPES: dict[str, PrecisionRecipe] = {
    "parallel": PrecisionRecipe(
        form="parallel", dots_on_path=0, decay_scan="global", division="rn"
    ),
    "chunk": PrecisionRecipe(
        form="chunk",
        chunk_size=REFERENCE_CHUNK_SIZE,
        dots_on_path=0,
        decay_scan="chunk_local",
        division="rn",
    ),
    "recurrent": PrecisionRecipe(
        form="recurrent", dots_on_path=0, decay_scan="per_step", division="rn"
    ),
}
"""The precision recipe of each float32 reference form."""


STATE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
"""What the chunked reference's ``state_dtype=`` takes (float32: no rounding beyond fp32's)."""


def chunk_recipe(state_dtype: str | None = None) -> PrecisionRecipe:
    """Return the recipe of the float32 chunked reference whose state is read in ``state_dtype``.

    One rounding of the state where the chunk's dots read it is one cast on every inter-chunk
    term's path; charging it to every term (``casts_on_path=1``) over-covers the intra-chunk
    terms and the fp32 final state, which never pass through it.

    Raises:
        InvalidArgument: if ``state_dtype`` is not one of `STATE_DTYPES` or `None`.
    """
    name = _state_dtype_name(state_dtype)
    if name is None:
        return RECIPES["chunk"]
    return replace(RECIPES["chunk"], intermediate_dtype=name, casts_on_path=1)


def _state_dtype_name(state_dtype: str | None) -> str | None:
    """``None`` for an fp32 state (no rounding), else the dtype's name."""
    if state_dtype is not None and state_dtype not in STATE_DTYPES:
        raise InvalidArgument(
            f"Got state_dtype={state_dtype!r}, but state_dtype must be one of {STATE_DTYPES} "
            "or None."
        )
    return None if state_dtype in (None, "float32") else state_dtype


def evaluate_form(form: Form, problem: Problem) -> tuple[torch.Tensor, Any]:
    """Evaluate ``problem`` in ``form`` by the reference code, in the problem's dtype."""
    if form == "parallel":
        return parallel_reference(problem)
    if form == "chunk":
        return chunk_reference(problem, chunk_size=REFERENCE_CHUNK_SIZE)
    return recurrent_reference(problem)


def convention_kernel(
    impl: Callable[[Problem], tuple[torch.Tensor, Any]], *, contiguous: bool = True
) -> Callable[..., tuple[torch.Tensor, Any]]:
    """Wrap ``impl(problem)`` in the calling convention, with the configurable keywords.

    With ``contiguous`` the inputs are made contiguous first, as most kernels do (FLA's
    ``input_guard``), and so are the cotangents the backward receives (`contiguous_cotangent`):
    torch's reductions would otherwise follow the strides and round differently per layout,
    and the contract asks for bit-identical results whatever the strides.
    """

    def kernel(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        normalize: bool = False,
        eps: float = 0.0,
        feature_map: str = "identity",
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
        feature_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        if contiguous:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            g = None if g is None else g.contiguous()
            if initial_state is not None:
                initial_state = (
                    tuple(x.contiguous() for x in initial_state)
                    if isinstance(initial_state, tuple | list)
                    else initial_state.contiguous()
                )
        problem = validate_problem(
            q,
            k,
            v,
            g,
            scale=scale,
            normalize=normalize,
            eps=eps,
            feature_map=feature_map,
            initial_state=initial_state,
            output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
            feature_weights=feature_weights,
        )
        o, state = impl(problem)
        if contiguous:
            return contiguous_cotangent(o), contiguous_cotangent(state)
        return o, state

    kernel.__name__ = getattr(impl, "__name__", "kernel")
    kernel.__qualname__ = kernel.__name__
    return kernel


def float32_reference(form: Form) -> Callable[..., tuple[torch.Tensor, Any]]:
    """Return the float32 torch kernel of ``form`` in the calling convention (configurable).

    The chunked one is `float32_chunk_reference`'s (it also takes ``state_dtype=``).
    """
    if form == "chunk":
        return float32_chunk_reference()

    def impl(problem: Problem) -> tuple[torch.Tensor, Any]:
        o, state = evaluate_form(form, problem.to(torch.float32))
        return o.to(problem.q.dtype), state

    impl.__name__ = f"float32_{form}_reference"
    return convention_kernel(impl)


class Float32ChunkReference:
    """The float32 chunked kernel (C = 8) in the calling convention; also takes ``state_dtype=``.

    ``state_dtype`` (one of `STATE_DTYPES`, or `None`: the default, fp32) is the format the
    chunk-boundary state and key sum are rounded to where the next chunk reads them; its recipe
    is `chunk_recipe` of it (`with_state_dtype` gives the kernel declaring both). Decay: none or a
    scalar gate with a 16-bit state (a vector gate is an `InvalidArgument`); any gate in fp32.
    """

    def __init__(self) -> None:
        # What reports and repro lines name the kernel function by (as for a plain function).
        self.__name__ = self.__qualname__ = "float32_chunk_reference"
        self._plain = convention_kernel(
            _named(lambda p: _out(p, evaluate_form("chunk", p.to(torch.float32))), "float32_chunk")
        )

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        state_dtype: str | None = None,
        **convention: Any,
    ) -> tuple[torch.Tensor, Any]:
        """Call the kernel: ``convention`` holds the calling convention's keywords."""
        name = _state_dtype_name(state_dtype)
        if name is None:
            return self._plain(q, k, v, g, **convention)
        rounded = convention_kernel(
            _named(lambda p: _rounded_state_chunk(p, name), f"float32_chunk_{name}_state")
        )
        return rounded(q, k, v, g, **convention)


def float32_chunk_reference() -> Float32ChunkReference:
    """Return the float32 chunked kernel (`Float32ChunkReference`)."""
    return Float32ChunkReference()


def with_state_dtype(kernel: Kernel, state_dtype: str) -> Kernel:
    """Return ``kernel`` (a `Float32ChunkReference`'s) reading its state in ``state_dtype``.

    The call option ``state_dtype=`` and the recipe (`chunk_recipe`) say the same thing, so the
    bound charges the rounding; the name gets a ``[state=...]`` suffix.

    Raises:
        InvalidArgument: if ``kernel`` does not run `Float32ChunkReference` or the dtype is not
            one of `STATE_DTYPES`.
    """
    name = _state_dtype_name(state_dtype)
    if not isinstance(kernel.fn, Float32ChunkReference):
        raise InvalidArgument(
            f"Got kernel {kernel.name!r}, but only the float32 chunked reference (torch/chunk) "
            "takes state_dtype=."
        )
    if name is None:
        return kernel
    renamed = kernel.with_options(f"{kernel.name}[state={name}]", state_dtype=name)
    capabilities = replace(kernel.capabilities, gates=("scalar",))
    return replace(renamed, recipe=chunk_recipe(name), capabilities=capabilities)


def _named(
    impl: Callable[[Problem], tuple[torch.Tensor, Any]], name: str
) -> Callable[[Problem], tuple[torch.Tensor, Any]]:
    impl.__name__ = name
    return impl


def _out(problem: Problem, result: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
    o, state = result
    return o.to(problem.q.dtype), state


def _rounded_state_chunk(problem: Problem, state_dtype: str) -> tuple[torch.Tensor, Any]:
    """The fp32 chunked form of `chunk_reference` whose dots read S, z rounded to ``state_dtype``.

    Raises:
        InvalidArgument: for a vector gate (not implemented with a rounded state).
    """
    require_problem(problem)
    if problem.vector_gate:
        raise InvalidArgument(
            f"Got a vector gate g {list(problem.g.shape) if problem.g is not None else None} with "
            f"state_dtype={state_dtype!r}; the rounded-state reference takes no gate or a scalar "
            "gate [B, T, H]."
        )
    p = problem.to(torch.float32)
    low = getattr(torch, state_dtype)

    def one(n: int, b: int, start: int, end: int) -> SequenceResult:
        return _rounded_sequence(p, REFERENCE_CHUNK_SIZE, low, n, b, start, end)

    return _out(problem, assemble(p, one))


def _rounded_sequence(
    p: Problem, C: int, low: torch.dtype, n: int, b: int, start: int, end: int
) -> SequenceResult:
    """One sequence of `_rounded_state_chunk`: `chunk_reference`'s scalar-gate loop, S read low."""
    s = p.outer_scale
    seq = sequence_inputs(p, n, b, start, end, heads_first=True)
    q, k, v, g = seq.q, seq.k, seq.v, seq.g  # [H, L, K], [H, L, K], [H, L, V], [H, L] | None
    S, z = seq.S0, seq.z0
    outputs = []
    for c0 in range(0, seq.L, C):
        c1 = min(c0 + C, seq.L)
        qc, kc, vc = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1]
        # What the chunk's dots read: the state as stored in the low format (fp32 arithmetic).
        S_in, z_in = S.to(low).to(S.dtype), z.to(low).to(z.dtype)
        A = s * (qc @ kc.transpose(-1, -2))  # [H, c, c]
        mask = torch.ones(c1 - c0, c1 - c0, dtype=torch.bool, device=q.device).tril()
        if g is None:
            P = A.masked_fill(~mask, 0)
            N = P @ vc + s * (qc @ S_in)
            Zc = P.sum(-1) + s * (qc @ z_in[..., None])[..., 0]
            S = S + kc.transpose(-1, -2) @ vc
            z = z + kc.sum(dim=1)
        else:
            Gl = torch.cumsum(g[:, c0:c1], dim=-1)  # [H, c]
            diff = (Gl[:, :, None] - Gl[:, None, :]).masked_fill(~mask, float("-inf"))
            P = A * torch.exp(diff)
            w_in = torch.exp(Gl)  # [H, c]
            N = P @ vc + s * w_in[..., None] * (qc @ S_in)
            Zc = P.sum(-1) + s * w_in * (qc @ z_in[..., None])[..., 0]
            Gl_end = Gl[:, -1:]
            kw = kc * torch.exp(Gl_end - Gl)[..., None]  # [H, c, K]
            total = torch.exp(Gl_end)  # [H, 1]
            S = total[..., None] * S + kw.transpose(-1, -2) @ vc
            z = total * z + kw.sum(dim=1)
        outputs.append(divide_rows(N, Zc + p.eps) if p.normalize else N)
    o = torch.cat(outputs, dim=1) if outputs else q.new_zeros(seq.H, 0, seq.V)
    return o.transpose(0, 1), S, z


__all__ = [
    "RECIPES",
    "REFERENCE_CHUNK_SIZE",
    "STATE_DTYPES",
    "Float32ChunkReference",
    "chunk_recipe",
    "convention_kernel",
    "evaluate_form",
    "float32_chunk_reference",
    "float32_reference",
    "with_state_dtype",
]
