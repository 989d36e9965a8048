# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`ProblemSpec`, the printable case, and the strategies that draw whole cases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

import torch
from hypothesis import strategies as st

from linattn_verify.core.sizes import (
    DEFAULT_MODULI,
    FIXED_SCALES,
    batch_sizes,
    check_choices,
    check_int,
    check_int_range,
    declared_scales,
    head_counts,
    head_dims,
    seq_lens,
    seq_packings,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.feature_maps import feature_dim
from linattn_verify.linear_attn.semantics import OMITTABLE, Problem, validate_problem
from linattn_verify.linear_attn.strategies._lifted import (
    FAMILY_MAPS,
    PROJECTIONS,
    joint_values,
    largest_key_dim,
    projection_values,
)
from linattn_verify.linear_attn.strategies._tensors import (
    DECAY_FAMILIES,
    DTYPES,
    LAYOUTS,
    LOW_PRECISION_DTYPES,
    VALUE_FAMILIES,
    VECTOR_DECAY_FAMILIES,
    decay_values,
    family_values,
    float_dtypes,
    lay_out,
    near_max_magnitude,
    value_families,
)
from linattn_verify.linear_attn.strategies._tensors import layouts as layout_names
from linattn_verify.typing import GATES, KEEPS_K, LIFTED_MAPS, FeatureMap, Gate


@dataclass(frozen=True)
class ProblemSpec:
    """Everything needed to rebuild a problem: printable, so a failure names its case.

    The fields mirror `linattn_verify.linear_attn.semantics.validate_problem`'s arguments, plus the
    value and decay families, the varlen ``segments`` (lengths, or `None`), the generator ``seed``
    and the memory ``layout`` of q, k, v and g (see `LAYOUTS`), ``omit``: the arguments (of
    `linattn_verify.linear_attn.semantics.OMITTABLE`, in that order) the kernel call leaves out
    where they are at their default, so the kernel's own defaults are exercised (`Problem.omit`;
    empty: every argument passed explicitly), and the ``gate`` shape (``"scalar"``: g ``[B, T, H]``
    from `DECAY_FAMILIES`; ``"vector"``: g ``[B, T, H, K]`` from `VECTOR_DECAY_FAMILIES`, never with
    decay ``"none"``), and the value gate gv ``[B, T, H, V]``'s family (``value_gate``, of
    `VECTOR_DECAY_FAMILIES`; ``"none"``: no gv). Its ``repr`` is valid Python.
    """

    B: int
    T: int
    H: int
    K: int
    V: int
    dtype: str
    feature_map: FeatureMap
    normalize: bool
    eps: float
    scale: float | None
    values: str
    decay: str
    initial_state: bool
    output_final_state: bool
    segments: tuple[int, ...] | None
    seed: int
    layout: str = "contiguous"
    omit: tuple[str, ...] = ()
    gate: Gate = "scalar"
    projection: str | None = None
    features: int = 0
    query_feature_map: FeatureMap | None = None
    value_gate: str = "none"

    family = "linear_attn"

    def __post_init__(self) -> None:
        for name in ("B", "T", "H", "K", "V"):
            if check_int(name, getattr(self, name)) < 1:
                raise InvalidArgument(f"Got {name}={getattr(self, name)!r}, but it must be >= 1.")
        check_int("seed", self.seed)
        for name, allowed in (
            ("dtype", tuple(DTYPES)),
            ("feature_map", get_args(FeatureMap)),
            ("values", VALUE_FAMILIES),
            ("gate", GATES),
            ("decay", VECTOR_DECAY_FAMILIES if self.gate == "vector" else DECAY_FAMILIES),
            ("layout", LAYOUTS),
            ("value_gate", VECTOR_DECAY_FAMILIES),
        ):
            if getattr(self, name) not in allowed:
                raise InvalidArgument(
                    f"Got {name}={getattr(self, name)!r}, but {name} must be one of {allowed}."
                )
        favor = self.feature_map == "favor+"
        if favor != (self.projection in PROJECTIONS) or favor != (self.features >= 1):
            raise InvalidArgument(
                f"Got feature_map={self.feature_map!r} with projection={self.projection!r}, "
                f"features={self.features!r}: favor+ needs a projection of {PROJECTIONS} and "
                "features >= 1; every other map has projection=None and features=0."
            )
        if self.gate == "vector" and self.decay == "none":
            raise InvalidArgument(
                "Got gate='vector' with decay='none'; a problem without decay has gate='scalar'."
            )
        if self.query_feature_map is not None and self.query_feature_map not in KEEPS_K:
            raise InvalidArgument(
                f"Got query_feature_map={self.query_feature_map!r}; it must be None or one of "
                f"{KEEPS_K}."
            )
        if not isinstance(self.omit, tuple) or self.omit != tuple(
            n for n in OMITTABLE if n in self.omit
        ):
            raise InvalidArgument(
                f"Got omit={self.omit!r}, but omit must be a tuple of distinct names from "
                f"{OMITTABLE}, in that order."
            )

    def build(self, device: str | torch.device = "cpu") -> Problem:
        """Generate the tensors (on ``device``, in ``layout``) and validate the problem."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = DTYPES[self.dtype]
        B, T, H, K, V = self.B, self.T, self.H, self.K, self.V
        big = near_max_magnitude(dtype, T, K, V, self.scale)
        q = family_values(self.values, "q", (B, T, H, K), gen, near_max=big)
        k = family_values(self.values, "k", (B, T, H, K), gen, near_max=big)
        v_family = "normal" if self.values == "underflowing_features" else self.values
        v = family_values(v_family, "v", (B, T, H, V), gen, near_max=big)
        g = decay_values(self.decay, (B, T, H, K) if self.gate == "vector" else (B, T, H), gen)
        N = B if self.segments is None else len(self.segments)
        F = feature_dim(self.feature_map, K, self.features)
        h0: Any = None
        if self.initial_state:
            S0 = torch.randn(N, H, F, V, generator=gen)
            h0 = (S0, torch.rand(N, H, F, generator=gen)) if self.normalize else S0
        cu = None
        if self.segments is not None:
            cu = torch.tensor([0, *torch.tensor(self.segments, dtype=torch.int64).cumsum(0)])
        # Drawn after everything else, so the draws of the other maps' cases do not move.
        W = None
        if self.projection is not None:
            W = projection_values(self.projection, self.features, K, gen).to(device)
        scale = K**-0.5 if self.scale is None else self.scale
        q, k = joint_values(self.values, self.feature_map, q, k, scale, gen)
        gv = decay_values(self.value_gate, (B, T, H, V), gen)  # last: the rest stays put

        def place(x: torch.Tensor) -> torch.Tensor:
            # Values are fixed before the layout is applied: layouts change strides only.
            return lay_out(x.to(device), self.layout)

        problem = validate_problem(
            place(q.to(dtype)),
            place(k.to(dtype)),
            place(v.to(dtype)),
            None if g is None else place(g),
            scale=self.scale,
            normalize=self.normalize,
            eps=self.eps,
            feature_map=self.feature_map,
            initial_state=_to(h0, device),
            output_final_state=self.output_final_state,
            cu_seqlens=cu,
            feature_weights=W,
            query_feature_map=self.query_feature_map,
            gv=None if gv is None else place(gv),
        )
        return replace(problem, omit=frozenset(self.omit))

    def describe(self) -> str:
        """One line: the spec's fields."""
        return repr(self)

    def repro(self) -> str:
        """Return a one-line Python snippet that rebuilds this case as ``problem``."""
        spec = "from linattn_verify.linear_attn.strategies import ProblemSpec"
        return f"{spec}; problem = {self!r}.build()"


def _to(state: Any, device: str | torch.device) -> Any:
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.to(device) for s in state)
    return state.to(device)


