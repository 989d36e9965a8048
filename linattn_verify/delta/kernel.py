# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A delta-rule kernel under test: a callable in FLA's calling convention plus its declarations.

The family's calling convention (flash-linear-attention's ``chunk_gated_delta_rule``,
``chunk_kda``, ``chunk_delta_rule``):

    o, final_state = fn(q, k, v, g, beta, *, scale, initial_state, output_final_state,
                        cu_seqlens, use_qk_l2norm_in_kernel)

``g`` is left out entirely by a kernel that declares no gate (DeltaNet:
``fn(q, k, v, beta, ...)``), and passed (possibly `None`) by one that declares a gate. What the
signature cannot say a kernel declares in `DeltaCapabilities`; how it rounds, in `DeltaRecipe`
(docs/error-model.md §8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import torch

from linattn_verify.core.convention import (
    AxisOrder,
    StateOrder,
    check_layouts,
    result_out,
    state_in,
    tokens_in,
)
from linattn_verify.core.kernel import KernelBase
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.core.sizes import FIXED_SCALES, fixed_scales
from linattn_verify.delta.problem import DeltaProblem
from linattn_verify.errors import InvalidArgument
from linattn_verify.signature import call_with, keywords_for
from linattn_verify.typing import (
    DTYPE_NAMES,
    FINAL_STATE_DTYPES,
    KERNEL_DTYPES,
    FinalStateDtype,
    dtype_name,
)

DeltaGate = Literal["none", "scalar", "vector"]
DELTA_GATES: tuple[DeltaGate, ...] = get_args(DeltaGate)
DeltaForm = Literal["recurrent", "chunk"]

UNIT_KEY_SLACK = 2.0**-6
"""How far above 1 a key's squared norm may be where a kernel expects unit-norm keys.

Keys normalised in bf16 by the caller have ||k||² within about K·2^-8 of 1; a kernel expecting
unit keys is expected to stay stable for those. Beyond 1 + 2^-6 (and beta ||k||² > 2 in any case)
the step is no longer a contraction the kernel can rely on: the case is out of its contract."""


def gate_of(problem: DeltaProblem) -> DeltaGate:
    """``"none"``, ``"scalar"`` or ``"vector"``: the shape of the problem's gate."""
    if problem.g is None:
        return "none"
    return "vector" if problem.vector_gate else "scalar"


@dataclass(frozen=True)
class DeltaCapabilities:
    """What a delta-rule kernel supports, as far as its signature cannot tell.

    Attributes:
        gates: Gate shapes it takes: ``"none"`` (no g argument accepted as `None`, or no g
            argument at all when it is the only one), ``"scalar"`` (``[B, T, H]``, Gated
            DeltaNet), ``"vector"`` (``[B, T, H, K]``, KDA). Default: `("none",)`.
        l2norm_qk: Values of ``use_qk_l2norm_in_kernel`` it takes. Default: `(False, True)`.
        negative_eigenvalues: Takes beta in [0, 2) (not only [0, 1]). Default: `True`.
        unit_norm_keys: Expects unit-norm keys where it does not normalise them itself (every
            FLA kernel is written for them): keys with ||k||² > 1 + `UNIT_KEY_SLACK` are outside
            its contract. Default: `True`.
        backward: Differentiable in q, k, v, beta, g and the initial state. Default: `True`.
        varlen: Accepts ``cu_seqlens``. Default: `True`.
        initial_state: Accepts ``initial_state``. Default: `True`.
        final_state: Can return the final state. Default: `True`.
        dtypes: Input dtypes it takes. Default: fp32, fp16, bf16.
        max_head_dim: Largest K and V. Default: `256`.
        min_head_dim: Smallest K and V. Default: `1`.
        deterministic: Promises bit-identical reruns (judged bit for bit; otherwise within
            B + B). Default: `False`.
        causal_exact: Promises bit-exact causality (past outputs bitwise unchanged when only
            later inputs change); otherwise past outputs may move within the pairwise bound,
            and the chunk form's bound charges each output the rounding of its whole chunk
            (docs/error-model.md §8.10). Default: `False`.
        layout_exact: Promises bit-identical results whatever the memory layout of its inputs
            and cotangents (with ``deterministic``); otherwise within B + B. Default: `False`.
        scales: The only scales it takes (``"default"``: K^-1/2, ``"one"``: 1), or `()` for any.
            Default: `()`.
        takes_scale: Receives ``scale=``; otherwise it applies its one entry of ``scales``
            itself. Default: `True`.
        final_state_dtype: The dtype of the final state it returns, ``"float32"`` (or wider) or
            ``"input"``; the bound charges that rounding. Default: `"float32"`.
        chunk_sizes: Chunk sizes it accepts through ``chunk_size=``. Default: `()`.
        layout: Its per-token tensors' layout, ``"token-major"`` or ``"heads-first"``
            (`linattn_verify.core.convention`). Default: `"token-major"`.
        state_layout: Its state's layout, ``"kv"`` or ``"vk"``. Default: `"kv"`.
        seq_len_at_least_heads: Refuses T < H (some FLA releases): no such case is drawn.
            Default: `False`.
        value_gate: Takes a value gate ``gv=`` ``[B, T, H, V]`` (FLA's
            ``fused_recurrent_gated_delta_rule``): every case draws one. Judged forward only,
            under the recurrent recipe (`linattn_verify.delta.value_gate`), so it needs
            ``backward=False``. Default: `False`.
    """

    gates: tuple[DeltaGate, ...] = ("none",)
    l2norm_qk: tuple[bool, ...] = (False, True)
    negative_eigenvalues: bool = True
    unit_norm_keys: bool = True
    backward: bool = True
    varlen: bool = True
    initial_state: bool = True
    final_state: bool = True
    dtypes: tuple[str, ...] = KERNEL_DTYPES
    max_head_dim: int = 256
    min_head_dim: int = 1
    deterministic: bool = False
    causal_exact: bool = False
    layout_exact: bool = False
    scales: tuple[str, ...] = ()
    takes_scale: bool = True
    final_state_dtype: FinalStateDtype = "float32"
    chunk_sizes: tuple[int, ...] = ()
    layout: AxisOrder = "token-major"
    state_layout: StateOrder = "kv"
    seq_len_at_least_heads: bool = False
    value_gate: bool = False

    def __post_init__(self) -> None:
        check_layouts(self.layout, self.state_layout)
        if self.value_gate and self.backward:
            raise InvalidArgument(
                "Got value_gate=True with backward=True: a value gate's gradients are not "
                "judged yet; declare the kernel forward-only (--no-backward)."
            )
        if not self.gates or any(g not in DELTA_GATES for g in self.gates):
            raise InvalidArgument(f"Got gates={self.gates!r}; each must be one of {DELTA_GATES}.")
        if not self.l2norm_qk or any(not isinstance(x, bool) for x in self.l2norm_qk):
            raise InvalidArgument(
                f"Expected l2norm_qk to be a non-empty tuple of bools but got {self.l2norm_qk!r}."
            )
        if not self.dtypes or any(d not in DTYPE_NAMES for d in self.dtypes):
            raise InvalidArgument(f"Got dtypes={self.dtypes!r}; each must be one of {DTYPE_NAMES}.")
        if not (1 <= self.min_head_dim <= self.max_head_dim):
            raise InvalidArgument(
                f"Expected 1 <= min_head_dim <= max_head_dim but got {self.min_head_dim}, "
                f"{self.max_head_dim}."
            )
        if any(s not in FIXED_SCALES for s in self.scales) or (
            not self.takes_scale and len(self.scales) != 1
        ):
            raise InvalidArgument(
                f"Got scales={self.scales!r}, takes_scale={self.takes_scale}: scales are of "
                f"{tuple(FIXED_SCALES)}, and a kernel that takes no scale names the one it applies."
            )
        if self.final_state_dtype not in FINAL_STATE_DTYPES:
            raise InvalidArgument(
                f"Got final_state_dtype={self.final_state_dtype!r}; it must be one of "
                f"{FINAL_STATE_DTYPES}."
            )

    @property
    def takes_g(self) -> bool:
        """Whether ``g`` is one of its positional arguments (it declares a gate)."""
        return any(g != "none" for g in self.gates)


@dataclass(frozen=True)
class DeltaRecipe:
    """How a delta-rule kernel rounds, as far as its error bound is concerned.

    docs/error-model.md §8 derives the bound from these. Every dtype below is a storage format
    an intermediate is rounded to once where it is written (``"input"``: the input dtype; `None`:
    kept in fp32 registers, no extra rounding).

    Attributes:
        form: ``"recurrent"`` (token by token) or ``"chunk"`` (the WY / UT chunk form).
        chunk_size: C of the chunk form. Default: `64`.
        accumulation: ``"ieee"`` (fp32 adds), ``"mma"`` (tensor-core accumulation, 2^-23),
            ``"float64"`` (a float64 computation) or ``"input"`` (every product and sum in the
            input dtype: a kernel that never upcasts). Default: `"ieee"`.
        tf32: fp32 dot operands are rounded to tf32 (compiled on CUDA with Triton's default);
            IEEE under the interpreter. Default: `False`.
        inverse_dtype: What the per-chunk triangular inverse T = L^-1 is stored in.
            Default: `None`.
        intermediate_dtype: What W, U, the corrected values Vn and the in-kernel L2-normalised
            q, k are stored in. Default: `None`.
        state_dtype: What the state is kept in: the chunk form rounds the chunk-boundary state
            to it before the chunk's dots read it (W S and Q S); the recurrent form rounds S_0
            when it reads it and every S_t when it stores it. Default: `None`.
        casts_on_path: Further roundings to ``intermediate_dtype`` a term meets beyond those
            named above (for example beta·k cast before a dot). Default: `0`.
        inverse_method: (chunk form) How the triangular inverse is computed: ``"substitution"``
            (forward substitution, a triangular solve, a block merge) or ``"products"`` (a
            Neumann or doubling product of (I + N^{2^k}) factors: less accurate where L's
            entries exceed 1; docs/error-model.md §8.10). A general pivoting solver is charged
            for any kernel that does not declare bit-exact causality. Default: `"substitution"`.
        stored_corrections: (recurrent form) The backward does not run the adjoint recurrence
            on recomputed states alone: it recomputes S_t = S_0 + Σ_j k_j u_j^T from the
            corrections u_j = β_j e_j the forward stored in ``intermediate_dtype``, and stores
            the dk and dv partial sums there between its two passes (FLA's
            ``fused_recurrent_delta_rule``). Default: `False`.
    """

    form: DeltaForm
    chunk_size: int = 64
    accumulation: Literal["ieee", "mma", "float64", "input"] = "ieee"
    tf32: bool = False
    inverse_dtype: str | None = None
    intermediate_dtype: str | None = None
    state_dtype: str | None = None
    casts_on_path: int = 0
    inverse_method: Literal["substitution", "products"] = "substitution"
    stored_corrections: bool = False

    def __post_init__(self) -> None:
        if self.form not in get_args(DeltaForm):
            raise InvalidArgument(
                f"Got form={self.form!r}; it must be one of {get_args(DeltaForm)}."
            )
        if self.inverse_method not in ("substitution", "products"):
            raise InvalidArgument(
                f"Got inverse_method={self.inverse_method!r}; it must be 'substitution' or "
                "'products'."
            )
        if self.accumulation not in ("ieee", "mma", "float64", "input"):
            raise InvalidArgument(
                f"Got accumulation={self.accumulation!r}; it must be 'ieee', 'mma', 'float64' or "
                "'input'."
            )
        for name in ("inverse_dtype", "intermediate_dtype", "state_dtype"):
            value = getattr(self, name)
            if value not in (*UNIT_ROUNDOFF, "input", None):
                raise InvalidArgument(
                    f"Got {name}={value!r}; it must be one of {(*UNIT_ROUNDOFF, 'input', None)}."
                )
        for name in ("chunk_size", "casts_on_path"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"Got {name}={value!r}, but {name} must be an int >= 0.")
        if self.chunk_size < 1:
            raise InvalidArgument(f"Got chunk_size={self.chunk_size}, but it must be >= 1.")
        if self.stored_corrections and (
            self.form != "recurrent" or self.intermediate_dtype is None
        ):
            raise InvalidArgument(
                f"Got stored_corrections=True with form={self.form!r}, intermediate_dtype="
                f"{self.intermediate_dtype!r}; it describes a recurrent backward that stores its "
                "corrections in intermediate_dtype (name it)."
            )
        if self.casts_on_path and self.intermediate_dtype is None:
            raise InvalidArgument(
                f"Got casts_on_path={self.casts_on_path} with intermediate_dtype=None; name the "
                "dtype the intermediates are rounded to."
            )

    def u(self, input_dtype: torch.dtype) -> float:
        """Unit roundoff of the arithmetic: fp32's, float64's, or the input dtype's.

        The input dtype's (at least fp32's) for ``accumulation="input"``.
        """
        if self.accumulation == "float64":
            return 2.0**-53
        if self.accumulation == "input":
            return max(UNIT_ROUNDOFF[dtype_name(input_dtype)], 2.0**-24)
        return 2.0**-24

    def u_acc(self, input_dtype: torch.dtype) -> float:
        """Unit roundoff of dot accumulation (tensor cores: 2^-23)."""
        return 2.0**-23 if self.accumulation == "mma" else self.u(input_dtype)

    @property
    def u_operand(self) -> float:
        """Relative error of one fp32 dot operand (tf32: 2^-11; IEEE: exact)."""
        return 2.0**-11 if self.tf32 else 0.0

    def u_storage(self, name: str, input_dtype: torch.dtype) -> float:
        """Unit roundoff of the storage named by attribute ``name`` for inputs of this dtype.

        0 where the intermediate stays in registers, or where its storage format is the
        arithmetic's own (an fp32 store of an fp32 value rounds nothing).
        """
        value = getattr(self, name)
        if value is None:
            return 0.0
        resolved = dtype_name(input_dtype) if value == "input" else value
        unit = UNIT_ROUNDOFF[resolved]
        return 0.0 if unit <= self.u(input_dtype) else unit


Recipe = DeltaRecipe | Callable[[torch.dtype], DeltaRecipe]


@dataclass(frozen=True)
class DeltaKernel(KernelBase[DeltaCapabilities, DeltaRecipe]):
    """A delta-rule kernel under test, in the family's calling convention (module docstring).

    Its fields are `KernelBase`'s: name, fn, capabilities, recipe, options, source.
    """

    family: ClassVar[str] = "delta"

    @property
    def form(self) -> DeltaForm:
        """The algorithm of its recipe (for fp32 inputs: what reports name it by)."""
        return self.precision_recipe(torch.float32).form

    def supports(self, problem: DeltaProblem) -> str | None:
        """Return why ``problem`` is outside this kernel's capabilities, or `None`."""
        cap = self.capabilities
        _, T, H, K, V = problem.shape
        dtype = dtype_name(problem.q.dtype)
        gate = gate_of(problem)
        checks = [
            (dtype in cap.dtypes, f"dtype {dtype} not in {cap.dtypes}"),
            (gate in cap.gates, f"gate {gate!r} not declared (gates={cap.gates})"),
            (
                problem.l2norm_qk in cap.l2norm_qk,
                f"use_qk_l2norm_in_kernel={problem.l2norm_qk} not declared",
            ),
            (
                cap.negative_eigenvalues or float(problem.beta.max()) <= 1,
                "beta > 1 (negative eigenvalues) not declared",
            ),
            (problem.cu_seqlens is None or cap.varlen, "no varlen support"),
            (problem.initial_state is None or cap.initial_state, "no initial-state support"),
            (not problem.output_final_state or cap.final_state, "no final-state output"),
            (
                cap.min_head_dim <= min(K, V) and max(K, V) <= cap.max_head_dim,
                f"head dims K={K}, V={V} outside [{cap.min_head_dim}, {cap.max_head_dim}]",
            ),
            (not cap.seq_len_at_least_heads or T >= H, f"T={T} < H={H} (seq_len_at_least_heads)"),
            ((problem.gv is not None) == cap.value_gate, "value gate gv not as declared"),
            (
                problem.gv is None or self.precision_recipe(problem.q.dtype).form == "recurrent",
                "a value gate is judged under the recurrent recipe only",
            ),
            (
                not cap.scales or problem.scale in fixed_scales(cap.scales, K),
                f"scale={problem.scale!r} is not one of {cap.scales}",
            ),
        ]
        for ok, reason in checks:
            if not ok:
                return f"{self.name}: {reason}"
        return None

    def contract(self, problem: DeltaProblem) -> str | None:
        """Return why ``problem`` is outside the kernel's numerical contract, or `None`.

        A kernel expecting unit-norm keys (``unit_norm_keys``) is promised ||k_t||² <= 1 +
        `UNIT_KEY_SLACK` for keys it does not normalise itself; a case breaking that is
        ``out_of_contract``: judged for not crashing and for finite results only.
        """
        if not self.capabilities.unit_norm_keys or problem.l2norm_qk:
            return None
        norms = problem.k.double().pow(2).sum(-1)
        worst = float(norms.max()) if norms.numel() else 0.0
        if worst > 1 + UNIT_KEY_SLACK:
            return (
                f"{self.name} expects unit-norm keys (unit_norm_keys=True) but max ||k_t||² = "
                f"{worst:.4g}"
            )
        return None

    def call(self, problem: DeltaProblem) -> tuple[Any, Any]:
        """Call the kernel on ``problem``'s tensors (no casts) in its declared layout.

        Only the keywords its signature names are passed, and through a ``**kwargs`` catch-all
        only those of features it declares; ``scale`` only if it ``takes_scale``; ``gv`` where
        it declares a value gate; none that ``problem.omit`` names while at its default
        (`DeltaProblem.at_default`). q, k, v, g and beta go by position unless the signature
        names one at another position (`linattn_verify.signature.call_with`); tensors and the
        result move between the harness's layout and the kernel's
        (`linattn_verify.core.convention`), and o alone is taken for ``(o, None)``.
        """
        cap = self.capabilities
        p = problem
        kwargs: dict[str, Any] = {
            "scale": p.scale,
            "initial_state": state_in(p.initial_state, cap.state_layout),
            "output_final_state": p.output_final_state,
            "use_qk_l2norm_in_kernel": p.l2norm_qk,
            **self.options,
        }
        if cap.value_gate:
            kwargs["gv"] = tokens_in(p.gv, cap.layout)
        if cap.varlen or p.cu_seqlens is not None:
            kwargs["cu_seqlens"] = None if p.cu_seqlens is None else p.cu_seqlens.to(p.q.device)
        declared = {
            "scale": cap.takes_scale,
            "initial_state": cap.initial_state,
            "output_final_state": cap.final_state,
            "use_qk_l2norm_in_kernel": True in cap.l2norm_qk,
            "cu_seqlens": cap.varlen,
            "gv": cap.value_gate,
        }
        if not cap.takes_scale:
            del kwargs["scale"]
        for name in p.omit & p.at_default():
            # The case's calling style leaves these out: the kernel's own default applies.
            kwargs.pop(name, None)
        # Only the keywords its signature names reach it (`linattn_verify.signature`).
        features = {n for n, on in declared.items() if on} | set(self.options)
        kwargs = keywords_for(self.fn, kwargs, features)
        names = ("q", "k", "v", "g", "beta") if cap.takes_g else ("q", "k", "v", "beta")
        args = [(name, tokens_in(getattr(p, name), cap.layout)) for name in names]
        result = call_with(self.fn, args, kwargs)
        return result_out(  # type: ignore[no-any-return]
            result, cap.layout, cap.state_layout, final_state_asked=p.output_final_state
        )


__all__ = [
    "DELTA_GATES",
    "UNIT_KEY_SLACK",
    "DeltaCapabilities",
    "DeltaGate",
    "DeltaKernel",
    "DeltaRecipe",
    "gate_of",
]
