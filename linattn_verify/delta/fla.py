# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""flash-linear-attention's (``fla-core==0.6.0``) delta-rule kernels as `DeltaKernel` objects.

`fla_delta_kernels` returns the six FLA functions of the family, in its calling convention
(`linattn_verify.delta.kernel`):

==================================  =========  ====================  ======  ========  ========
name                                form       gates                 dtypes  backward  C
==================================  =========  ====================  ======  ========  ========
``fla/delta_rule.chunk``            chunk      none                  16-bit  yes       16/32/64
``fla/delta_rule.fused_recurrent``  recurrent  none                  all     yes       -
``fla/gated_delta_rule.chunk``      chunk      scalar                all     yes       16/32/64
``fla/gated_delta_rule.fused_...``  recurrent  none, scalar, vector  all     no        -
``fla/kda.chunk``                   chunk      vector                all     yes       32/64
``fla/kda.fused_recurrent``         recurrent  vector                all     no        -
==================================  =========  ====================  ======  ========  ========

Every kernel takes ``use_qk_l2norm_in_kernel`` both ways, beta in [0, 2) as given (we never set
``use_beta_sigmoid_in_kernel``, so ``allow_neg_eigval`` plays no part; the update uses beta raw),
``cu_seqlens`` (empty sequences return S_0), S_0 and S_T (fp32 ``[N, H, K, V]``), and K, V from 1
to 256 (the fused recurrent ones go further; 256 is declared). Read off the 0.6.0 sources
(paths under ``fla/``):

* Gates. ``chunk_delta_rule`` takes none. ``chunk_gated_delta_rule`` needs g ``[B, T, H]``: it
  runs ``chunk_local_cumsum(g)`` (``ops/gated_delta_rule/chunk.py:63``), which fails on None,
  and it does not check g's shape: a ``[B, T, H, K]`` g returns garbage, so the adapter refuses
  it. ``fused_recurrent_gated_delta_rule`` takes g=None, g ``[B, T, H]`` as ``g=`` and a key
  gate ``[B, T, H, K]`` as ``gk=`` (``fused_recurrent.py:131-145``; positional order q, k, v, g,
  gk, gv, beta: the adapter passes keywords). ``chunk_kda`` asserts g ``[B, T, H, K]``
  (``ops/kda/chunk.py:494``); ``fused_recurrent_kda`` reads K gate entries per token
  (``kda/fused_recurrent.py:113,160``), so a scalar gate reads past its end and g=None fails:
  vector only.
* Dtypes and limits. ``chunk_delta_rule`` asserts q is not fp32 (``ops/delta_rule/chunk.py:303``).
  The chunk kernels assert K <= 256 (``ops/common/chunk_delta_h.py:716``, ``ops/kda/chunk.py:489``);
  every block is padded to >= 16 and masked, and K, V in 1 ... 256 (odd, unequal too) ran
  correctly under the interpreter, so ``min_head_dim=1``. ``chunk_size`` is 16, 32 or 64
  (``delta_rule/chunk.py:311``, ``gated_delta_rule/chunk.py:539``), 32 or 64 for KDA
  (``kda/chunk.py:475``).
