# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A kernel under test: a callable in the calling convention plus what it declares about itself.

The calling convention (docs/design.md §4, flash-linear-attention's):

    o, final_state = fn(q, k, v, g=None, *, scale=None, initial_state=None,
                        output_final_state=False, cu_seqlens=None)

What the signature cannot say a kernel declares in `Capabilities`: whether its output is
normalized (and with which eps), which feature map it applies internally, decay, backward,
varlen, dtypes, head-dim limit, determinism, and its precision recipe. Our own kernels also take
``normalize=``, ``eps=`` and ``feature_map=`` keywords (``configurable=True``), so one registered
kernel covers every semantic variant.

A caller may leave out any argument at its default
(`linattn_verify.linear_attn.semantics.OMITTABLE`), so `Kernel.call` passes every argument
explicitly except those the problem asks to omit (`Problem.omit`): the search exercises both calling
styles, and with them the kernel's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, get_args

import torch

from linattn_verify.core.bound import ZERO_DENOMINATORS, ZeroDenominator
from linattn_verify.core.convention import (
    AxisOrder,
    StateOrder,
    check_layouts,
    result_out,
    state_in,
    tokens_in,
)
from linattn_verify.core.kernel import KernelBase
from linattn_verify.core.sizes import FIXED_SCALES, fixed_scales
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.signature import call_with, keywords_for
from linattn_verify.typing import (
    DTYPE_NAMES,
    FINAL_STATE_DTYPES,
    GATES,
    KEEPS_K,
    KERNEL_DTYPES,
    FeatureMap,
    FinalStateDtype,
    Form,
    Gate,
    dtype_name,
)


@dataclass(frozen=True)
class Capabilities:
    """What a kernel supports, as far as its signature cannot tell.

    Attributes:
        normalize: The output semantics it can produce: ``(False,)``, ``(True,)`` or both
            (both only when ``configurable``). Default: `(False,)`.
        eps: The eps of its normalizer (used when normalized). Default: `0.0`.
        feature_maps: Feature maps it applies internally; ``("identity",)`` means none (the
            harness feeds features directly). A kernel taking ``"favor+"`` receives the
            projection as ``feature_weights=W`` ``[m, K]``. Default: `("identity",)`.
        max_feature_dim: Largest feature dimension F of a lifted map (the rows of its state),
            or `None` for no limit beyond ``max_head_dim`` on K. Default: `None`.
        configurable: Accepts ``normalize=``, ``eps=``, ``feature_map=`` keywords. Default: `False`.
        decay: Accepts a data-dependent log decay ``g``. Default: `False`.
        gates: The shapes of ``g`` it takes where it declares ``decay``: ``"scalar"``
            (``[B, T, H]``), ``"vector"`` (``[B, T, H, K]``, a gate per key dimension, as GLA's
            kernels) or both. Default: `("scalar",)`.
        decay_required: Takes no ``g=None`` (FLA's ``chunk_gla`` asserts a gate): problems
            without decay are outside its domain, and the search draws g = 0 (the ``"zero"``
            family) for that case instead. Default: `False`.
        backward: Differentiable in q, k, v (and g, initial state). Default: `True`.
        varlen: Accepts ``cu_seqlens``. Default: `False`.
        initial_state: Accepts ``initial_state``. Default: `True`.
        final_state: Can return the final state. Default: `True`.
        dtypes: Input dtypes it takes. Default: `("float32", "float16", "bfloat16")`.
        max_head_dim: Largest K and V. Default: `256`.
        min_head_dim: Smallest K and V. Default: `1`.
        even_head_dims: Dtypes in which K and V must be even (FLA's 16-bit chunked backward
            asserts it, because Triton miscompiles odd 16-bit tails). Default: `()`.
        deterministic: Promises bit-identical reruns: reruns are then judged bit for bit, else
            within B + B of each other. Default: `False` (exactness is declared, never imposed:
            docs/design.md, "Exact properties").
        causal_exact: Promises bit-exact causality: outputs (and gradients) at positions <= t
            are bitwise unchanged when only inputs after t change. Otherwise they may move by
            the rounding of the tokens its form touches (within the pairwise bound), and the
            chunk form's bounds charge each output the rounding of its whole chunk.
            Default: `False`.
        layout_exact: Promises bit-identical results whatever the memory layout of its inputs
            and cotangents (strided, sliced, expanded views; with ``deterministic``); otherwise
            layouts are judged within B + B. Default: `False`.
        scales: The only scales it takes, of ``"default"`` (K^-1/2) and ``"one"`` (1), or `()`
            for any scale (FLA's ``parallel_rebased`` takes K^-1/2 or 1: ``use_scale``).
            Default: `()`.
        takes_scale: Receives the scale as ``scale=``; a kernel that does not applies its one
            entry of ``scales`` itself (``check --scale fixed``: K^-1/2; ``--scale one``).
            Default: `True`.
        final_state_dtype: The dtype of the final state it returns: ``"float32"`` (float64 is
            accepted too) or ``"input"`` (rounded to the input dtype: FLA's normalized
            ``linear_attn`` returns z_T so); the bound charges that rounding. Default:
            `"float32"`.
        chunk_sizes: Chunk sizes it accepts through ``chunk_size=`` (empty: none). Default: `()`.
        zero_denominator: What its normalized output is where the exact denominator is exactly 0
            and the exact result undefined (docs/design.md §3): ``"zero"`` (0, our kernels'
            convention), ``"ieee"`` (the IEEE quotient: NaN for 0/0, ±inf for x/0) or ``"any"``
            (not judged there). Default: `"any"`: the harness imposes no choice of its own.
        layout: Its per-token tensors' layout, ``"token-major"`` (``[B, T, H, D]``) or
            ``"heads-first"`` (``[B, H, T, D]``; `linattn_verify.core.convention`). Default:
            `"token-major"`.
        state_layout: Its state's layout, ``"kv"`` (``[N, H, K, V]``) or ``"vk"``
            (``[N, H, V, K]``). Default: `"kv"`.
        seq_len_at_least_heads: Refuses T < H (some FLA releases take such a call for a
            heads-first one): no case with fewer tokens than heads is drawn. Default: `False`.
        query_feature_map: The map it applies to queries where that is not its keys' map
            (``feature_maps``): "efficient attention" takes softmax over each query's features
            and exp of each key. Both must keep K features
            (`linattn_verify.typing.KEEPS_K`). Default: `None` (one map).
        seq_len_multiple: T must be a multiple of it (linear-attention-transformer's causal
            attention asserts T % bucket_size == 0): no other T is drawn. Not with ``varlen``.
            Default: `1`.
        value_gate: Takes a value gate ``gv=`` ``[B, T, H, V]`` (FLA's ``fused_recurrent_gla``):
            S_t = diag(exp(g_t)) S_{t-1} diag(exp(gv_t)) + φ(k_t) v_t^T, on every case
            (`linattn_verify.linear_attn.value_gate`). Judged forward only, unnormalized: it
            needs ``backward=False`` and ``normalize=(False,)``. Default: `False`.
    """

    normalize: tuple[bool, ...] = (False,)
    eps: float = 0.0
    feature_maps: tuple[FeatureMap, ...] = ("identity",)
    max_feature_dim: int | None = None
    configurable: bool = False
    scales: tuple[str, ...] = ()
    decay: bool = False
    gates: tuple[Gate, ...] = ("scalar",)
    decay_required: bool = False
    backward: bool = True
    varlen: bool = False
    initial_state: bool = True
    final_state: bool = True
    dtypes: tuple[str, ...] = KERNEL_DTYPES
    max_head_dim: int = 256
    min_head_dim: int = 1
    even_head_dims: tuple[str, ...] = ()
    deterministic: bool = False
    causal_exact: bool = False
    layout_exact: bool = False
    takes_scale: bool = True
    final_state_dtype: FinalStateDtype = "float32"
    chunk_sizes: tuple[int, ...] = ()
    zero_denominator: ZeroDenominator = "any"
    layout: AxisOrder = "token-major"
    state_layout: StateOrder = "kv"
    seq_len_at_least_heads: bool = False
    query_feature_map: FeatureMap | None = None
    seq_len_multiple: int = 1
    value_gate: bool = False

    def __post_init__(self) -> None:
        check_layouts(self.layout, self.state_layout)
        if self.value_gate and (self.backward or self.normalize != (False,)):
            raise InvalidArgument(
                f"Got value_gate=True with backward={self.backward}, normalize="
                f"{self.normalize}: a value gate is judged forward only (no gradients yet) and "
                "unnormalized (the key sum z has no value columns): backward=False, "
                "normalize=(False,)."
            )
        multiple = self.seq_len_multiple
        if (
            isinstance(multiple, bool)
            or not isinstance(multiple, int)
            or multiple < 1
            or (multiple > 1 and self.varlen)
        ):
            raise InvalidArgument(
                f"Got seq_len_multiple={multiple!r} with varlen={self.varlen}: it must be an int "
                ">= 1, and 1 for a varlen kernel (packed sequences of any length)."
            )
        if self.query_feature_map is not None and (
            self.configurable
            or self.query_feature_map not in KEEPS_K
            or any(m not in KEEPS_K for m in self.feature_maps)
        ):
            raise InvalidArgument(
                f"Got query_feature_map={self.query_feature_map!r} with feature_maps="
                f"{self.feature_maps!r}, configurable={self.configurable}: a query map of its "
                f"own needs fixed maps that keep K features on both sides ({KEEPS_K})."
            )
        if not self.normalize or any(not isinstance(n, bool) for n in self.normalize):
            raise InvalidArgument(
                f"Expected normalize to be a non-empty tuple of bools but got {self.normalize!r}."
            )
        bad_maps = [m for m in self.feature_maps if m not in get_args(FeatureMap)]
        if not self.feature_maps or bad_maps:
            raise InvalidArgument(
                f"Got feature_maps={self.feature_maps!r}; each must be one of "
                f"{get_args(FeatureMap)}."
            )
        if any(s not in FIXED_SCALES for s in self.scales):
            raise InvalidArgument(
                f"Got scales={self.scales!r}; each must be one of {tuple(FIXED_SCALES)}, or () "
                "for any scale."
            )
        if not self.gates or any(g not in GATES for g in self.gates):
            raise InvalidArgument(f"Got gates={self.gates!r}; each must be one of {GATES}.")
        if self.decay_required and not self.decay:
            raise InvalidArgument("Got decay_required=True with decay=False.")
        bad_dtypes = [d for d in (*self.dtypes, *self.even_head_dims) if d not in DTYPE_NAMES]
        if not self.dtypes or bad_dtypes:
            raise InvalidArgument(
                f"Got dtypes={self.dtypes!r}, even_head_dims={self.even_head_dims!r}; each must "
                f"be one of {DTYPE_NAMES}."
            )
        if not self.configurable and (len(self.normalize) > 1 or len(self.feature_maps) > 1):
            raise InvalidArgument(
                "A kernel that takes no normalize=/feature_map= keywords has one fixed semantics: "
                f"got normalize={self.normalize!r}, feature_maps={self.feature_maps!r}."
            )
        if not (1 <= self.min_head_dim <= self.max_head_dim):
            raise InvalidArgument(
                f"Expected 1 <= min_head_dim <= max_head_dim but got {self.min_head_dim}, "
                f"{self.max_head_dim}."
            )
        if self.eps < 0:
            raise InvalidArgument(f"Got eps={self.eps!r}, but eps must be >= 0.")
        if not self.takes_scale and len(self.scales) != 1:
            raise InvalidArgument(
                f"Got takes_scale=False with scales={self.scales!r}: a kernel that takes no scale "
                "applies one fixed scale itself; name it (scales=('default',) or ('one',))."
            )
        if self.final_state_dtype not in FINAL_STATE_DTYPES:
            raise InvalidArgument(
                f"Got final_state_dtype={self.final_state_dtype!r}; it must be one of "
                f"{FINAL_STATE_DTYPES}."
            )
        if self.zero_denominator not in ZERO_DENOMINATORS:
            raise InvalidArgument(
                f"Got zero_denominator={self.zero_denominator!r}; it must be one of "
                f"{ZERO_DENOMINATORS}."
            )


Recipe = PrecisionRecipe | Callable[[torch.dtype], PrecisionRecipe]


@dataclass(frozen=True)
class Kernel(KernelBase[Capabilities, PrecisionRecipe]):
    """A linear-attention kernel under test.

    Besides `KernelBase`'s fields (name, fn, capabilities, recipe, options, source):

    Attributes:
        form: The algorithm, if known (selects rounding counts). Default: `None`.
        implied_decay: For kernels whose decay is fixed inside them (RetNet's per-head γ), the
            log decay they apply, as a function of the problem (``[B, T, H]``); the kernel is
            then called without ``g`` and the oracle uses this g. Default: `None`.
    """

    form: Form | None = None
    implied_decay: Callable[[Problem], torch.Tensor] | None = None

    family: ClassVar[str] = "linear_attn"

    def prepare(self, problem: Problem) -> Problem:
        """Return ``problem`` as this kernel computes it (with its implied decay, if any).

        Every property runs ``kernel.prepare(spec.build())``: for most kernels this is the
        problem itself; for fixed-decay kernels g is replaced by the decay they apply.
        """
        if self.implied_decay is None:
            return problem
        g = self.implied_decay(problem)
        return replace(problem, g=g.to(device=problem.q.device))

    def supports(self, problem: Problem) -> str | None:
        """Return why ``problem`` is outside this kernel's capabilities, or `None`."""
        cap = self.capabilities
        _, T, H, K, V = problem.shape
        dtype = dtype_name(problem.q.dtype)
        gate = "vector" if problem.vector_gate else "scalar"
        checks = [
            (dtype in cap.dtypes, f"dtype {dtype} not in {cap.dtypes}"),
            (problem.normalize in cap.normalize, f"normalize={problem.normalize} unsupported"),
            (
                problem.feature_map in cap.feature_maps,
                f"feature_map={problem.feature_map} not applied by the kernel",
            ),
            (
                problem.query_map == (cap.query_feature_map or problem.feature_map),
                f"queries' feature map {problem.query_map} not the kernel's "
                f"({cap.query_feature_map or problem.feature_map})",
            ),
            (
                not problem.normalize or cap.configurable or problem.eps == cap.eps,
                f"eps={problem.eps} differs from the kernel's eps={cap.eps}",
            ),
            (problem.g is None or cap.decay or self.implied_decay is not None, "no decay support"),
            (problem.g is not None or not cap.decay_required, "g is required (decay_required)"),
            (
                problem.g is None or self.implied_decay is not None or gate in cap.gates,
                f"{gate} gates (g {'[B, T, H, K]' if problem.vector_gate else '[B, T, H]'}) not "
                f"declared (gates={cap.gates})",
            ),
            (problem.cu_seqlens is None or cap.varlen, "no varlen support"),
            (problem.initial_state is None or cap.initial_state, "no initial-state support"),
            (not problem.output_final_state or cap.final_state, "no final-state output"),
            ((problem.gv is not None) == cap.value_gate, "value gate gv not as declared"),
            (
                cap.min_head_dim <= min(K, V) and max(K, V) <= cap.max_head_dim,
                f"head dims K={K}, V={V} outside [{cap.min_head_dim}, {cap.max_head_dim}]",
            ),
            (not cap.seq_len_at_least_heads or T >= H, f"T={T} < H={H} (seq_len_at_least_heads)"),
            (
                T % cap.seq_len_multiple == 0,
                f"T={T} is not a multiple of {cap.seq_len_multiple} (seq_len_multiple)",
            ),
            (
                dtype not in cap.even_head_dims or (K % 2 == 0 and V % 2 == 0),
                f"odd head dims K={K}, V={V} in {dtype}",
            ),
            (
                not cap.scales or problem.scale in fixed_scales(cap.scales, K),
                f"scale={problem.scale!r} is not one of {cap.scales} "
                f"({', '.join(f'{v!r}' for v in fixed_scales(cap.scales, K))})",
            ),
            (
                cap.max_feature_dim is None or problem.feature_dim <= cap.max_feature_dim,
                f"feature dim F={problem.feature_dim} of {problem.feature_map} above "
                f"{cap.max_feature_dim}",
            ),
        ]
        for ok, reason in checks:
            if not ok:
                return f"{self.name}: {reason}"
        return None

    def call(self, problem: Problem) -> tuple[Any, Any]:
        """Call the kernel on ``problem``'s tensors (no casts) in its declared layout.

        Every argument the kernel declares is passed explicitly (``g=None``, ``initial_state=
        None`` and ``cu_seqlens=None`` too, where it declares decay, initial states, varlen),
        except those ``problem.omit`` names whose value is the convention's default
        (`Problem.at_default`): those are left out, so the kernel's own default applies. A kernel
        that does not declare ``g``, ``initial_state`` or ``cu_seqlens`` is passed them only
        when the problem gives them a value (a problem `supports` rejects). Only the keywords its
        signature names reach it, and through a ``**kwargs`` catch-all only those of features it
        declares (`linattn_verify.signature.keywords_for`); ``scale`` only if it ``takes_scale``.
        q, k, v and g go by position unless the signature names one at another position
        (`linattn_verify.signature.call_with`); tensors and the result move between the
        harness's layout and the kernel's (`linattn_verify.core.convention`), and o alone is
        taken for ``(o, None)``.
        """
        cap = self.capabilities
        p = problem
        left_out = p.omit & p.at_default()
        kwargs: dict[str, Any] = {"scale": p.scale} if cap.takes_scale else {}
        kwargs.update(self.options)
        if cap.initial_state or p.initial_state is not None:
            kwargs["initial_state"] = state_in(p.state_arg, cap.state_layout)
        kwargs["output_final_state"] = p.output_final_state
        if cap.varlen or p.cu_seqlens is not None:
            kwargs["cu_seqlens"] = None if p.cu_seqlens is None else p.cu_seqlens.to(p.q.device)
        if cap.configurable:
            kwargs.update(normalize=p.normalize, eps=p.eps, feature_map=p.feature_map)
        if p.feature_weights is not None:
            kwargs["feature_weights"] = p.feature_weights
        if cap.value_gate:
            kwargs["gv"] = tokens_in(p.gv, cap.layout)
        for name in left_out - set(self.options):
            kwargs.pop(name, None)
        declared = {
            "scale": cap.takes_scale,
            "initial_state": cap.initial_state,
            "output_final_state": cap.final_state,
            "cu_seqlens": cap.varlen,
            "normalize": cap.configurable,
            "eps": cap.configurable,
            "feature_map": cap.configurable,
            "feature_weights": "favor+" in cap.feature_maps,
            "gv": cap.value_gate,
        }
        features = {n for n, on in declared.items() if on} | set(self.options)
        kwargs = keywords_for(self.fn, kwargs, features)
        args: list[tuple[str, Any]] = [("q", p.q), ("k", p.k), ("v", p.v)]
        takes_g = self.implied_decay is None and (cap.decay or p.g is not None)
        if takes_g and "g" not in left_out:
            args.append(("g", p.g))
        laid_out = [(name, tokens_in(x, cap.layout)) for name, x in args]
        result = call_with(self.fn, laid_out, kwargs)
        return result_out(  # type: ignore[no-any-return]
            result, cap.layout, cap.state_layout, final_state_asked=p.output_final_state
        )


__all__ = ["Capabilities", "Kernel"]
