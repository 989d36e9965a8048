# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""flash-linear-attention (``fla-core==0.6.0``) kernels as `Kernel` objects.

`fla_kernels` returns one `Kernel` per FLA function and semantic variant:

========================================  ==========  =====  =====  ======  ======  ============
name                                      form        norm.  decay  h0/hT   varlen  16-bit casts
========================================  ==========  =====  =====  ======  ======  ============
``fla/linear_attn.chunk``                 chunk 64    no     no     yes     yes     1
``fla/linear_attn.chunk+normalize``       chunk 64    1e-10  no     yes     yes     5
``fla/linear_attn.fused_chunk``           chunk 64    no     no     yes     yes     2
``fla/linear_attn.fused_chunk+normalize`` chunk 64    1e-10  no     yes     yes     5
``fla/linear_attn.fused_recurrent``       recurrent   no     no     yes     yes     0
``fla/linear_attn.fused_recurrent+...``   recurrent   1e-10  no     yes     yes     5
``fla/simple_gla.chunk``                  chunk 64    no     g      yes     yes     2
``fla/simple_gla.fused_recurrent``        recurrent   no     g      yes     yes     0
``fla/simple_gla.parallel``               parallel    no     g      no      yes     2
``fla/retention.chunk``                   chunk 64    no     γ_h    yes     yes     2
``fla/retention.fused_recurrent``         recurrent   no     γ_h    yes     yes     0
``fla/retention.parallel``                parallel    no     γ_h    no      yes     2
``fla/gla.chunk``                         chunk 64    no     g [K]  yes     yes     3
``fla/gla.fused_recurrent``               recurrent   no     g [K]  yes     yes     0
``fla/lightning_attn.chunk``              chunk 64    no     λ_h    yes     yes     2
``fla/lightning_attn.fused_recurrent``    recurrent   no     λ_h    yes     yes     0
========================================  ==========  =====  =====  ======  ======  ============

and the six Based and ReBased kernels (lifted feature maps ``taylor2`` and ``rebased``) of
`linattn_verify.linear_attn.adapters.fla_lifted`, whose docstring records what they compute and
round.

What FLA computes, read off its 0.6.0 sources:

* The scale defaults to K^-1/2 everywhere; FLA applies no feature map (``feature_maps=
  ("identity",)``: the harness feeds features).
* ``normalize=True`` (linear_attn only; ``fla/ops/linear_attn/utils.py``) divides the
  unnormalized output, already rounded to the input dtype, by ``(q * scale * k_cum).sum(-1) +
  1e-10`` computed by torch in the input dtype, where ``k_cum`` is the key cumsum (rounded to the
  input dtype) plus the initial key sum z_0. That is our normalized semantics with eps = 1e-10
  added to s φ(q)^T z_t, so every variant maps exactly. FLA's key sum is ``[N, 1, H, K]``; the
  adapter maps ours (``[N, H, K]``) in both directions, differentiably.
* simple_gla takes our g ``[B, T, H]`` (natural log) as is. RetNet's decay is fixed per head:
  γ_h = 1 - 2^(-5-h), applied as ``log`` of it in float32 (`retention_log_decay`, the kernels'
  `Kernel.implied_decay`).
* gla takes our vector gate g ``[B, T, H, K]`` (natural log) as is: ``chunk_gla``'s ``g``,
  ``fused_recurrent_gla``'s ``gk``. ``chunk_gla`` asserts a gate (``decay_required``: it is
  never given g = None); ``fused_recurrent_gla`` takes ``gk=None``. Its value gate ``gv``
  (S_t = S_{t-1} diag(exp(gv_t)), a decay per value column) is checked by declaration, not by
  an adapter here: ``check fla.ops.gla:fused_recurrent_gla --decay vector --value-gate
  --no-backward --form recurrent --varlen`` (the corpus entry ``fla_fused_recurrent_gla_gv``).
* lightning_attn's decay is fixed per head and layer: g_h = -(8/H)(1 - l/L) h for layer l of L,
  computed by torch in float32 (`lightning_log_decay`); the adapters run layer l = 0 (any L),
  the steepest layer: g_h = -8h/H.
* ``parallel_simple_gla`` and ``parallel_retention`` take no initial state and return no final
  state (their second result is the optional attention matrix, dropped here).

