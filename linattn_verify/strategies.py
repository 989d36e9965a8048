# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Hypothesis strategies that generate linear-attention problems.

Shapes, dtypes, options and value *families* are drawn by Hypothesis (so failures shrink to
small shapes and simple families); the tensor values themselves come from a seeded torch
generator, whose seed is drawn too, so every example is reproducible from its printed case.

By default a strategy generates anything the function allows; exclusions are documented on the
strategy that makes them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, get_args

import torch
from hypothesis import strategies as st

from linattn_verify.errors import InvalidArgument
from linattn_verify.kernel import Kernel
from linattn_verify.semantics import Problem, validate_problem
from linattn_verify.typing import FeatureMap

VALUE_FAMILIES = (
    "normal",
    "uniform",
    "heavy_tailed",
    "large",
    "tiny",
    "duplicated_keys",
    "rank_deficient_keys",
    "zero_rows",
    "underflowing_features",
)
"""Families of q/k/v values (DESIGN.md §9). ``underflowing_features`` puts q, k near -100 so
that elu1 features underflow; ``large`` uses magnitudes around 1e3; ``tiny`` around 1e-20."""

DECAY_FAMILIES = ("none", "zero", "mild", "steep", "overflowing")
"""Families of log-decays g: no decay, g = 0 exactly, g in (-0.1, 0], steep g down to -20, and
g chosen so that |G| exceeds 88 inside a block of 16 tokens."""

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class ProblemSpec:
    """Everything needed to rebuild a problem: printable, so a failure names its case."""

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

    def build(self, device: str | torch.device = "cpu") -> Problem:
        """Generate the tensors and validate the problem."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = DTYPES[self.dtype]
        B, T, H, K, V = self.B, self.T, self.H, self.K, self.V
        q = _values(self.values, (B, T, H, K), gen, role="q")
        k = _values(self.values, (B, T, H, K), gen, role="k")
        v = _values(
            "normal" if self.values == "underflowing_features" else self.values,
            (B, T, H, V),
            gen,
            role="v",
        )
        g = _decay(self.decay, (B, T, H), gen)
        N = B if self.segments is None else len(self.segments)
        h0: Any = None
        if self.initial_state:
            S0 = torch.randn(N, H, K, V, generator=gen)
            h0 = (S0, torch.rand(N, H, K, generator=gen)) if self.normalize else S0
        cu = None
        if self.segments is not None:
            cu = torch.tensor([0, *torch.tensor(self.segments).cumsum(0).tolist()])
        return validate_problem(
            q.to(dtype).to(device),
            k.to(dtype).to(device),
            v.to(dtype).to(device),
            None if g is None else g.to(device),
            scale=self.scale,
            normalize=self.normalize,
            eps=self.eps,
            feature_map=self.feature_map,
            initial_state=_to(h0, device),
            output_final_state=self.output_final_state,
            cu_seqlens=cu,
        )

    def describe(self) -> str:
        """One line: the spec's fields."""
        return repr(self)


def kernel_specs(
    kernel: Kernel,
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 48,
    max_head_dim: int = 12,
    values: tuple[str, ...] = VALUE_FAMILIES,
    decays: tuple[str, ...] = DECAY_FAMILIES,
) -> st.SearchStrategy[ProblemSpec]:
    """Generate `ProblemSpec` for cases ``kernel`` declares it supports (and only those).

    Args:
        kernel: The kernel under test; its `Capabilities` filter every draw.
        min_seq_len: Shortest T. Default: `1`.
        max_seq_len: Longest T. Default: `48`.
        max_head_dim: Largest K and V (capped by the kernel's limit). Default: `12`.
        values: Value families to draw from. Default: every family.
        decays: Decay families to draw from (only ``"none"`` without decay support). Default: all.
    """
    cap = kernel.capabilities
    dtypes = tuple(d for d in cap.dtypes if d in DTYPES)
    if not dtypes:
        raise InvalidArgument(f"Kernel {kernel.name} takes none of the dtypes {tuple(DTYPES)}.")
    return problem_specs(
        min_seq_len=min_seq_len,
        max_seq_len=max_seq_len,
        min_head_dim=cap.min_head_dim,
        max_head_dim=max(cap.min_head_dim, min(max_head_dim, cap.max_head_dim)),
        dtypes=dtypes,
        feature_maps=cap.feature_maps,
        values=values,
        decays=decays if cap.decay else ("none",),
        normalize=cap.normalize,
        varlen=cap.varlen,
        eps_values=(0.0, 1e-6, 1e-2) if cap.configurable else (cap.eps,),
        initial_state=(False, True) if cap.initial_state else (False,),
        final_state=(False, True) if cap.final_state else (False,),
    )


def random_cotangents(problem: Problem, seed: int) -> tuple[torch.Tensor, Any]:
    """Draw normal cotangents for a problem's output and final state.

    Returns:
        ``(do, d_final_state)``: do ``[B, T, H, V]`` in the input dtype; dS_T ``[N, H, K, V]``
        (fp32), or the pair ``(dS_T, dz_T)`` for normalized problems.
    """
    gen = torch.Generator().manual_seed(seed)
    _, _, H, K, V = problem.shape
    N = problem.num_sequences
    do = torch.randn(problem.v.shape, generator=gen).to(problem.q.dtype)
    dS = torch.randn(N, H, K, V, generator=gen)
    if problem.normalize:
        return do, (dS, torch.randn(N, H, K, generator=gen))
    return do, dS


