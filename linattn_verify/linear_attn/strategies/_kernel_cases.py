# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The cases a kernel declares it takes: `problem_specs` filtered by its `Capabilities`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st

from linattn_verify.core.sizes import DEFAULT_MODULI, check_int
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import OMITTABLE
from linattn_verify.linear_attn.strategies._cases import ProblemSpec, problem_specs
from linattn_verify.linear_attn.strategies._tensors import (
    DTYPES,
    LAYOUTS,
    VALUE_FAMILIES,
    VECTOR_DECAY_FAMILIES,
)

VALUE_GATE_FAMILIES = tuple(f for f in VECTOR_DECAY_FAMILIES if f != "none")
"""The value gates drawn for a kernel that takes one (g = 0 first: the simplest)."""


def kernel_specs(
    kernel: Kernel,
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 48,
    max_head_dim: int = 12,
    values: Sequence[str] = VALUE_FAMILIES,
    decays: Sequence[str] = VECTOR_DECAY_FAMILIES,
    layouts: Sequence[str] = LAYOUTS,
) -> st.SearchStrategy[ProblemSpec]:
    """Generate `ProblemSpec` for cases ``kernel`` declares it supports (and only those).

    Every option is drawn from what `Capabilities` allows (dtypes, feature maps, normalization
    and eps, decay and its gate shapes, varlen, initial and final state, head-dim limits), so
    ``kernel.supports`` accepts every spec; T covers every residue mod the kernel's chunk sizes.
    The exclusions of `problem_specs` apply. A kernel that takes a value gate gets one of
    `VALUE_GATE_FAMILIES` in every case. The calling style may leave out what `Kernel.call`
    would pass this kernel at its default: ``scale`` and ``output_final_state`` always;
    ``initial_state``, ``cu_seqlens`` and ``g`` where it declares them (g not with an implied
    decay); ``normalize``, ``eps`` and ``feature_map`` where it is ``configurable``.

    Args:
        kernel: The kernel under test; its `Capabilities` filter every draw.
        min_seq_len: Shortest T. Default: `1`.
        max_seq_len: Longest T. Default: `48`.
        max_head_dim: Largest K and V (capped by the kernel's limit). Default: `12`.
        values: Value families to draw from. Default: every family.
        decays: Decay families to draw from (only ``"none"`` without decay support; a scalar
            gate draws those of `DECAY_FAMILIES` among them). Default: all.
        layouts: Memory layouts to draw from. Default: all.

    Raises:
        InvalidArgument: if ``kernel`` is not a `Kernel`, takes no dtype the strategies know,
            or an argument is malformed.
    """
    if not isinstance(kernel, Kernel):
        raise InvalidArgument(f"Expected a linattn_verify Kernel but got kernel={kernel!r}.")
    cap = kernel.capabilities
    dtypes = tuple(d for d in cap.dtypes if d in DTYPES)
    if not dtypes:
        raise InvalidArgument(f"Kernel {kernel.name} takes none of the dtypes {tuple(DTYPES)}.")
    check_int("max_head_dim", max_head_dim)
    declared = {
        "g": cap.decay and not cap.decay_required and kernel.implied_decay is None,
        "initial_state": cap.initial_state,
        "cu_seqlens": cap.varlen,
        "normalize": cap.configurable,
        "eps": cap.configurable,
        "feature_map": cap.configurable,
    }
    specs = problem_specs(
        min_seq_len=min_seq_len,
        max_seq_len=max_seq_len,
        min_head_dim=cap.min_head_dim,
        max_head_dim=max(cap.min_head_dim, min(max_head_dim, cap.max_head_dim)),
        dtypes=dtypes,
        feature_maps=cap.feature_maps,
        values=values,
        decays=_kernel_decays(kernel, decays),
        gates=cap.gates if cap.decay and kernel.implied_decay is None else ("scalar",),
        normalize=cap.normalize,
        varlen=cap.varlen,
        eps_values=(0.0, 1e-6, 1e-2) if cap.configurable else (cap.eps,),
        initial_state=(False, True) if cap.initial_state else (False,),
        final_state=(False, True) if cap.final_state else (False,),
        layouts=layouts,
        chunk_sizes=cap.chunk_sizes or DEFAULT_MODULI,
        even_head_dims=tuple(d for d in cap.even_head_dims if d in dtypes),
        omittable=tuple(n for n in OMITTABLE if declared.get(n, True)),
        max_feature_dim=min(16, cap.max_feature_dim or 16),
        fixed_scales=cap.scales,
        heads_within_seq_len=cap.seq_len_at_least_heads,
        query_feature_map=cap.query_feature_map,
        seq_len_multiple=cap.seq_len_multiple,
    )
    if not cap.value_gate:
        return specs
    # Drawn after the rest of the case, so a value gate's failure shrinks the case first.
    gates = st.sampled_from(VALUE_GATE_FAMILIES)
    return st.tuples(specs, gates).map(lambda drawn: replace(drawn[0], value_gate=drawn[1]))


def _kernel_decays(kernel: Kernel, decays: Sequence[str]) -> tuple[str, ...]:
    """The decay families of ``decays`` that ``kernel`` takes (only ``"none"`` without decay)."""
    cap = kernel.capabilities
    if not cap.decay:
        return ("none",)
    if cap.decay_required:
        # No decay is g = 0 for a kernel that requires g: the "zero" family.
        kept = tuple(d for d in decays if d != "none")
        return kept or ("zero",)
    return tuple(decays)


__all__ = ["VALUE_GATE_FAMILIES", "kernel_specs"]