Precision (docs/error-model.md §7): fp32 dots run IEEE under the Triton interpreter, and with
Triton's default tf32 operands and tensor-core accumulation compiled on CUDA. For 16-bit inputs
FLA rounds intermediates to the input dtype (``intermediate_dtype="input"``); ``casts_on_path``
counts the roundings a single term meets on its longest path (see `_LOW_CASTS`). The bf16 and
fp16 backward of the ``chunk`` kernels asserts even K and V (``chunk_bwd_dv``: Triton
miscompiles odd 16-bit tails into illegal memory accesses), so those kernels declare
``even_head_dims`` for both 16-bit dtypes.

Zero denominators: FLA divides ``o / denom`` with torch, IEEE arithmetic and no guard, so where
its computed denominator is 0 it returns NaN (0/0) or ±inf (x/0): the normalized kernels declare
``zero_denominator="ieee"`` (docs/design.md §3). With eps = 1e-10 the exact denominator is 0
only in fp16, where torch adds eps in fp16 and 1e-10 rounds to 0 (``eps_dtype``): a row with
q = 0 is then 0/0, whose exact value is undefined, and FLA's NaN there is its declared IEEE value
(counted as undefined, not a failure; fp32 and bf16 keep eps and return 0 on such a row). The
chunked kernels' backward (``chunk``, ``fused_chunk``) spreads that NaN into dv of the chunk's
later keys (0·NaN in the masked intra-chunk product), whose exact gradient does not depend on
the 0/0 row: the oracle reports those as non-finite mismatches, a real finding.

Known weakness (fp16, normalized): torch computes the normalizer in fp16, where s q·k_cum can
underflow to 0 (inf or NaN: accepted where the denominator may round to 0, as IEEE division of a
computed 0), and the unnormalized output, rounded to fp16 before the division, can overflow
although the normalized result is about |v|. The kernels still declare fp16, as FLA does; the
oracle reports the overflow as a non-finite mismatch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from linattn_verify.core.fla_release import CHUNK_SIZE, FLA_REQUIREMENT
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe, dtype_name
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.typing import DecayScan, Division, Form

FLA_EPS = 1e-10
"""The eps FLA adds to the normalizer (a literal in ``normalize_with_z_state``)."""

PARALLEL_BLOCK = 128
"""The query block of FLA's parallel kernels, also the block of their chunk-local g cumsum."""

PROMISES: dict[str, Any] = {"deterministic": True, "causal_exact": True, "layout_exact": True}
"""The exactness FLA's linear-attention kernels keep (measured: every rerun, cut and layout of
the catalogue bit-identical under the interpreter); declared so the catalogue judges it strictly."""

KernelFn = Callable[..., tuple[torch.Tensor, Any]]

_LOW_CASTS: dict[str, int] = {
    # h (states_in_fp32=False) on the inter-chunk path, the scores A on the intra-chunk path.
    "chunk": 1,
    # The same plus the decayed values (v * exp2(g_last - g)).to(v.dtype) of the state update.
    "chunk+decay": 2,
    # (q * scale).to(q.dtype), then the scores or the state h, each cast before its tl.dot.
    "fused_chunk": 2,
    # Everything in fp32 registers; only the output is rounded (charged as the output cast).
    "fused_recurrent": 0,
    # chunk_gla: (q * exp(G)).to(q.dtype) and the state h (states_in_fp32=False) before their
    # tl.dot, and the decayed keys of the state update; the intra-chunk scores A, cast to v's
    # dtype, are on the other path.
    "chunk+vector": 3,
    # (q * scale).to(q.dtype) and the scores cast before the tl.dot with v.
    "parallel": 2,
    # torch in the input dtype, on the denominator path: z_0 (see `_linear_attn`), k_cum,
    # k_cum + z_0, q * scale, the product with k_cum and the K-sum are each rounded. The
    # numerator meets its kernel's casts plus its rounding to the input dtype before the
    # division: fewer for every FLA form.
    "normalize": 5,
}
"""Roundings to the input dtype on a term's longest path, for 16-bit inputs."""


def retention_log_decay(problem: Problem) -> torch.Tensor:
    """Return the log decay FLA's retention kernels apply: log(1 - 2^(-5-h)) in float32.

    FLA computes ``(1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float))).log()`` (the power and
    the difference are exact in float32, the log is rounded), so the oracle uses that value.

    Args:
        problem: The problem; only its shape ``[B, T, H, ...]`` matters.

    Returns:
        g ``[B, T, H]`` (float32, on the problem's device).
    """
    B, T, H = problem.q.shape[:3]
    heads = torch.arange(H, dtype=torch.float32, device=problem.q.device)
    gamma = (1 - 2.0 ** (-5.0 - heads)).log()
    return gamma.expand(B, T, H).contiguous()