def _check_flags(name: str, values: Any) -> tuple[bool, ...]:
    return check_choices(name, values, (False, True))


def problem_specs(
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 48,
    max_head_dim: int = 12,
    dtypes: Sequence[str] = LOW_PRECISION_DTYPES,
    feature_maps: Sequence[FeatureMap] = get_args(FeatureMap),
    values: Sequence[str] = VALUE_FAMILIES,
    decays: Sequence[str] = VECTOR_DECAY_FAMILIES,
    gates: Sequence[Gate] = GATES,
    normalize: Sequence[bool] = (False, True),
    varlen: bool = True,
    eps_values: Sequence[float] = (0.0, 1e-6, 1e-2),
    initial_state: Sequence[bool] = (False, True),
    final_state: Sequence[bool] = (False, True),
    min_head_dim: int = 1,
    layouts: Sequence[str] = LAYOUTS,
    chunk_sizes: Sequence[int] = DEFAULT_MODULI,
    max_batch_size: int = 2,
    max_heads: int = 2,
    even_head_dims: Sequence[str] = (),
    omittable: Sequence[str] = OMITTABLE,
    max_feature_dim: int = 16,
    fixed_scales: Sequence[str] = (),
    heads_within_seq_len: bool = False,
    query_feature_map: FeatureMap | None = None,
    seq_len_multiple: int = 1,
) -> st.SearchStrategy[ProblemSpec]:
    """Generate `ProblemSpec`: any shape, dtype, option, layout and value family within limits.

    T comes from `seq_lens` (T = 1, primes, every residue mod 16/32/64 and ``chunk_sizes``), K
    and V independently from `head_dims` (so K != V and non-powers of two are common), the scale
    from `scales`, varlen packings from `seq_packings` (empty and length-1 segments).

    The calling style (``omit``) is drawn last, so the case's own draws do not depend on it: a
    drawn flag either passes every argument explicitly (``omit=()``, half the cases) or leaves
    out each argument of ``omittable`` that is at its default with probability 3/4. The scale
    is `None` in a third of the cases, so about one case in eight calls the kernel without
    ``scale``. ``omit`` shrinks toward every argument explicit; a failure that needs an
    omission shrinks to the omissions it needs.

    Excluded, by construction: ``underflowing_features`` is drawn only with ``elu1`` (with
    identity or relu it is merely a large negative offset); ``large`` values only with dtypes
    other than float16 (fp16 outputs would overflow: a range failure, not a rounding one);
    B = 1 whenever ``cu_seqlens`` is drawn (the function requires it); eps = 0 for
    unnormalized cases (eps only applies to the normalizer); scales <= 0. A lifted map
    (`linattn_verify.linear_attn.feature_maps`) draws K so that its feature dimension F stays within
    ``max_feature_dim``, never a vector gate, and never ``underflowing_features`` or
    ``near_max`` (both calibrated for elementwise maps); ``score_cancellation`` and
    ``large_norm`` are drawn only with the maps they stress (`_lifted.FAMILY_MAPS`). favor+
    draws its W: ``gaussian`` or ``orthogonal``, m from 1-4 or 5 up to ``max_feature_dim``.

    Args:
        min_seq_len: Shortest T. Default: `1`.
        max_seq_len: Longest T. Default: `48`.
        max_head_dim: Largest K and V. Default: `12`.
        dtypes: Input dtype names. Default: `("float32", "float16", "bfloat16")`.
        feature_maps: Feature maps. Default: all.
        values: Value families. Default: all (`VALUE_FAMILIES`).
        decays: Decay families (of `VECTOR_DECAY_FAMILIES`; a scalar gate draws those of
            `DECAY_FAMILIES` among them). Default: all.
        gates: Gate shapes to draw where the decay is not ``"none"`` (`GATES`). Default: both.
        normalize: Output semantics to draw. Default: `(False, True)`.
        varlen: Whether packed sequences may be drawn. Default: `True`.
        eps_values: eps values for normalized cases. Default: `(0.0, 1e-6, 1e-2)`.
        initial_state: Whether an initial state is given. Default: `(False, True)`.
        final_state: Whether the final state is requested. Default: `(False, True)`.
        min_head_dim: Smallest K and V. Default: `1`.
        layouts: Memory layouts (`LAYOUTS`). Default: all.
        chunk_sizes: Chunk sizes whose residues T should cover. Default: `(16, 32, 64)`.
        max_batch_size: Largest B. Default: `2`.
        max_heads: Largest H. Default: `2`.
        even_head_dims: Dtypes in which K and V are drawn even. Default: `()`.
        omittable: Arguments the calling style may leave out at their default (of
            `linattn_verify.linear_attn.semantics.OMITTABLE`); `()` passes every argument
            explicitly. Default: all.
        max_feature_dim: Largest feature dimension F of a lifted map (its state's rows; F = m
            for favor+, 1 + K + K² for taylor2, K² for rebased). Default: `16` (taylor2 up to
            K = 3, rebased K = 4, favor+ m = 16: the interpreter's cost grows with F; `check`'s
            size reach goes to 64).
        fixed_scales: Draw only these scales (`linattn_verify.core.sizes.FIXED_SCALES`: ``default``
            is `None` or K^-1/2, ``one`` is 1), or `()` for any (`scales`). Default: `()`.
        heads_within_seq_len: Draw H <= T (a kernel that refuses T < H). Default: `False`.
        query_feature_map: The queries' own map (one of `KEEPS_K`), or `None`: each case's
            ``feature_map`` on both sides. With one, only maps of `KEEPS_K` are drawn for the
            keys. Default: `None`.
        seq_len_multiple: Round every drawn T up to a multiple of this (no packed sequences
            then: their lengths would not be). Default: `1`.

    Raises:
        InvalidArgument: naming the first malformed argument.
    """
    check_int_range("seq_len", min_seq_len, max_seq_len, lowest=1)
    even_head_dims = check_choices("even_head_dims", even_head_dims, tuple(DTYPES), empty=True)
    if even_head_dims and max_head_dim < 2 * -(-min_head_dim // 2):
        raise InvalidArgument(
            f"Got even_head_dims={even_head_dims!r}, but [{min_head_dim}, {max_head_dim}] holds "
            "no even head dim."
        )
    check_int_range("head_dim", min_head_dim, max_head_dim, lowest=1)
    check_int_range("batch_size", 1, max_batch_size, lowest=1)
    check_int_range("heads", 1, max_heads, lowest=1)
    check_int_range("feature_dim", 1, max_feature_dim, lowest=1)
    fixed_scales = check_choices("fixed_scales", fixed_scales, tuple(FIXED_SCALES), empty=True)
    dtypes = check_choices("dtypes", dtypes, tuple(DTYPES))
    feature_maps = check_choices("feature_maps", feature_maps, get_args(FeatureMap))
    values = check_choices("values", values, VALUE_FAMILIES)
    decays = check_choices("decays", decays, VECTOR_DECAY_FAMILIES)
    gates = check_choices("gates", gates, GATES)
    scalar_decays = tuple(
        d for d in decays if d == "none" or (d in DECAY_FAMILIES and "scalar" in gates)
    )
    vector_decays = tuple(d for d in decays if d != "none") if "vector" in gates else ()
    if not scalar_decays and not vector_decays:
        raise InvalidArgument(
            f"Got decays={decays!r} with gates={gates!r}: no decay family fits a gate shape "
            f"(a scalar gate takes {DECAY_FAMILIES})."
        )
    layouts = check_choices("layouts", layouts, LAYOUTS)
    omittable = check_choices("omittable", omittable, OMITTABLE, empty=True)
    normalize = _check_flags("normalize", normalize)
    initial_state = _check_flags("initial_state", initial_state)
    final_state = _check_flags("final_state", final_state)
    if not isinstance(varlen, bool):
        raise InvalidArgument(f"Expected a bool but got varlen={varlen!r}.")
    if isinstance(eps_values, str) or not isinstance(eps_values, Sequence) or not eps_values:
        raise InvalidArgument(f"Expected a non-empty sequence of floats but got {eps_values=}.")
    if any(isinstance(e, bool) or not isinstance(e, int | float) or not e >= 0 for e in eps_values):
        raise InvalidArgument(f"Got eps_values={tuple(eps_values)!r}, but each must be >= 0.")

    if isinstance(chunk_sizes, str) or not isinstance(chunk_sizes, Sequence):
        raise InvalidArgument(
            f"Expected chunk_sizes to be a sequence of ints but got {chunk_sizes!r}."
        )
    if not isinstance(heads_within_seq_len, bool):
        raise InvalidArgument(f"Expected a bool but got {heads_within_seq_len=}.")
    if check_int("seq_len_multiple", seq_len_multiple) < 1:
        raise InvalidArgument(f"Got {seq_len_multiple=}, but it must be >= 1.")
    if query_feature_map is not None:
        if query_feature_map not in KEEPS_K:
            raise InvalidArgument(
                f"Got query_feature_map={query_feature_map!r}; it must be one of {KEEPS_K}."
            )
        feature_maps = tuple(m for m in feature_maps if m in KEEPS_K)
        if not feature_maps:
            raise InvalidArgument(
                f"Got query_feature_map={query_feature_map!r}: the keys' maps must keep K "
                f"features too ({KEEPS_K})."
            )
    return _problem_specs(
        T=seq_lens(min_value=min_seq_len, max_value=max_seq_len, chunk_sizes=chunk_sizes),
        head_dim=head_dims(min_value=min_head_dim, max_value=max_head_dim),
        head_dim_range=(min_head_dim, max_head_dim),
        even_head_dims=even_head_dims,
        dtypes=dtypes,
        feature_maps=feature_maps,
        values=values,
        decays={"scalar": scalar_decays, "vector": vector_decays},
        normalize=normalize,
        varlen=varlen,
        eps_values=tuple(float(e) for e in eps_values),
        initial_state=initial_state,
        final_state=final_state,
        layouts=layouts,
        max_batch_size=max_batch_size,
        max_heads=max_heads,
        omittable=tuple(n for n in OMITTABLE if n in omittable),
        max_feature_dim=max_feature_dim,
        fixed_scales=fixed_scales,
        heads_within_seq_len=heads_within_seq_len,
        query_feature_map=query_feature_map,
        seq_len_multiple=seq_len_multiple,
    )


EXP_OVERFLOWING = ("large", "heavy_tailed", "near_max")
"""Value families the ``exp`` map is not drawn with (its features would overflow)."""


@st.composite
def _problem_specs(
    draw: st.DrawFn,
    *,
    T: st.SearchStrategy[int],
    head_dim: st.SearchStrategy[int],
    head_dim_range: tuple[int, int],
    even_head_dims: tuple[str, ...],
    dtypes: tuple[str, ...],
    feature_maps: tuple[FeatureMap, ...],
    values: tuple[str, ...],
    decays: dict[Gate, tuple[str, ...]],
    normalize: tuple[bool, ...],
    varlen: bool,
    eps_values: tuple[float, ...],
    initial_state: tuple[bool, ...],
    final_state: tuple[bool, ...],
    layouts: tuple[str, ...],
    max_batch_size: int,
    max_heads: int,
    omittable: tuple[str, ...],
    max_feature_dim: int,
    fixed_scales: tuple[str, ...],
    heads_within_seq_len: bool,
    query_feature_map: FeatureMap | None,
    seq_len_multiple: int,
) -> ProblemSpec:
    """Draw one spec from validated arguments (see `problem_specs`)."""
    seq_len = draw(T, label="T")
    if seq_len_multiple > 1:
        seq_len = seq_len_multiple * -(-seq_len // seq_len_multiple)
        varlen = False
    fmap = draw(st.sampled_from(feature_maps), label="feature_map")
    dtype = draw(float_dtypes(names=dtypes), label="dtype")
    qmap = None if query_feature_map in (None, fmap) else query_feature_map
    lifted = fmap in LIFTED_MAPS or qmap in LIFTED_MAPS
    families = [f for f in values if f != "underflowing_features" or fmap == "elu1"]
    families = [f for f in families if f != "large" or dtype != "float16"]
    families = [f for f in families if f not in FAMILY_MAPS or fmap in FAMILY_MAPS[f]]
    families = [f for f in families if not lifted or f != "near_max"] or ["normal"]
    if "exp" in (fmap, qmap):
        # e^x leaves fp16 past x = 11 and fp32 past 88: on large, heavy-tailed or near-max
        # values the features overflow, a range failure of the function, not a rounding one.
        families = [f for f in families if f not in EXP_OVERFLOWING] or ["normal"]
    use_varlen = varlen and draw(st.booleans(), label="varlen")
    is_normalized = draw(st.sampled_from(normalize), label="normalize")
    K, V = draw(head_dim, label="K"), draw(head_dim, label="V")
    if lifted and fmap != "favor+":
        K = max(head_dim_range[0], min(K, largest_key_dim(fmap, max_feature_dim)))
    if dtype in even_head_dims:
        K, V = _even(K, *head_dim_range), _even(V, *head_dim_range)
    # A lifted map takes no vector gate (semantics); without a scalar family it has no decay.
    gate_kinds = [kind for kind in GATES if decays[kind] and not (lifted and kind == "vector")]
    gate: Gate = draw(st.sampled_from(gate_kinds or ["scalar"]), label="gate")
    decay = draw(st.sampled_from(decays[gate] or ("none",)), label="decay")
    spec = ProblemSpec(
        B=1 if use_varlen else draw(batch_sizes(max_value=max_batch_size), label="B"),
        T=seq_len,
        H=draw(
            head_counts(max_value=min(max_heads, seq_len) if heads_within_seq_len else max_heads),
            label="H",
        ),
        K=K,
        V=V,
        dtype=dtype,
        feature_map=fmap,
        normalize=is_normalized,
        eps=draw(st.sampled_from(eps_values), label="eps") if is_normalized else 0.0,
        scale=draw(declared_scales(fixed_scales, K), label="scale"),
        values=draw(value_families(names=families), label="values"),
        decay=decay,
        initial_state=draw(st.sampled_from(initial_state), label="initial_state"),
        output_final_state=draw(st.sampled_from(final_state), label="output_final_state"),
        segments=draw(seq_packings(seq_len), label="segments") if use_varlen else None,
        seed=draw(st.integers(0, 2**31 - 1), label="seed"),
        gate=gate,
        layout=draw(layout_names(names=layouts), label="layout"),
        **_projection(draw, fmap, max_feature_dim),
        query_feature_map=qmap,
    )
    # The calling style, drawn last so that it cannot shift the draws of the case itself.
    defaults = _at_default(spec)
    candidates = [n for n in omittable if n in defaults]
    if not candidates or not draw(st.booleans(), label="omit defaults"):
        return spec
    # Each left out with probability 3/4; 0 (passed explicitly) is what it shrinks to.
    omit = tuple(n for n in candidates if draw(st.integers(0, 3), label=f"omit {n}"))
    return replace(spec, omit=omit)


def _projection(draw: st.DrawFn, feature_map: str, max_feature_dim: int) -> dict[str, Any]:
    """favor+'s projection kind and feature count m (small or large), else nothing."""
    if feature_map != "favor+":
        return {}
    small = st.integers(1, min(4, max_feature_dim))
    large = st.integers(min(5, max_feature_dim), max_feature_dim)
    return {
        "projection": draw(st.sampled_from(PROJECTIONS), label="projection"),
        "features": draw(st.one_of(small, large), label="features"),
    }


def _at_default(spec: ProblemSpec) -> frozenset[str]:
    """The arguments of ``spec``'s problem at their default (as `Problem.at_default`)."""
    defaults = {
        "g": spec.decay == "none",
        "scale": spec.scale is None or spec.scale == spec.K**-0.5,
        "normalize": not spec.normalize,
        "eps": spec.eps == 0.0,
        "feature_map": spec.feature_map == "identity",
        "initial_state": not spec.initial_state,
        "output_final_state": not spec.output_final_state,
        "cu_seqlens": spec.segments is None,
    }
    return frozenset(name for name, default in defaults.items() if default)


def _even(n: int, lowest: int, highest: int) -> int:
    """The even head dim next to ``n`` within [lowest, highest] (one exists: checked before)."""
    if n % 2 == 0:
        return n
    return n + 1 if n + 1 <= highest else n - 1 if n - 1 >= lowest else n


__all__ = ["ProblemSpec", "problem_specs"]