* ``chunk_kda`` asserts an fp32 initial state (``kda/chunk.py:466``): the adapter passes
  ``initial_state.float()``, exact for 16-bit states (the gradient is rounded back to the
  input dtype by autograd, as every FLA kernel's fp32 dh0 is).
* ``fused_recurrent_delta_rule`` asserts scale > 0 (``ops/delta_rule/fused_recurrent.py:527``).
  o is linear in the scale and q·(-s) rounds to -(q·s), so for s <= 0 the adapter calls it with
  |s| (1 for s = 0) and multiplies o by s/|s| (-1 or 0): exact, S_T untouched.
* Backward. ``fused_recurrent_gated_delta_rule``'s backward raises NotImplementedError
  (``gated_delta_rule/fused_recurrent.py:302``); ``fused_recurrent_kda`` is no autograd Function
  (``kda/fused_recurrent.py:337-490``): its o has no grad_fn. Both declare ``backward=False``.
* No atomics on any path: ``deterministic=True``. Causality is bit-exact (masked weights are
  exact zeros, ``solve_tril``'s block merge keeps the inverse lower triangular) except in
  ``chunk_kda``, whose gates are referenced to the chunk: past outputs move by rounding when later
  gates of the chunk change (FLA issue #1240), so it does not declare ``causal_exact``.

Backend dispatch (``backends.py``). Functions decorated ``@dispatch`` (``chunk_gated_delta_rule``
``gated_delta_rule/chunk.py:396``, ``chunk_kda`` ``kda/chunk.py:215``, ``fused_recurrent_kda_fwd``,
the common h / o / dqkwg / solve_tril / cumsum / l2norm helpers) try registered backends first.
On a CUDA machine that would route our calls elsewhere: FlashQLA (``flash_qla`` installed,
SM90/100/120, 16-bit, K = V = 128) replaces ``chunk_gated_delta_rule``; TileLang (``tilelang`` and
nvcc) replaces KDA's backward ``chunk_kda_bwd_wy_dqkg_fused`` on any CUDA GPU and the gated
backward's ``chunk_bwd_dqkwg`` on Hopper; ``FLA_INTRACARD_CP=1`` splits ``chunk_gated_delta_rule_
fwd_h`` under inference mode with varlen; Triton-Ascend takes over on NPUs. FlashKDA asks for
``use_gate_in_kernel`` and never matches. The switch is ``FLA_DISABLE_BACKEND_DISPATCH=1``, read
once when ``fla.backends`` is imported (``backends.py:27``): ``dispatch`` then returns the
decorated function itself (``:165,258``) and ``register`` registers nothing (``:232``). `_load` sets
it before importing FLA. If FLA was imported earlier without it (the linear-attention adapters
import it too), each registered backend's own switch (``FLA_FLASH_QLA``, ``FLA_FLASH_KDA``,
``FLA_TILELANG``, ``FLA_INTRACARD_CP``, ``FLA_ATTNRES_GLUON``: its ``env_var``, read per call,
``backends.py:76-82``) is set to ``"0"``; loading fails if any backend is still available and
enabled (`active_backends`; Triton-Ascend on an NPU has no switch).
Either way the setting is process-wide: the linear-attention adapters get FLA's Triton path too.

Precision (`DeltaRecipe`, per input dtype; "input" = stored in the input dtype, which rounds
nothing for fp32):

* Chunk forms, C = 64: the triangular inverse T is stored in the input dtype (``delta_rule/
  wy_fast.py:223-228`` ``solve_tril(output_dtype=k.dtype)``; ``gated_delta_rule/chunk_fwd.py:385``;
  ``kda/chunk_intra.py:865``); W, U (``delta_rule/wy_fast.py:258-259``, ``gated_delta_rule/
  wy_fast.py:273-274``, ``kda/wy_fast.py:293-294``), the corrected values ``v_new``
  (``common/chunk_delta_h.py:725``) and the L2-normalised q, k (``modules/norm/l2norm.py:117``)
  too; the per-chunk state h is ``k.new_empty`` (``chunk_delta_h.py:722``), and the state is
  also rounded to the input dtype before W S (``chunk_delta_h.py:216``).
* ``casts_on_path`` (16-bit): delta_rule 2: beta·v and beta·k cast before their dot with T
  (``delta_rule/wy_fast.py:80,90``), then the intra-chunk scores cast to v's dtype before their
  dot (``common/chunk_o.py:153``). gated_delta_rule 2: beta·v, beta·k·e^G (``gated_delta_rule/
  wy_fast.py:88,105``), the decayed corrected values cast before the state update
  (``chunk_delta_h.py:250,288``), the scores (``chunk_o.py:153``). kda 3: beta·v, beta·k·e^G
  (``kda/wy_fast.py:102,131``), the decayed keys stored (``kda/wy_fast.py:127-129``), q·e^G
  cast (``gla/chunk.py:438``), the scores stored (``kda/chunk_intra.py:863``). A term of o
  meets at most that many of them.
* Dots. Under the interpreter every dot is IEEE fp32 (it ignores ``input_precision``). Compiled,
  fp32 operands are tf32 where FLA leaves Triton's default or asks for it, which is wherever
  ``fla.utils.IS_TF32_SUPPORTED`` (NVIDIA, sm >= 80; older cards get
  ``TRITON_F32_DEFAULT=ieee``): gated_delta_rule's fused K K^T / inverse kernel merges its
  fp32 blocks in tf32 (``gated_delta_rule/chunk_fwd.py:20-23``) and KDA's intra-chunk dots take
  fp32 gated q, k (``kda/chunk_intra.py:150-170``, ``:22-25``), for 16-bit inputs too, so both
  declare tf32 for every dtype. delta_rule's inverse uses ``FLA_TRIL_PRECISION`` (default ieee,
  ``utils/solve_tril.py:19-28``) and its W, U dots ``allow_tf32=False``; all its other dots take
  16-bit operands: tf32 only where that variable selects it. Accumulation is ``"mma"`` compiled.
* Recurrent forms: state, q, k, v and beta in fp32 registers, summed with ``tl.sum``; o is stored
  in the input dtype, S_T in fp32. Only ``fused_recurrent_delta_rule`` normalises q, k with
  ``l2norm_fwd`` and stores them in the input dtype (``delta_rule/fused_recurrent.py:399-400``);
  the gated and KDA ones normalise in registers (``gated_delta_rule/fused_recurrent.py:119-120``,
  ``kda/fused_recurrent.py:157-158``).

``l2norm_fwd`` computes x · (1 / sqrt(Σx² + eps)) (``l2norm.py:80-81``): one rounding more than
a division; the fused recurrent kernels divide. Not modelled: GVA heads (HV > H), per-V beta.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from linattn_verify.core.fla_release import CHUNK_SIZE, FLA_REQUIREMENT
from linattn_verify.delta.kernel import DeltaCapabilities, DeltaGate, DeltaKernel, DeltaRecipe
from linattn_verify.errors import InvalidArgument
from linattn_verify.typing import dtype_name

DISPATCH_SWITCH = "FLA_DISABLE_BACKEND_DISPATCH"
"""FLA's environment variable that bypasses every backend dispatch (read at import)."""

DeltaFn = Callable[..., tuple[torch.Tensor, Any]]

_LOW_CASTS = {"delta_rule": 2, "gated_delta_rule": 2, "kda": 3}

_PROMISES: dict[str, Any] = {"deterministic": True, "causal_exact": True}
"""The exactness FLA's delta-rule kernels keep (the module docstring), but for ``chunk_kda``."""
"""Roundings to the input dtype a term of o meets beyond those the recipe names (16-bit)."""


def _gate_of(g: torch.Tensor | None) -> DeltaGate:
    if g is None:
        return "none"
    return "vector" if g.ndim == 4 else "scalar"


def _check_gate(name: str, g: torch.Tensor | None, gates: tuple[DeltaGate, ...]) -> None:
    gate = _gate_of(g)
    if gate not in gates:
        shape = None if g is None else tuple(g.shape)
        raise InvalidArgument(
            f"Got a {gate!r} gate (g of shape {shape}), but FLA's {name} takes only {gates}."
        )


def _chunk_options(name: str, sizes: tuple[int, ...], options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - {"chunk_size"})
    if unknown or (options and not sizes):
        takes = "only chunk_size" if sizes else "none"
        raise InvalidArgument(f"Got options {sorted(options)}, but FLA's {name} takes {takes}.")
    size = options.get("chunk_size", CHUNK_SIZE)
    if isinstance(size, bool) or size not in sizes:
        raise InvalidArgument(f"Got chunk_size={size!r}, but FLA's {name} takes one of {sizes}.")
    return {"chunk_size": size}


def _delta_rule(
    fla_fn: DeltaFn, *, name: str, chunk_sizes: tuple[int, ...] = (), positive_scale: bool = False
) -> DeltaFn:
    """Wrap ``chunk_delta_rule`` or ``fused_recurrent_delta_rule`` (no gate argument)."""

    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        *,
        scale: float | None = None,
        initial_state: torch.Tensor | None = None,
        output_final_state: bool = False,
        cu_seqlens: torch.Tensor | None = None,
        use_qk_l2norm_in_kernel: bool = False,
        **options: Any,
    ) -> tuple[torch.Tensor, Any]:
        extra = _chunk_options(name, chunk_sizes, options) if chunk_sizes or options else {}
        sign = 1.0
        if positive_scale and scale is not None and not scale > 0:
            # fused_recurrent_delta_rule asserts scale > 0; o is linear in s and q * (-s)
            # rounds to -(q * s), so |s| and a sign (or 0) give FLA's o for s exactly.
            sign, scale = (-1.0, -scale) if scale < 0 else (0.0, 1.0)
        o, final = fla_fn(
            q=q,
            k=k,
            v=v,
            beta=beta,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=cu_seqlens,
            **extra,
        )
        return (o if sign == 1.0 else o * sign), final

    return fn