LIGHTNING_LAYER = (0, 1)
"""The (layer_idx, num_layers) the lightning_attn adapters run: layer 0, the steepest decay."""


def lightning_log_decay(problem: Problem) -> torch.Tensor:
    """Return the log decay FLA's lightning_attn kernels apply at `LIGHTNING_LAYER`.

    FLA computes ``-(8 / H * (1 - layer_idx / num_layers)) * torch.arange(H, dtype=torch.float)``
    (a Python float times float32 head indices, rounded once in float32); the same expression
    here gives the same values.

    Args:
        problem: The problem; only its shape ``[B, T, H, ...]`` matters.

    Returns:
        g ``[B, T, H]`` (float32, on the problem's device).
    """
    B, T, H = problem.q.shape[:3]
    layer, layers = LIGHTNING_LAYER
    heads = torch.arange(H, dtype=torch.float32, device=problem.q.device)
    return (-(8 / H * (1 - layer / layers)) * heads).expand(B, T, H).contiguous()


def _gla(fla_fn: KernelFn, *, gate_name: str) -> KernelFn:
    """Wrap a ``fla.ops.gla`` function, whose vector gate is the keyword ``gate_name``."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        initial_state: torch.Tensor | None = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        return fla_fn(
            q=q,
            k=k,
            v=v,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
            **{gate_name: g},
        )

    return fn


def _linear_attn(fla_fn: KernelFn, *, normalize: bool) -> KernelFn:
    """Wrap a ``fla.ops.linear_attn`` function (no decay) for one value of ``normalize``."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        if g is not None:
            raise InvalidArgument("FLA's linear_attn kernels take no decay, but got g.")
        fla_state: Any = initial_state
        if normalize and initial_state is not None:
            if not (isinstance(initial_state, tuple | list) and len(initial_state) == 2):
                raise InvalidArgument(
                    "Expected the initial state of a normalized kernel as a pair (S_0, z_0) but "
                    f"got {type(initial_state).__name__}."
                )
            S0, z0 = initial_state
            # FLA's key sum carries a singleton token axis, [N, 1, H, K], and FLA keeps it in
            # the input dtype (the key cumsum it returns is rounded to k.dtype). Passed in
            # fp32 instead, torch's type promotion makes the normalized output fp32 for 16-bit
            # inputs; in the input dtype it is one more rounding, which the recipe counts.
            fla_state = (S0, z0.to(k.dtype).unsqueeze(1))
        o, final = fla_fn(
            q=q,
            k=k,
            v=v,
            scale=scale,
            initial_state=fla_state,
            output_final_state=output_final_state,
            normalize=normalize,
            cu_seqlens=cu_seqlens,
        )
        if not output_final_state:
            return o, None
        if normalize:
            state, key_sum = final
            return o, (state, key_sum.squeeze(1))
        return o, final

    return fn