def _to(state: Any, device: str | torch.device) -> Any:
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.to(device) for s in state)
    return state.to(device)


def _values(family: str, shape: tuple[int, ...], gen: torch.Generator, role: str) -> torch.Tensor:
    x = torch.randn(shape, generator=gen)
    if family == "uniform":
        return torch.rand(shape, generator=gen) * 2 - 1
    if family == "heavy_tailed":
        # A normal over a power of a uniform has polynomial tails (|x| > y with probability
        # ~ y^-1.5); clamping the uniform keeps fp16 products finite.
        u = torch.rand(shape, generator=gen).clamp(min=1e-3)
        return x / u**0.66
    if family == "large":
        return x * 1e3
    if family == "tiny":
        return x * 1e-20
    if family == "duplicated_keys" and role == "k":
        return x[:, :1].expand_as(x).clone()
    if family == "rank_deficient_keys" and role == "k" and shape[-1] > 1:
        basis = torch.randn(*shape[:-1], 1, generator=gen)
        return basis * torch.randn(shape[-1], generator=gen)
    if family == "zero_rows":
        keep = torch.rand(shape[:-1], generator=gen) > 0.3
        return x * keep[..., None]
    if family == "underflowing_features" and role in ("q", "k"):
        return x - 100.0
    return x


def _decay(family: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor | None:
    if family == "none":
        return None
    if family == "zero":
        return torch.zeros(shape)
    if family == "mild":
        return -0.1 * torch.rand(shape, generator=gen)
    if family == "steep":
        return -20.0 * torch.rand(shape, generator=gen)
    # |G| > 88 within 16 tokens: every step at least -5.6.
    return -5.6 - 2 * torch.rand(shape, generator=gen)


def _check_range(name: str, lo: int, hi: int) -> None:
    if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or hi < lo:
        raise InvalidArgument(
            f"Got min_{name}={lo!r}, max_{name}={hi!r}, but they must be ints with 1 <= min <= max."
        )


@st.composite
def _segments(draw: st.DrawFn, T: int) -> tuple[int, ...]:
    """Split T into 1..4 segments; empty and length-1 segments are allowed."""
    cuts = sorted(draw(st.lists(st.integers(0, T), min_size=0, max_size=3)))
    bounds = [0, *cuts, T]
    return tuple(b - a for a, b in itertools.pairwise(bounds))


@st.composite
def problem_specs(
    draw: st.DrawFn,
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 48,
    max_head_dim: int = 12,
    dtypes: tuple[str, ...] = tuple(DTYPES),
    feature_maps: tuple[FeatureMap, ...] = get_args(FeatureMap),
    values: tuple[str, ...] = VALUE_FAMILIES,
    decays: tuple[str, ...] = DECAY_FAMILIES,
    normalize: tuple[bool, ...] = (False, True),
    varlen: bool = True,
    eps_values: tuple[float, ...] = (0.0, 1e-6, 1e-2),
    initial_state: tuple[bool, ...] = (False, True),
    final_state: tuple[bool, ...] = (False, True),
    min_head_dim: int = 1,
) -> ProblemSpec:
    """Generate `ProblemSpec`: any shape, dtype, option and value family within the limits.

    Excluded: ``underflowing_features`` is drawn only with ``elu1`` (with identity or relu it is
    merely a large negative offset), and ``large`` values only with float32 and bfloat16 inputs
    (fp16 outputs would overflow: a range failure, not a rounding one).
    """
    _check_range("seq_len", min_seq_len, max_seq_len)
    _check_range("head_dim", min_head_dim, max_head_dim)
    T = draw(st.integers(min_seq_len, max_seq_len), label="T")
    fmap = draw(st.sampled_from(feature_maps), label="feature_map")
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    families = [f for f in values if f != "underflowing_features" or fmap == "elu1"]
    families = [f for f in families if f != "large" or dtype != "float16"] or ["normal"]
    use_varlen = varlen and draw(st.booleans(), label="varlen")
    is_normalized = draw(st.sampled_from(normalize), label="normalize")
    return ProblemSpec(
        B=1 if use_varlen else draw(st.integers(1, 2), label="B"),
        T=T,
        H=draw(st.integers(1, 2), label="H"),
        K=draw(st.integers(min_head_dim, max_head_dim), label="K"),
        V=draw(st.integers(min_head_dim, max_head_dim), label="V"),
        dtype=dtype,
        feature_map=fmap,
        normalize=is_normalized,
        eps=draw(st.sampled_from(eps_values), label="eps") if is_normalized else 0.0,
        scale=draw(st.sampled_from([None, 0.3, 2.0]), label="scale"),
        values=draw(st.sampled_from(families), label="values"),
        decay=draw(st.sampled_from(decays), label="decay"),
        initial_state=draw(st.sampled_from(initial_state), label="initial_state"),
        output_final_state=draw(st.sampled_from(final_state), label="output_final_state"),
        segments=draw(_segments(T), label="segments") if use_varlen else None,
        seed=draw(st.integers(0, 2**31 - 1), label="seed"),
    )


__all__ = [
    "DECAY_FAMILIES",
    "VALUE_FAMILIES",
    "ProblemSpec",
    "kernel_specs",
    "problem_specs",
    "random_cotangents",
]