def _gated(
    fla_fn: DeltaFn,
    *,
    name: str,
    gates: tuple[DeltaGate, ...],
    gate_keywords: dict[DeltaGate, str],
    chunk_sizes: tuple[int, ...] = (),
    fp32_state: bool = False,
) -> DeltaFn:
    """Wrap a gated FLA function whose gate of each shape goes to the keyword named for it."""

    def fn(
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
        **options: Any,
    ) -> tuple[torch.Tensor, Any]:
        _check_gate(name, g, gates)
        extra = _chunk_options(name, chunk_sizes, options) if chunk_sizes or options else {}
        keyword = gate_keywords.get(_gate_of(g))
        if keyword is not None:
            extra[keyword] = g
        if fp32_state and initial_state is not None:
            # chunk_kda asserts an fp32 initial state; the upcast is exact.
            initial_state = initial_state.float()
        return fla_fn(
            q=q,
            k=k,
            v=v,
            beta=beta,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=cu_seqlens,
            **extra,
        )

    return fn


def _chunk_recipe(
    *, compiled: bool, tf32: bool, casts: int
) -> Callable[[torch.dtype], DeltaRecipe]:
    """Return the recipe, per input dtype, of an FLA chunk kernel (see the module docstring)."""

    def recipe(dtype: torch.dtype) -> DeltaRecipe:
        low = dtype_name(dtype) in ("float16", "bfloat16")
        return DeltaRecipe(
            form="chunk",
            chunk_size=CHUNK_SIZE,
            accumulation="mma" if compiled else "ieee",
            tf32=tf32,
            inverse_dtype="input",
            intermediate_dtype="input",
            state_dtype="input",
            casts_on_path=casts if low else 0,
        )

    return recipe