def _gated(fla_fn: KernelFn, *, states: bool, takes_g: bool) -> KernelFn:
    """Wrap a simple_gla (``takes_g``), retention or lightning_attn function; ``states``: h0, hT."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        initial_state: torch.Tensor | None = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {"scale": scale, "cu_seqlens": cu_seqlens}
        if takes_g:
            kwargs["g"] = g
        elif g is not None:
            raise InvalidArgument(
                "This FLA kernel (retention, lightning_attn) applies its own per-head decay and "
                "takes no g."
            )
        if states:
            kwargs.update(initial_state=initial_state, output_final_state=output_final_state)
        elif initial_state is not None or output_final_state:
            raise InvalidArgument(
                "FLA's parallel kernels take no initial state and return no final state."
            )
        o, second = fla_fn(q=q, k=k, v=v, **kwargs)
        # Without states, the second result is the attention matrix (None unless requested).
        return o, (second if states and output_final_state else None)

    return fn


def _recipe(
    *,
    form: Form,
    chunk_size: int,
    dots_on_path: int,
    decay_scan: DecayScan,
    low_casts: int,
    division: Division = "full",
    interpreted: bool,
) -> Callable[[torch.dtype], PrecisionRecipe]:
    """Return the recipe, as a function of the input dtype, of one FLA kernel."""

    def recipe(dtype: torch.dtype) -> PrecisionRecipe:
        name = dtype_name(dtype)
        low = name in ("float16", "bfloat16")
        # Compiled, tl.dot takes fp32 operands as tf32 and accumulates on tensor cores; 16-bit
        # operands are exact products. The interpreter computes fp32 dots in IEEE fp32.
        compiled_dots = dots_on_path > 0 and not interpreted
        return PrecisionRecipe(
            form=form,
            chunk_size=chunk_size,
            accumulation="mma" if compiled_dots else "ieee",
            dot_precision="tf32" if compiled_dots and name == "float32" else "ieee",
            dots_on_path=dots_on_path,
            intermediate_dtype="input" if low and low_casts else None,
            casts_on_path=low_casts if low else 0,
            decay_scan=decay_scan,
            division=division,
            # The normalizer (and its + eps) is computed by torch in the input dtype.
            eps_dtype=name if low else "float32",
        )

    return recipe


def _load() -> dict[str, Any]:
    """Import FLA's op packages, under the interpreter when there is no CUDA."""
    if importlib.util.find_spec("fla") is None:
        raise ImportError(
            f"The FLA adapters need flash-linear-attention: pip install {FLA_REQUIREMENT!r}."
        )
    from linattn_verify import interpreter

    def interpreting() -> bool:
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

    was_interpreting = interpreting()
    interpreter.enable()
    if interpreting() and not was_interpreting and "fla" in sys.modules:
        # Triton picks compiled or interpreted mode when a kernel is decorated: FLA's kernels
        # were decorated in compiled mode and cannot launch on a machine without CUDA.
        raise ImportError(
            "FLA was imported before the Triton interpreter was selected, so its kernels cannot "
            "run without CUDA. Call linattn_verify.interpreter.enable() (or set "
            "TRITON_INTERPRET=1) before importing fla, in a fresh process."
        )
    with warnings.catch_warnings():
        # Importing FLA probes for a GPU driver and pulls in torch.compile machinery, both of
        # which warn; nothing of it concerns the kernels.
        warnings.simplefilter("ignore")
        modules = {
            name: importlib.import_module(f"fla.ops.{name}")
            for name in ("linear_attn", "simple_gla", "retention", "gla", "lightning_attn")
        }
    return {"interpreted": interpreting(), **modules}


