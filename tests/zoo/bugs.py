# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo: deliberately broken kernels, one or more per row of docs/bug-classes.md.

A broken kernel is a float32 torch kernel in the calling convention that breaks exactly one
thing, the way a real kernel did (``ZooEntry.mirrors`` names the issue or PR). Its correct twin
is the same kernel without the bug: the same code path, capabilities and precision recipe, so
any property the broken kernel fails and its twin holds is a failure caused by the bug. The
catalogue must reject every broken kernel and accept every twin: `test_zoo.py` searches with the
catalogue directly, `test_zoo_cli.py` through ``linattn-verify check`` (`cli_targets.py`).

Most kernels reuse the float64-capable reference forms (`linattn_verify.linear_attn.oracles`)
evaluated in float32, so a twin is exactly a reference kernel and a broken kernel differs from it by
one bug.

The file has the correct twins (from the float32 forms and helpers of `zoo_forms.py`), the
broken kernels grouped by bug class in the order of docs/bug-classes.md, then the table `ZOO`
(each broken kernel with its twin) and `twins_of` (each twin once). Under
``--import-mode=importlib`` a test module cannot import a sibling module, so the zoo's
``conftest.py`` and `cli_targets.py` load this file by path
(`linattn_verify.core.loading.import_file`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from linattn_verify.core.loading import import_file
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.reference_kernels import (
    RECIPES,
    convention_kernel,
    evaluate_form,
)
from linattn_verify.linear_attn.semantics import Problem

_MEMORY = import_file(Path(__file__).with_name("memory_bugs.py"), "_linattn_zoo_memory_bugs")

_FORMS = import_file(Path(__file__).with_name("zoo_forms.py"), "_linattn_zoo_forms")
# The pieces of zoo_forms.py the kernels below use, by their names there.
(
    FULL,
    F32,
    C,
    State,
    Impl,
    _out,
    reference,
    normalized_parts,
    _sequence_problem,
    per_sequence,
    _chunk_form,
    _TotalMinusPrefixCumsum,
    parallel_one,
    _parallel_with,
    stepwise,
    flat_cumsum_denominator,
    DENOMINATOR_CAPS,
    _truncated_to_chunks,
    _MisstridedStateGradient,
    _head_first,
    _raw,
    _ScaledGradient,
) = (
    _FORMS.FULL,
    _FORMS.F32,
    _FORMS.C,
    _FORMS.State,
    _FORMS.Impl,
    _FORMS._out,
    _FORMS.reference,
    _FORMS.normalized_parts,
    _FORMS._sequence_problem,
    _FORMS.per_sequence,
    _FORMS._chunk_form,
    _FORMS._TotalMinusPrefixCumsum,
    _FORMS.parallel_one,
    _FORMS._parallel_with,
    _FORMS.stepwise,
    _FORMS.flat_cumsum_denominator,
    _FORMS.DENOMINATOR_CAPS,
    _FORMS._truncated_to_chunks,
    _FORMS._MisstridedStateGradient,
    _FORMS._head_first,
    _FORMS._raw,
    _FORMS._ScaledGradient,
)


# The correct twins: each broken kernel below is one of these with one bug.


def _twin(name: str, impl: Impl, recipe: PrecisionRecipe, caps: Capabilities = FULL) -> Kernel:
    return Kernel(name=name, fn=convention_kernel(impl), capabilities=caps, recipe=recipe)


CHUNK_TWIN = _twin("zoo-twin/chunk", functools.partial(reference, "chunk"), RECIPES["chunk"])
RECURRENT_TWIN = _twin(
    "zoo-twin/recurrent", functools.partial(reference, "recurrent"), RECIPES["recurrent"]
)
PARTS_TWIN = _twin("zoo-twin/normalized-parts", normalized_parts, RECIPES["chunk"])
SEQUENCE_TWIN = _twin(
    "zoo-twin/per-sequence", lambda p: per_sequence(p, _chunk_form), RECIPES["chunk"]
)
PARALLEL_TWIN = _twin(
    "zoo-twin/parallel", lambda p: per_sequence(p, parallel_one), RECIPES["parallel"]
)
STEPWISE_TWIN = _twin(
    "zoo-twin/stepwise", lambda p: per_sequence(p, stepwise), RECIPES["recurrent"]
)
DENOMINATOR_TWIN = _twin(
    "zoo-twin/cumsum-denominator", flat_cumsum_denominator, RECIPES["parallel"], DENOMINATOR_CAPS
)


# Normalization.


def denominator_cumsum_over_heads(p: Problem) -> tuple[torch.Tensor, State]:
    """Normalization: cumsums φ(k) over the token-head axis, mixing heads (fla PR #594, #850)."""
    return flat_cumsum_denominator(p, over_heads=True)


def key_sum_dropped_on_resume(p: Problem) -> tuple[torch.Tensor, State]:
    """Normalization: resumes from S_0 but restarts the key sum z from 0 (fla PR #268)."""
    if p.initial_key_sum is not None:
        p = replace(p, initial_key_sum=torch.zeros_like(p.initial_key_sum))
    return reference("chunk", p)


def normalizer_default_scale(p: Problem) -> tuple[torch.Tensor, State]:
    """Normalization: scales the normalizer by K^-1/2, not the caller's s (fla PR #130)."""
    # fla resolved ``scale=None`` for the numerator only. This is the form of the bug a caller
    # passing the scale meets (the normalizer never sees it); `scale_default_from_values` is
    # the form only a call without ``scale`` meets.
    return normalized_parts(p, z_scale=p.shape[3] ** -0.5)


def denominator_detached(p: Problem) -> tuple[torch.Tensor, State]:
    """Normalization: builds Z from detached keys, so dk misses the normalizer (fla PR #875)."""
    return normalized_parts(p, z_keys=torch.Tensor.detach)


# Gate overflow.

parallel_exp_before_mask = _parallel_with(
    "exp_before_mask",
    "Gate overflow: exp(G_i - G_j) before the causal mask gives inf * 0 = NaN (fla #34).",
)
parallel_factored = _parallel_with(
    "factored", "Gate overflow: exp(G_i) / exp(G_j) is 0/0 once exp(G) underflows."
)
parallel_unit_gate_guard = _parallel_with(
    "unit_gate_guard", "Gate overflow: clamps g <= -1e-6 to guard a log, breaking gate = 1."
)


# Precision.

parallel_total_minus_prefix = _parallel_with(
    "total_minus_prefix",
    "Precision: dg's suffix sum as total - prefix cancels catastrophically (fla PR #1095).",
)


def state_in_bfloat16(p: Problem) -> tuple[torch.Tensor, State]:
    """Precision: rounds the running state to bfloat16 after every token (fla #36)."""
    return per_sequence(p, functools.partial(stepwise, state_dtype=torch.bfloat16))


# Tail and length.


def partial_last_chunk_skipped(p: Problem) -> tuple[torch.Tensor, State]:
    """Tail and length: launches T // C chunks, skipping a partial last one (lightning-attn #27)."""
    return per_sequence(p, _truncated_to_chunks)


LONG_PATH_SEGMENT = 512
"""Tokens per launch of `long_sequence_segments_restart`'s long-sequence path."""


def _segments_from_initial_state(x: Problem) -> tuple[torch.Tensor, State]:
    """One sequence in launches of 512 tokens, each from h0 rather than from the carried state."""
    L = x.q.shape[1]
    if L <= LONG_PATH_SEGMENT:
        return _chunk_form(x)
    outputs, final = [], None
    for start in range(0, L, LONG_PATH_SEGMENT):
        end = min(start + LONG_PATH_SEGMENT, L)
        segment = _sequence_problem(x, 0, start, end, x.initial_state, x.initial_key_sum)
        o, final = _chunk_form(segment)
        outputs.append(o)
    return torch.cat(outputs, dim=1), final


def long_sequence_segments_restart(p: Problem) -> tuple[torch.Tensor, State]:
    """Tail and length: past T = 512 a separate path restarts each 512-token launch from h0."""
    # Right for every T <= 512, so a search of short sequences never sees it.
    return per_sequence(p, _segments_from_initial_state)


parallel_short_unmasked = _parallel_with(
    "short_unmasked", "Tail and length: drops the causal mask on sequences of at most C tokens."
)


# Varlen.


def state_kept_across_unaligned_boundary(p: Problem) -> tuple[torch.Tensor, State]:
    """Varlen: resets the state only at chunk-aligned boundaries, leaking it across the others."""
    # A chunk straddling a document boundary carries the previous document's state into the next.
    return per_sequence(p, _chunk_form, carry_at=lambda start: start % C != 0)


def empty_segments_dropped(p: Problem) -> tuple[torch.Tensor, State]:
    """Varlen: skips empty segments and indexes h0 by launch position, misplacing later h0s."""
    # Every segment after an empty one starts from the wrong initial state.
    return per_sequence(p, _chunk_form, drop_empty=True)


# State.


def initial_state_ignored(p: Problem) -> tuple[torch.Tensor, State]:
    """State: starts every sequence from zero whatever ``initial_state`` says (fla #285)."""
    return reference("chunk", replace(p, initial_state=None, initial_key_sum=None))


RACE_TILE = 64
"""Tokens per program of `chunk_state_lost_in_race`: the race needs a second program."""

_RACE_CALLS = itertools.count()


def _first_tile_state_dropped(x: Problem) -> tuple[torch.Tensor, State]:
    """One sequence whose second program starts from h0, not from the first program's state."""
    L = x.q.shape[1]
    head = _sequence_problem(x, 0, 0, RACE_TILE, x.initial_state, x.initial_key_sum)
    tail = _sequence_problem(x, 0, RACE_TILE, L, x.initial_state, x.initial_key_sum)
    o_head, _ = _chunk_form(head)
    o_tail, final = _chunk_form(tail)
    return torch.cat([o_head, o_tail], dim=1), final


def chunk_state_lost_in_race(p: Problem) -> tuple[torch.Tensor, State]:
    """State: on one call in four, past T = 64, a program reads the carried state too early."""
    # A race between the program that writes a tile's final state and the one that reads it:
    # it loses only when the work is split (T > 64) and only now and then (one call in four).
    if next(_RACE_CALLS) % 4 != 3:
        return per_sequence(p, _chunk_form)

    def lossy(x: Problem) -> tuple[torch.Tensor, State]:
        split = x.q.shape[1] > RACE_TILE
        return _first_tile_state_dropped(x) if split else _chunk_form(x)

    return per_sequence(p, lossy)


def final_state_gradient_misstrided(p: Problem) -> tuple[torch.Tensor, State]:
    """State: reads the cotangent dS_T with row stride K instead of V, right only when K == V."""
    o, state = reference("chunk", p)
    if isinstance(state, tuple):
        return o, (_MisstridedStateGradient.apply(state[0]), state[1])
    return o, None if state is None else _MisstridedStateGradient.apply(state)


# Shapes and layout.


def head_dim_rounded_down(p: Problem) -> tuple[torch.Tensor, State]:
    """Shapes and layout: computes one tile of the largest 2^n <= K dims (lightning-attn #15)."""
    K = p.shape[3]
    Kp = 1 << (K.bit_length() - 1)
    S0, z0 = p.initial_state, p.initial_key_sum
    cut = replace(
        p,
        q=p.q[..., :Kp],
        k=p.k[..., :Kp],
        initial_state=None if S0 is None else S0[..., :Kp, :],
        initial_key_sum=None if z0 is None else z0[..., :Kp],
    )
    o, state = reference("chunk", cut)
    if isinstance(state, tuple):
        pad = torch.nn.functional.pad
        return o, (pad(state[0], (0, 0, 0, K - Kp)), pad(state[1], (0, K - Kp)))
    return o, None if state is None else torch.nn.functional.pad(state, (0, 0, 0, K - Kp))


KEY_TILE = 64
"""Key dims per tile of `key_tile_offset_not_advanced`'s K loop."""


def key_tile_offset_not_advanced(p: Problem) -> tuple[torch.Tensor, State]:
    """Shapes and layout: the K loop's second tile re-reads the first tile's q and k columns."""
    # Right for K <= 64 (one tile), the head dims most tests use.
    K = p.shape[3]
    if K <= KEY_TILE:
        return reference("chunk", p)
    index = torch.arange(K) % KEY_TILE
    return reference("chunk", replace(p, q=p.q[..., index], k=p.k[..., index]))


def head_first_layout_assumed(p: Problem) -> tuple[torch.Tensor, State]:
    """Shapes and layout: indexes q, k, v, g, o as head-first [B, H, T, D] (fla #547)."""
    g = None if p.g is None else _head_first(p.g)
    o, state = reference(
        "chunk", replace(p, q=_head_first(p.q), k=_head_first(p.k), v=_head_first(p.v), g=g)
    )
    B, T, H, V = o.shape
    return o.transpose(1, 2).reshape(B, T, H, V), state


def contiguity_assumed(p: Problem) -> tuple[torch.Tensor, State]:
    """Shapes and layout: ignores the strides of q, k, v, g and reads them as contiguous."""
    # A kernel without fla's ``input_guard``; `_entry` passes it the inputs' strides.
    g = None if p.g is None else _raw(p.g)
    return reference("chunk", replace(p, q=_raw(p.q), k=_raw(p.k), v=_raw(p.v), g=g))


def _named(fn: Any, name: str, doc: str) -> Any:
    fn.__name__, fn.__qualname__, fn.__doc__ = name, name, doc
    return fn


last_dim_stride_ignored = _named(
    _MEMORY.last_dim_stride_ignored(CHUNK_TWIN.fn),
    "last_dim_stride_ignored",
    """Shapes and layout: walks the last dim of q, k, v, g with ``ptr++``, never its stride.

    Right for contiguous, transposed and sliced inputs (their last stride is 1); wrong for a
    tensor whose last dim is strided (every other feature of a packed projection), where it reads
    the elements between (a CPU kernel's inner loop over a raw pointer).
    """,
)
dense_cotangent_assumed = _named(
    _MEMORY.dense_cotangent_assumed(CHUNK_TWIN.fn),
    "dense_cotangent_assumed",
    """Shapes and layout: the backward reads do (and the final state's) as dense, contiguous.

    Right for the dense cotangent every test hands it; wrong for ``o.sum().backward()`` (an
    expanded cotangent, every stride 0: it reads past a one-element storage) and for a loss on
    a permuted output (a transposed cotangent: it reads do's elements in the wrong order).
    """,
)


# Scale.


def dv_uses_default_scale(p: Problem) -> tuple[torch.Tensor, State]:
    """Scale: computes dv with K^-1/2 where the forward used the caller's scale (fla #47)."""
    factor = p.shape[3] ** -0.5 / p.scale
    return reference("chunk", replace(p, v=_ScaledGradient.apply(p.v, factor)))


def scale_default_from_values(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None, **kw: Any
) -> tuple[torch.Tensor, State]:
    """Scale: resolves ``scale=None`` to V^-1/2 instead of K^-1/2 (fla PR #130's class).

    Right whenever the caller passes the scale (as `Kernel.call` did in every case before the
    calling style was drawn), or K == V: only a call that leaves the scale out, with K != V,
    meets the bug. Written in the calling convention, unlike the kernels above: the bug is in
    how it resolves an argument left out, which a `Problem` has already resolved.
    """
    if kw.get("scale") is None:
        kw["scale"] = v.shape[-1] ** -0.5
    return CHUNK_TWIN.fn(q, k, v, g, **kw)


# Compile and device.


def wrong_under_compile(p: Problem) -> tuple[torch.Tensor, State]:
    """Compile and device: a "fused" path under torch.compile forgets the scale (fla #52)."""
    if torch.compiler.is_compiling():
        p = replace(p, scale=1.0)
    return reference("chunk", p)


# Contract.


def scales_q_in_place(p: Problem) -> tuple[torch.Tensor, State]:
    """Contract: returns correct results, then scales q in place (q *= s) when inferring."""
    # It reuses q's buffer as scratch once no gradient needs it.
    result = reference("chunk", p)
    if not p.q.requires_grad:
        p.q.mul_(p.scale)
    return result


def returns_float32(p: Problem) -> tuple[torch.Tensor, State]:
    """Contract: returns the float32 accumulator instead of rounding o to the input dtype."""
    o, state = evaluate_form("chunk", p.to(F32))
    return o, state if p.output_final_state else None


_CALLS = itertools.count()


def nondeterministic(p: Problem) -> tuple[torch.Tensor, State]:
    """Contract: claims determinism, but moves o by one float32 ulp on every other call."""
    # Its reduction order alternates between calls, as split-K atomics do. Alternating rather
    # than random noise makes every rerun differ, so a failing case fails again when Hypothesis
    # replays it (random ulp noise on one element often rounds away).
    o, state = evaluate_form("chunk", p.to(F32))
    if next(_CALLS) % 2:
        o = torch.nextafter(o, torch.full_like(o, torch.inf))
    return _out(p, o, state)


def uninitialised_state(p: Problem) -> tuple[torch.Tensor, State]:
    """Contract: starts from ``torch.empty`` instead of zeros when no initial state is given."""
    if p.initial_state is None:
        N, (_, _, H, K, V) = p.num_sequences, p.shape
        z = torch.empty(N, H, K) if p.normalize else None
        p = replace(p, initial_state=torch.empty(N, H, K, V), initial_key_sum=z)
    return reference("chunk", p)


# Reference.


def naive_reference_ignores_scale(p: Problem) -> tuple[torch.Tensor, State]:
    """Reference: a naive recurrent reference that never applies the scale (fla #850's sibling)."""
    return reference("recurrent", replace(p, scale=1.0))


# The zoo: every broken kernel with its twin, and each twin once.


@dataclass(frozen=True)
class ZooEntry:
    """A broken kernel, its correct twin and the bug it mirrors.

    Attributes:
        broken: The broken kernel (name ``zoo/<bug>``).
        twin: The same kernel without the bug (same capabilities and recipe).
        bug_class: The row of docs/bug-classes.md.
        mirrors: The real bug it mirrors.
        extra: Properties from outside the catalogue (``test_zoo.EXTRA``) its search adds.
        size_only: Wrong only at sizes beyond the zoo's small search (K > 64, T > 512, T > 64):
            caught by ``check``'s size reach (`test_zoo_cli.py`), not by `test_zoo.py`.
    """

    broken: Kernel
    twin: Kernel
    bug_class: str
    mirrors: str
    extra: tuple[str, ...] = ()
    size_only: bool = False


def _entry(
    impl: Impl,
    twin: Kernel,
    bug_class: str,
    mirrors: str,
    extra: tuple[str, ...] = (),
    *,
    size_only: bool = False,
) -> ZooEntry:
    # The one kernel whose bug is about strides must see them.
    fn = convention_kernel(impl, contiguous=impl is not contiguity_assumed)
    broken = replace(twin, name=f"zoo/{impl.__name__}", fn=fn)
    return ZooEntry(broken, twin, bug_class, mirrors, extra, size_only)


def _convention_entry(
    fn: Callable[..., tuple[torch.Tensor, State]], twin: Kernel, bug_class: str, mirrors: str
) -> ZooEntry:
    """An entry whose broken kernel is written in the calling convention (a bug in a default)."""
    broken = replace(twin, name=f"zoo/{fn.__name__}", fn=fn)
    return ZooEntry(broken=broken, twin=twin, bug_class=bug_class, mirrors=mirrors)


ZOO: tuple[ZooEntry, ...] = (
    _entry(denominator_cumsum_over_heads, DENOMINATOR_TWIN, "normalization", "fla #594, #850"),
    _entry(key_sum_dropped_on_resume, CHUNK_TWIN, "normalization", "fla PR #268"),
    _entry(normalizer_default_scale, PARTS_TWIN, "normalization", "fla PR #130"),
    _entry(denominator_detached, PARTS_TWIN, "normalization", "fla PR #875"),
    _entry(parallel_exp_before_mask, PARALLEL_TWIN, "gate overflow", "fla #34"),
    _entry(parallel_factored, PARALLEL_TWIN, "gate overflow", "exp(G_i)/exp(G_j)"),
    _entry(parallel_unit_gate_guard, PARALLEL_TWIN, "gate overflow", "fla #104, #389"),
    _entry(parallel_total_minus_prefix, PARALLEL_TWIN, "precision", "fla PR #1095"),
    _entry(state_in_bfloat16, STEPWISE_TWIN, "precision", "fla #36"),
    _entry(partial_last_chunk_skipped, SEQUENCE_TWIN, "tail and length", "lightning-attn #27"),
    _entry(parallel_short_unmasked, PARALLEL_TWIN, "tail and length", "fla #88"),
    _entry(
        long_sequence_segments_restart,
        SEQUENCE_TWIN,
        "tail and length",
        "a separate long-sequence path",
        size_only=True,
    ),
    _entry(state_kept_across_unaligned_boundary, SEQUENCE_TWIN, "varlen", "chunk straddling"),
    _entry(empty_segments_dropped, SEQUENCE_TWIN, "varlen", "empty segments"),
    _entry(initial_state_ignored, CHUNK_TWIN, "state", "fla #285, #494"),
    _entry(final_state_gradient_misstrided, CHUNK_TWIN, "state", "dht wrong when K != V"),
    _entry(
        chunk_state_lost_in_race,
        SEQUENCE_TWIN,
        "state",
        "a race on the carried state",
        size_only=True,
    ),
    _entry(head_dim_rounded_down, CHUNK_TWIN, "shapes and layout", "lightning-attn #15"),
    _entry(
        key_tile_offset_not_advanced,
        CHUNK_TWIN,
        "shapes and layout",
        "a K loop in 64-wide tiles",
        size_only=True,
    ),
    _entry(head_first_layout_assumed, CHUNK_TWIN, "shapes and layout", "fla #547"),
    _entry(contiguity_assumed, CHUNK_TWIN, "shapes and layout", "strided inputs"),
    _convention_entry(
        last_dim_stride_ignored, CHUNK_TWIN, "shapes and layout", "a strided last dim"
    ),
    _convention_entry(
        dense_cotangent_assumed, CHUNK_TWIN, "shapes and layout", "o.sum().backward()"
    ),
    _entry(dv_uses_default_scale, CHUNK_TWIN, "scale", "fla #47"),
    _convention_entry(scale_default_from_values, CHUNK_TWIN, "scale", "fla PR #130"),
    _entry(
        wrong_under_compile,
        CHUNK_TWIN,
        "compile and device",
        "fla #52",
        ("compiled_matches_eager",),
    ),
    _entry(scales_q_in_place, CHUNK_TWIN, "contract", "inputs modified in place"),
    _entry(returns_float32, CHUNK_TWIN, "contract", "output dtype changed"),
    _entry(nondeterministic, CHUNK_TWIN, "contract", "nondeterministic reduction"),
    _entry(uninitialised_state, CHUNK_TWIN, "contract", "uninitialised memory"),
    _entry(naive_reference_ignores_scale, RECURRENT_TWIN, "reference", "naive reference, #850"),
)
"""Every zoo kernel with its twin, in the order of docs/bug-classes.md."""


def twins_of(zoo: tuple[ZooEntry, ...]) -> tuple[tuple[Kernel, tuple[str, ...]], ...]:
    """Each distinct twin of ``zoo`` once, with every extra property its broken kernels add."""
    extras: dict[int, tuple[Kernel, set[str]]] = {}
    for e in zoo:
        extras.setdefault(id(e.twin), (e.twin, set()))[1].update(e.extra)
    return tuple((twin, tuple(sorted(extra))) for twin, extra in extras.values())