def _recurrent_recipe(*, l2norm_stored: bool) -> DeltaRecipe:
    # fused_recurrent_delta_rule's forward also stores u = v - S'^T k in the input dtype
    # (``fused_recurrent.py:86``, ``u = torch.empty_like(v)``); its backward recomputes the
    # states from u and stores the dk, dv partials between its two loops (``:188-189``,
    # reloaded at ``:235-236``): the same stored intermediates (`stored_corrections`).
    return DeltaRecipe(
        form="recurrent",
        intermediate_dtype="input" if l2norm_stored else None,
        stored_corrections=l2norm_stored,
    )


FLA_DELTA_KERNEL_NAMES: tuple[str, ...] = tuple(
    f"fla/{op}.{form}"
    for op in ("delta_rule", "gated_delta_rule", "kda")
    for form in ("chunk", "fused_recurrent")
)
"""The names `fla_delta_kernels` returns, in its order."""


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def active_backends() -> list[str]:
    """Return the FLA backends that could take a dispatched call over, as ``"op:backend"``.

    Empty when FLA is not imported or was imported with `DISPATCH_SWITCH` set. Otherwise every
    registered backend that is available on this machine and enabled by its environment switch.

    Returns:
        Sorted ``"<operation>:<backend_type>"`` names; empty where FLA's own Triton path runs.
    """
    backends = sys.modules.get("fla.backends")
    if backends is None or backends._DISPATCH_DISABLED:
        return []
    registries = [*backends._operation_registries.values(), *backends._function_registries.values()]
    return sorted(
        {
            f"{registry.operation_name}:{backend.backend_type}"
            for registry in registries
            for backend in registry._backends.values()
            if backend.is_available() and backend.is_enabled()
        }
    )