def fla_kernels() -> list[Kernel]:
    """Return FLA's linear-attention kernels, one `Kernel` per function and semantic variant.

    Imports FLA on first use: without CUDA it first selects the Triton interpreter and applies
    `linattn_verify.interpreter`'s patches, which must happen before FLA is imported. The
    recipes describe compiled (tf32, tensor-core) or interpreted (IEEE) arithmetic, whichever
    is in effect when this is called. See the module docstring for the table of kernels.

    Returns:
        The 22 kernels: linear_attn, simple_gla, retention, gla, lightning_attn, and based and
        rebased (`linattn_verify.linear_attn.adapters.fla_lifted`).

    Raises:
        ImportError: when FLA (``fla-core==0.6.0``) is not installed, or was imported before the
            interpreter was selected on a machine without CUDA.
        InterpreterPatchError: (a `RuntimeError`) when the interpreter's patches do not apply
            to the installed Triton.
    """
    fla = _load()
    interpreted: bool = fla["interpreted"]
    linear, gla, retention = fla["linear_attn"], fla["simple_gla"], fla["retention"]
    kernels: list[Kernel] = []

    def add(
        name: str,
        fn: KernelFn,
        capabilities: Capabilities,
        *,
        form: Form,
        casts: str,
        division: Division = "full",
        implied_decay: Callable[[Problem], torch.Tensor] | None = None,
    ) -> None:
        parallel = form == "parallel"
        recipe = _recipe(
            form=form,
            chunk_size=PARALLEL_BLOCK if parallel else CHUNK_SIZE,
            dots_on_path=0 if form == "recurrent" else 2,
            # Chunked and parallel kernels exponentiate differences of chunk-local cumsums
            # (retention's chunked kernels a product gamma * position, no less accurate); the
            # recurrent ones multiply the state by exp(g_t) every step.
            decay_scan="per_step" if form == "recurrent" else "chunk_local",
            low_casts=_LOW_CASTS[casts],
            division=division,
            interpreted=interpreted,
        )
        if name.endswith((".chunk", ".chunk+normalize")):
            capabilities = replace(capabilities, even_head_dims=("float16", "bfloat16"))
        kernels.append(
            Kernel(
                name=f"fla/{name}",
                fn=fn,
                capabilities=capabilities,
                recipe=recipe,
                form=form,
                implied_decay=implied_decay,
            )
        )

    plain = Capabilities(varlen=True, **PROMISES)
    # `normalize_with_z_state` divides with torch, unguarded: where its computed denominator is
    # 0 (only in fp16 for an exact 0, where eps = 1e-10 rounds to 0), IEEE division gives NaN
    # for 0/0 and ±inf for x/0. That is the "ieee" convention (see the module docstring).
    # z_T comes back in the input dtype (`chunk_global_cumsum(..., output_dtype=k.dtype)`).
    normalized = Capabilities(
        normalize=(True,),
        eps=FLA_EPS,
        varlen=True,
        zero_denominator="ieee",
        final_state_dtype="input",
        **PROMISES,
    )
    forms: dict[str, Form] = {"chunk": "chunk", "fused_chunk": "chunk"}
    for variant in ("chunk", "fused_chunk", "fused_recurrent"):
        fla_fn = getattr(linear, f"{variant}_linear_attn")
        form = forms.get(variant, "recurrent")
        add(
            f"linear_attn.{variant}",
            _linear_attn(fla_fn, normalize=False),
            plain,
            form=form,
            casts=variant,
        )
        add(
            f"linear_attn.{variant}+normalize",
            _linear_attn(fla_fn, normalize=True),
            normalized,
            form=form,
            casts="normalize",
            # torch divides: IEEE round to nearest, on a GPU too.
            division="rn",
        )

    gated = Capabilities(decay=True, varlen=True, **PROMISES)
    stateless = replace(gated, initial_state=False, final_state=False)
    gla_variants: list[tuple[str, Form, Capabilities, str]] = [
        ("chunk", "chunk", gated, "chunk+decay"),
        ("fused_recurrent", "recurrent", gated, "fused_recurrent"),
        ("parallel", "parallel", stateless, "parallel"),
    ]
    for variant, form, cap, casts in gla_variants:
        add(
            f"simple_gla.{variant}",
            _gated(getattr(gla, f"{variant}_simple_gla"), states=cap.final_state, takes_g=True),
            cap,
            form=form,
            casts=casts,
        )

    # Retention's decay is internal: the kernels take no g (decay=False) and declare it instead.
    fixed = Capabilities(varlen=True, **PROMISES)
    fixed_stateless = replace(fixed, initial_state=False, final_state=False)
    retention_variants: list[tuple[str, Form, Capabilities, str]] = [
        ("chunk", "chunk", fixed, "chunk+decay"),
        ("fused_recurrent", "recurrent", fixed, "fused_recurrent"),
        ("parallel", "parallel", fixed_stateless, "parallel"),
    ]
    for variant, form, cap, casts in retention_variants:
        add(
            f"retention.{variant}",
            _gated(
                getattr(retention, f"{variant}_retention"), states=cap.final_state, takes_g=False
            ),
            cap,
            form=form,
            casts=casts,
            implied_decay=retention_log_decay,
        )

    vector_gated = Capabilities(decay=True, gates=("vector",), varlen=True, **PROMISES)
    vector_variants: list[tuple[str, Form, Capabilities, str, str]] = [
        ("chunk", "chunk", replace(vector_gated, decay_required=True), "g", "chunk+vector"),
        ("fused_recurrent", "recurrent", vector_gated, "gk", "fused_recurrent"),
    ]
    for variant, form, cap, gate_name, casts in vector_variants:
        fla_fn = getattr(fla["gla"], f"{variant}_gla")
        add(f"gla.{variant}", _gla(fla_fn, gate_name=gate_name), cap, form=form, casts=casts)

    layer, layers = LIGHTNING_LAYER
    lightning_variants: list[tuple[str, Form, str]] = [
        ("chunk", "chunk", "chunk+decay"),
        ("fused_recurrent", "recurrent", "fused_recurrent"),
    ]
    for variant, form, casts in lightning_variants:
        fla_fn = getattr(fla["lightning_attn"], f"{variant}_lightning_attn")
        add(
            f"lightning_attn.{variant}",
            _gated(
                functools.partial(fla_fn, layer_idx=layer, num_layers=layers),
                states=True,
                takes_g=False,
            ),
            fixed,
            form=form,
            casts=casts,
            implied_decay=lightning_log_decay,
        )
    # Based and ReBased: lifted feature maps, in their own module.
    from linattn_verify.linear_attn.adapters.fla_lifted import lifted_kernels

    kernels += lifted_kernels(interpreted=interpreted)
    return kernels


__all__ = [
    "FLA_EPS",
    "LIGHTNING_LAYER",
    "PROMISES",
    "fla_kernels",
    "lightning_log_decay",
    "retention_log_decay",
]