def _switch_off_dispatch() -> None:
    """Keep every dispatched FLA call on FLA's Triton path (see the module docstring)."""
    backends = importlib.import_module("fla.backends")
    if backends._DISPATCH_DISABLED:
        return
    # FLA was imported before `_load` could set the switch: turn each backend off by its own
    # variable, which `BaseBackend.is_enabled` reads on every call.
    registries = [*backends._operation_registries.values(), *backends._function_registries.values()]
    for registry in registries:
        for backend in registry._backends.values():
            if backend.env_var is not None:
                os.environ[backend.env_var] = "0"
    active = active_backends()
    if active:
        raise ImportError(
            f"FLA backends {active} would replace FLA's Triton kernels and cannot be switched off "
            f"now: set {DISPATCH_SWITCH}=1 before importing fla, in a fresh process."
        )


def _load() -> dict[str, Any]:
    """Import FLA's delta-rule ops, under the interpreter when there is no CUDA, no dispatch."""
    if importlib.util.find_spec("fla") is None:
        raise ImportError(
            f"The FLA adapters need flash-linear-attention: pip install {FLA_REQUIREMENT!r}."
        )
    from linattn_verify import interpreter

    was_interpreting = _interpreting()
    interpreter.enable()
    if _interpreting() and not was_interpreting and "fla" in sys.modules:
        raise ImportError(
            "FLA was imported before the Triton interpreter was selected, so its kernels cannot "
            "run without CUDA. Call linattn_verify.interpreter.enable() (or set "
            "TRITON_INTERPRET=1) before importing fla, in a fresh process."
        )
    if "fla.backends" not in sys.modules:
        os.environ[DISPATCH_SWITCH] = "1"
    with warnings.catch_warnings():
        # Importing FLA probes for a GPU driver and pulls in torch.compile machinery, both of
        # which warn; nothing of it concerns the kernels.
        warnings.simplefilter("ignore")
        modules = {
            op: importlib.import_module(f"fla.ops.{op}")
            for op in ("delta_rule", "gated_delta_rule", "kda")
        }
        solve_tril = importlib.import_module("fla.ops.utils.solve_tril")
        hardware = importlib.import_module("fla.utils")
    _switch_off_dispatch()
    compiled = not _interpreting()
    # Compiled on NVIDIA sm >= 80, fp32 dot operands are tf32 where FLA leaves the default.
    tf32 = compiled and bool(hardware.IS_TF32_SUPPORTED)
    tril_tf32 = tf32 and any(p != "ieee" for p in solve_tril.DOT_PRECISION_AUTOTUNE_LIST)
    return {"compiled": compiled, "tf32": tf32, "tril_tf32": tril_tf32, **modules}


def fla_delta_kernels() -> list[DeltaKernel]:
    """Return FLA's six delta-rule kernels as `DeltaKernel` objects (`FLA_DELTA_KERNEL_NAMES`).

    Imports FLA on first use: without CUDA it first selects the Triton interpreter and applies
    `linattn_verify.interpreter`'s patches, which must happen before FLA is imported; and it
    keeps FLA's backend dispatch off (module docstring). The recipes describe compiled (tf32,
    tensor-core) or interpreted (IEEE) arithmetic, whichever is in effect when this is called.

    Returns:
        The kernels: delta_rule, gated_delta_rule and kda, each ``chunk`` and
        ``fused_recurrent``.

    Raises:
        ImportError: when FLA (``fla-core==0.6.0``) is not installed, was imported before the
            interpreter was selected on a machine without CUDA, or runs a backend other than
            its Triton kernels that cannot be switched off.
        InterpreterPatchError: (a `RuntimeError`) when the interpreter's patches do not apply
            to the installed Triton.
    """
    fla = _load()
    compiled: bool = fla["compiled"]
    dr, gdr, kda = fla["delta_rule"], fla["gated_delta_rule"], fla["kda"]
    sizes = (16, 32, 64)

    def chunk_recipe(op: str, tf32: bool) -> Callable[[torch.dtype], DeltaRecipe]:
        return _chunk_recipe(compiled=compiled, tf32=tf32, casts=_LOW_CASTS[op])

    return [
        DeltaKernel(
            name="fla/delta_rule.chunk",
            fn=_delta_rule(dr.chunk_delta_rule, name="chunk_delta_rule", chunk_sizes=sizes),
            capabilities=DeltaCapabilities(
                dtypes=("float16", "bfloat16"), chunk_sizes=sizes, **_PROMISES
            ),
            recipe=chunk_recipe("delta_rule", fla["tril_tf32"]),
        ),
        DeltaKernel(
            name="fla/delta_rule.fused_recurrent",
            fn=_delta_rule(
                dr.fused_recurrent_delta_rule,
                name="fused_recurrent_delta_rule",
                positive_scale=True,
            ),
            capabilities=DeltaCapabilities(**_PROMISES),
            recipe=_recurrent_recipe(l2norm_stored=True),
        ),
        DeltaKernel(
            name="fla/gated_delta_rule.chunk",
            fn=_gated(
                gdr.chunk_gated_delta_rule,
                name="chunk_gated_delta_rule",
                gates=("scalar",),
                gate_keywords={"scalar": "g"},
                chunk_sizes=sizes,
            ),
            capabilities=DeltaCapabilities(gates=("scalar",), chunk_sizes=sizes, **_PROMISES),
            recipe=chunk_recipe("gated_delta_rule", fla["tf32"]),
        ),
        DeltaKernel(
            name="fla/gated_delta_rule.fused_recurrent",
            fn=_gated(
                gdr.fused_recurrent_gated_delta_rule,
                name="fused_recurrent_gated_delta_rule",
                gates=("none", "scalar", "vector"),
                gate_keywords={"scalar": "g", "vector": "gk"},
            ),
            capabilities=DeltaCapabilities(
                gates=("none", "scalar", "vector"), backward=False, **_PROMISES
            ),
            recipe=_recurrent_recipe(l2norm_stored=False),
        ),
        DeltaKernel(
            name="fla/kda.chunk",
            fn=_gated(
                kda.chunk_kda,
                name="chunk_kda",
                gates=("vector",),
                gate_keywords={"vector": "g"},
                chunk_sizes=(32, 64),
                fp32_state=True,
            ),
            # Causal only within rounding (FLA issue #1240): its gates are referenced to the
            # chunk, so past outputs move when later gates of the chunk change.
            capabilities=DeltaCapabilities(
                gates=("vector",), chunk_sizes=(32, 64), deterministic=True
            ),
            recipe=chunk_recipe("kda", fla["tf32"]),
        ),
        DeltaKernel(
            name="fla/kda.fused_recurrent",
            fn=_gated(
                kda.fused_recurrent_kda,
                name="fused_recurrent_kda",
                gates=("vector",),
                gate_keywords={"vector": "g"},
            ),
            capabilities=DeltaCapabilities(gates=("vector",), backward=False, **_PROMISES),
            recipe=_recurrent_recipe(l2norm_stored=False),
        ),
    ]


def fla_delta_kernel(name: str) -> DeltaKernel:
    """Return the FLA delta-rule kernel called ``name`` (one of `FLA_DELTA_KERNEL_NAMES`).

    Args:
        name: E.g. ``"fla/gated_delta_rule.chunk"``.

    Returns:
        That kernel, as `fla_delta_kernels` builds it.

    Raises:
        InvalidArgument: if ``name`` is not one of `FLA_DELTA_KERNEL_NAMES` (checked before FLA
            is imported).
        ImportError: as `fla_delta_kernels`.
    """
    if name not in FLA_DELTA_KERNEL_NAMES:
        raise InvalidArgument(
            f"Got name={name!r}, but FLA's delta-rule kernels are {list(FLA_DELTA_KERNEL_NAMES)}."
        )
    return next(k for k in fla_delta_kernels() if k.name == name)


__all__ = [
    "DISPATCH_SWITCH",
    "FLA_DELTA_KERNEL_NAMES",
    "active_backends",
    "fla_delta_kernel",
    "fla_delta_kernels",
]
