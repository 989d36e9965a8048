# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`DeltaCase`, the delta family's printable case, and the strategies that draw it (issue #14).

Hypothesis draws the shape, the options and the *names* of the value families, simple and
realistic ones first (so failures shrink toward them); the tensors come from a torch generator
seeded by the case's ``seed``, drawn in float64 and rounded once to their dtype, so the kernel
and the oracle see the same values and a printed case rebuilds its problem exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from linattn_verify.core.sizes import (
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
from linattn_verify.delta.kernel import DELTA_GATES, UNIT_KEY_SLACK, DeltaGate, DeltaKernel
from linattn_verify.delta.problem import DELTA_OMITTABLE, DeltaProblem, validate_delta
from linattn_verify.errors import InvalidArgument
from linattn_verify.typing import DTYPE_NAMES, KERNEL_DTYPES, torch_dtype

KEY_FAMILIES = ("unit", "raw", "near_parallel", "repeated", "large_norm")
"""Keys, realistic first. ``unit``: random unit-norm keys, the contract of FLA's kernels (the
rounded keys keep ||k||² <= 1 + `UNIT_KEY_SLACK`). ``raw``: unnormalised Gaussian keys, only with
``l2norm_qk`` (the kernel normalises them: what models pass). ``near_parallel``: per batch row and
head, k_t = normalize(base + 1e-3·noise): the Gram matrix of a chunk is nearly all ones, so the
chunk form's triangular system L is ill-conditioned (at c = 64, K = 32: cond(L) ~ 40 against 4
for random keys, and |T||L||T| ~ 1e4 with beta near 2) and v_t - S'^T k_t cancels.
``repeated``: exactly repeated unit keys (two per row and head, in random order): rank-deficient
chunks, and beta = 1 erases what the same key wrote. ``large_norm``: out of contract only (see
`DeltaCase.out_of_contract`): unit keys with ||k||² in [1.25, 4] for a quarter of the tokens and
the first token of every row and head, the others unit."""

BETA_FAMILIES = ("sigmoid", "zero", "one", "uniform", "mixed", "near_two")
"""Write strengths. ``sigmoid``: sigmoid of N(0, 1) (2·sigmoid with negative eigenvalues, FLA's
``allow_neg_eigval``): what models produce. ``zero``: no write (the state only decays).
``one``: a full overwrite along k (A_t a projection). ``uniform``: uniform over the range.
``mixed``: exact 0, exact 1 and uniform values mixed, so branches and cancellations meet.
``near_two``: in [2 - 2^-10, 2) (the largest value below 2 in dtypes with no value there), the
edge of contraction: A_t's eigenvalue 1 - beta is near -1; needs ``negative_eigenvalues``."""

GATE_FAMILIES = ("logsigmoid", "zero", "mild", "some_zero", "steep")
"""Natural-log gates (every entry <= 0). ``logsigmoid``: logsigmoid(x) / c, x ~ N(0, 1), the
normalizer c log-uniform in [0.01, 10] (as models and FLA's tests do; c = 0.01 gives steps near
-400). ``zero``: g = 0 exactly (a gated kernel must reduce to DeltaNet). ``mild``: in [-0.05, 0]
(long memory: cumulative gates grow slowly across chunks). ``some_zero``: logsigmoid(x) with a
random share of entries exactly 0 (exp(0) = 1 paths inside a decaying sequence). ``steep``:
down to -20 (the whole memory forgotten in one token; exp of chunk-cumulative sums underflows)."""

VALUE_FAMILIES = ("unit", "tiny", "large")
"""Magnitude of q, v and the initial state (Gaussian times 1, 1e-3 or 1e2). ``tiny`` puts
||q||² near the L2-norm eps; ``large`` tests relative accuracy away from 1."""

REALISTIC = {"key": ("unit", "raw"), "beta": ("sigmoid",), "gate": ("logsigmoid",)}
"""What models produce: the families `delta_cases` keeps with ``realistic_only`` (and
``value_family="unit"``)."""

DTYPE_ORDER = ("float32", "bfloat16", "float16", "float64")
"""The order dtypes are drawn in (and shrink toward): float32 first, the simplest to judge."""

_MAGNITUDE = {"unit": 1.0, "tiny": 1e-3, "large": 1e2}
_F64 = torch.float64
_FLAG_FIELDS = (
    "l2norm_qk",
    "negative_eigenvalues",
    "initial_state",
    "output_final_state",
    "out_of_contract",
)
_Shape = tuple[int, ...]
_Gen = torch.Generator


@dataclass(frozen=True)
class DeltaCase:
    """Everything needed to rebuild a delta-rule problem: printable, ``eval``-able, replayable.

    Attributes:
        B, T, H, K, V: The shape (B = 1 with ``seq_lens``).
        dtype: Input dtype name of q, k, v and beta (g and the initial state are float32, as
            FLA takes them).
        gate: ``"none"``, ``"scalar"`` (g ``[B, T, H]``) or ``"vector"`` (``[B, T, H, K]``).
        gate_family: Of `GATE_FAMILIES`; ``"none"`` exactly when ``gate == "none"``.
        beta_family: Of `BETA_FAMILIES`.
        key_family: Of `KEY_FAMILIES`.
        value_family: Of `VALUE_FAMILIES`.
        l2norm_qk: FLA's ``use_qk_l2norm_in_kernel``.
        negative_eigenvalues: beta may reach [1, 2).
        initial_state: Whether S_0 is given.
        output_final_state: Whether S_T is returned.
        seq_lens: Packed sequence lengths (summing to T; empty ones allowed), or `None`.
        scale: The scale, or `None` (K^-1/2).
        seed: The generator seed.
        out_of_contract: Keys break the unit-norm contract (``key_family="large_norm"``, without
            ``l2norm_qk``): for judging that a kernel expecting unit keys stays finite.
            Default: `False`.
        omit: The keywords (of `DELTA_OMITTABLE`, in its order) the call leaves out where they
            are at their default, so the kernel's own defaults are exercised
            (`DeltaProblem.omit`). Default: `()` (every keyword passed).
        value_gate: The value gate gv's family (of `GATE_FAMILIES`), or ``"none"``: no gv.
            Default: `"none"`.
    """

    B: int
    T: int
    H: int
    K: int
    V: int
    dtype: str
    gate: DeltaGate
    gate_family: str
    beta_family: str
    key_family: str
    value_family: str
    l2norm_qk: bool
    negative_eigenvalues: bool
    initial_state: bool
    output_final_state: bool
    seq_lens: tuple[int, ...] | None
    scale: float | None
    seed: int
    out_of_contract: bool = False
    omit: tuple[str, ...] = ()
    value_gate: str = "none"

    family = "delta"

    def __post_init__(self) -> None:
        for name in ("B", "T", "H", "K", "V"):
            if check_int(name, getattr(self, name)) < 1:
                raise InvalidArgument(f"Got {name}={getattr(self, name)!r}, but it must be >= 1.")
        check_int("seed", self.seed)
        if not isinstance(self.omit, tuple) or self.omit != tuple(
            n for n in DELTA_OMITTABLE if n in self.omit
        ):
            raise InvalidArgument(
                f"Got omit={self.omit!r}, but omit must be a tuple of distinct names from "
                f"{DELTA_OMITTABLE}, in that order."
            )
        gate_families = ("none",) if self.gate == "none" else GATE_FAMILIES
        for name, allowed in (
            ("dtype", DTYPE_NAMES),
            ("gate", DELTA_GATES),
            ("gate_family", gate_families),
            ("beta_family", BETA_FAMILIES),
            ("key_family", KEY_FAMILIES),
            ("value_family", VALUE_FAMILIES),
            ("value_gate", ("none", *GATE_FAMILIES)),
        ):
            if getattr(self, name) not in allowed:
                raise InvalidArgument(
                    f"Got {name}={getattr(self, name)!r}, but {name} must be one of {allowed}."
                )
        for name in _FLAG_FIELDS:
            _check_bool(name, getattr(self, name))
        ooc, lens, scale = self.out_of_contract, self.seq_lens, self.scale
        if self.key_family == "raw" and not self.l2norm_qk:
            raise InvalidArgument("Got key_family='raw', which needs l2norm_qk=True.")
        if (self.key_family == "large_norm") != ooc or (ooc and self.l2norm_qk):
            raise InvalidArgument(
                f"Got key_family={self.key_family!r}, out_of_contract={ooc}, l2norm_qk="
                f"{self.l2norm_qk}: 'large_norm' goes with out_of_contract=True, l2norm_qk=False."
            )
        if self.beta_family == "near_two" and not self.negative_eigenvalues:
            raise InvalidArgument("Got beta_family='near_two' without negative_eigenvalues=True.")
        if scale is not None and (type(scale) not in (int, float) or not math.isfinite(scale)):
            raise InvalidArgument(f"Expected a finite float or None but got scale={scale!r}.")
        if lens is not None and not (
            isinstance(lens, tuple)
            and all(type(n) is int and n >= 0 for n in lens)
            and (len(lens) > 0, sum(lens), self.B) == (True, self.T, 1)
        ):
            raise InvalidArgument(
                f"Got seq_lens={lens!r} with B={self.B}, T={self.T}, but seq_lens must be a "
                "non-empty tuple of ints >= 0 summing to T, with B == 1."
            )

    def build(self, device: str | torch.device = "cpu") -> DeltaProblem:
        """Generate the tensors (float64 draws, rounded once) and validate the problem."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = torch_dtype(self.dtype)
        B, T, H, K, V = self.B, self.T, self.H, self.K, self.V
        mag = _MAGNITUDE[self.value_family]
        # A fixed order of draws: keys, q, v, beta, g, S_0.
        t: dict[str, torch.Tensor | None] = {"k": _keys(self.key_family, (B, T, H, K), dtype, gen)}
        t["q"] = (torch.randn(B, T, H, K, generator=gen, dtype=_F64) * mag).to(dtype)
        t["v"] = (torch.randn(B, T, H, V, generator=gen, dtype=_F64) * mag).to(dtype)
        t["beta"] = _betas(self.beta_family, (B, T, H), self.negative_eigenvalues, dtype, gen)
        g_shape = (B, T, H, K) if self.gate == "vector" else (B, T, H)
        t["g"] = None if self.gate == "none" else _gates(self.gate_family, g_shape, gen)
        N = B if self.seq_lens is None else len(self.seq_lens)
        t["initial_state"] = None
        if self.initial_state:
            # float32, as FLA keeps the state.
            S0 = torch.randn(N, H, K, V, generator=gen, dtype=_F64) * mag
            t["initial_state"] = S0.float()
        cu = None
        if self.seq_lens is not None:
            cu = torch.tensor([0, *self.seq_lens], dtype=torch.int64).cumsum(0)
        # Drawn last, so the draws of a case without a value gate do not move.
        if self.value_gate != "none":
            t["gv"] = _gates(self.value_gate, (B, T, H, V), gen)
        on = {name: None if x is None else x.to(device) for name, x in t.items()}
        problem = validate_delta(
            **on,
            scale=self.scale,
            l2norm_qk=self.l2norm_qk,
            output_final_state=self.output_final_state,
            cu_seqlens=cu,
            allow_negative_eigenvalues=self.negative_eigenvalues,
        )
        return replace(problem, omit=frozenset(self.omit))

    def describe(self) -> str:
        """One line, ``DeltaCase(B=..., ...)``: valid Python that rebuilds the case."""
        return repr(self)

    def repro(self) -> str:
        """Return a one-line Python snippet that rebuilds this case as ``problem``."""
        return f"from linattn_verify.delta.strategies import DeltaCase; problem = {self!r}.build()"


def _unit_rows(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Normalise float64 rows and round them to ``dtype`` with ||k||² <= 1 + `UNIT_KEY_SLACK`.

    A row whose rounded squared norm passes that is shrunk by (1 - 2^-7) and rounded again
    (one step suffices for fp16 and bf16).
    """
    unit: torch.Tensor = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    rounded = unit.to(dtype)
    for _ in range(4):
        over = rounded.double().pow(2).sum(-1, keepdim=True) > 1 + UNIT_KEY_SLACK
        if not bool(over.any()):
            break
        unit = torch.where(over, unit * (1 - 2.0**-7), unit)
        rounded = unit.to(dtype)
    return rounded


def _keys(family: str, shape: _Shape, dtype: torch.dtype, gen: _Gen) -> torch.Tensor:
    B, T, H, K = shape
    x = torch.randn(shape, generator=gen, dtype=_F64)
    if family == "raw":
        return x.to(dtype)
    if family == "near_parallel":
        base = torch.randn(B, 1, H, K, generator=gen, dtype=_F64)
        base = base / base.norm(dim=-1, keepdim=True).clamp_min(1e-300)
        return _unit_rows(base + 1e-3 * x, dtype)
    if family == "repeated":
        pool = torch.randn(B, 2, H, K, generator=gen, dtype=_F64)
        pick = torch.randint(0, 2, (B, T, H, 1), generator=gen).expand(shape)
        return _unit_rows(torch.gather(pool, 1, pick), dtype)
    if family == "large_norm":
        norm2 = 1.25 + 2.75 * torch.rand(B, T, H, 1, generator=gen, dtype=_F64)
        chosen = torch.rand(B, T, H, 1, generator=gen) < 0.25
        chosen[:, 0] = True
        unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
        return torch.where(chosen, unit * norm2.sqrt(), unit).to(dtype)
    return _unit_rows(x, dtype)


def _betas(family: str, shape: _Shape, neg: bool, dtype: torch.dtype, gen: _Gen) -> torch.Tensor:
    top = 2.0 if neg else 1.0
    u, z = (f(shape, generator=gen, dtype=_F64) for f in (torch.rand, torch.randn))
    kind = torch.randint(0, 3, shape, generator=gen)
    # Every family computed (cheap), so that the draws are the same whatever the family.
    families: dict[str, torch.Tensor] = {
        "sigmoid": top * torch.sigmoid(z),
        "zero": torch.zeros_like(u),
        "one": torch.ones_like(u),
        "uniform": top * u,
        "mixed": torch.where(kind == 0, 0.0, torch.where(kind == 1, 1.0, top * u)),
        "near_two": 2.0 - 2.0**-10 * u,
    }
    beta = families[family].to(dtype)
    if neg:
        # Rounding may reach 2, which validation rejects: take the dtype's largest value below.
        below_two = torch.nextafter(torch.tensor(2.0, dtype=dtype), torch.tensor(0.0, dtype=dtype))
        beta = torch.where(beta >= 2, below_two, beta)
    return beta


def _gates(family: str, shape: _Shape, gen: _Gen) -> torch.Tensor:
    u, z = (f(shape, generator=gen, dtype=_F64) for f in (torch.rand, torch.randn))
    # c log-uniform in [0.01, 10]; the share of exact zeros uniform in [1/4, 3/4].
    r = torch.rand(2, generator=gen, dtype=_F64).tolist()
    c, share = 10.0 ** (-2.0 + 3.0 * r[0]), 0.25 + 0.5 * r[1]
    families: dict[str, torch.Tensor] = {
        "zero": torch.zeros_like(u),
        "mild": -0.05 * u,
        "steep": -20.0 * u,
        "logsigmoid": F.logsigmoid(z) / c,
        "some_zero": torch.where(u < share, 0.0, F.logsigmoid(z)),
    }
    # float32, as FLA takes g; rounding never makes an entry positive.
    return families[family].float()


def _flags(name: str, values: Any) -> tuple[bool, ...]:
    """The distinct bools of ``values``, False first (what shrinking heads for)."""
    values = check_choices(name, values, (False, True))
    if any(not isinstance(v, bool) for v in values):
        raise InvalidArgument(f"Expected {name} to hold bools but got {name}={values!r}.")
    return tuple(sorted(set(values)))


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"Expected a bool but got {name}={value!r}.")
    return value


def delta_cases(
    *,
    dtypes: Sequence[str] = KERNEL_DTYPES,
    gates: Sequence[DeltaGate] = DELTA_GATES,
    min_seq_len: int = 1,
    max_seq_len: int = 64,
    min_head_dim: int = 1,
    max_head_dim: int = 32,
    max_heads: int = 2,
    l2norm: Sequence[bool] = (False, True),
    negative_eigenvalues: Sequence[bool] = (False, True),
    initial_state: Sequence[bool] = (False, True),
    final_state: Sequence[bool] = (False, True),
    varlen: bool = True,
    out_of_contract: bool = False,
    realistic_only: bool = False,
    chunk_sizes: Sequence[int] = (16, 64),
    fixed_scales: Sequence[str] = (),
    omittable: Sequence[str] = DELTA_OMITTABLE,
    heads_within_seq_len: bool = False,
    value_gate: bool = False,
) -> st.SearchStrategy[DeltaCase]:
    """Generate `DeltaCase`: any shape, option and value family of the delta rule within limits.

    Drawn first (so shrinking simplifies them first): the gate shape, whether the case is out of
    contract, ``l2norm_qk``, ``negative_eigenvalues``, then the key, beta, gate and value
    families, realistic ones first. T comes from `seq_lens` (T = 1, primes, every residue mod 16,
    64 and ``chunk_sizes``, plain draws up to ``max_seq_len``), K and V independently from
    `head_dims`, varlen packings from `seq_packings` (empty sequences included), the scale from
    `scales` (or ``fixed_scales``).

    Excluded, by construction: ``raw`` keys without ``l2norm`` (they are out of contract);
    ``large`` values in float16 (outputs would overflow the format: a range failure, not a
    rounding one); ``near_two`` beta without negative eigenvalues; B > 2 and B > 1 with varlen;
    out-of-contract keys unless ``out_of_contract`` (then drawn in a quarter of the cases, without
    ``l2norm_qk``; never beta beyond its range, which validation rejects).

    Args:
        dtypes: Input dtype names. Default: `("float32", "float16", "bfloat16")`.
        gates: Gate shapes (`DELTA_GATES`). Default: all three.
        min_seq_len: Shortest T. Default: `1`.
        max_seq_len: Longest T. Default: `64`.
        min_head_dim: Smallest K and V. Default: `1`.
        max_head_dim: Largest K and V. Default: `32`.
        max_heads: Largest H. Default: `2`.
        l2norm: Values of ``l2norm_qk``. Default: `(False, True)`.
        negative_eigenvalues: Whether beta may reach [1, 2). Default: `(False, True)`.
        initial_state: Whether S_0 is given. Default: `(False, True)`.
        final_state: Whether S_T is asked for. Default: `(False, True)`.
        varlen: Whether packed sequences may be drawn. Default: `True`.
        out_of_contract: Also draw keys with ||k||² > 1 + `UNIT_KEY_SLACK`. Default: `False`.
        realistic_only: Only the families models produce (`REALISTIC`, unit magnitudes).
            Default: `False`.
        chunk_sizes: Chunk sizes whose residues T should cover. Default: `(16, 64)`.
        fixed_scales: Draw only these scales (``"default"``: `None` or K^-1/2; ``"one"``: 1), or
            `()` for any (`linattn_verify.core.sizes.scales`). Default: `()`.
        omittable: Keywords the calling style may leave out at their default (of
            `DELTA_OMITTABLE`; drawn last, shrinking toward every keyword passed). Default: all.
        heads_within_seq_len: Draw H <= T (a kernel that refuses T < H). Default: `False`.
        value_gate: Draw a value gate gv with every case (of the gate families, after the
            case's other draws). Default: `False`.

    Raises:
        InvalidArgument: naming the argument that is malformed.
    """
    dtypes = check_choices("dtypes", dtypes, DTYPE_NAMES)
    gates = check_choices("gates", gates, DELTA_GATES)
    check_int_range("seq_len", min_seq_len, max_seq_len, lowest=1)
    check_int_range("head_dim", min_head_dim, max_head_dim, lowest=1)
    if check_int("max_heads", max_heads) < 1:
        raise InvalidArgument(f"Got max_heads={max_heads!r}, but max_heads must be >= 1.")
    l2norm = _flags("l2norm", l2norm)
    negative_eigenvalues = _flags("negative_eigenvalues", negative_eigenvalues)
    initial_state = _flags("initial_state", initial_state)
    final_state = _flags("final_state", final_state)
    _check_bool("varlen", varlen)
    _check_bool("out_of_contract", out_of_contract)
    _check_bool("realistic_only", realistic_only)
    _check_bool("heads_within_seq_len", heads_within_seq_len)
    _check_bool("value_gate", value_gate)
    if out_of_contract and False not in l2norm:
        raise InvalidArgument(
            f"Got out_of_contract=True with l2norm={l2norm!r}: out-of-contract keys need "
            "l2norm_qk=False (the kernel would normalise them)."
        )
    T = seq_lens(min_value=min_seq_len, max_value=max_seq_len, chunk_sizes=chunk_sizes)
    head_dim = head_dims(min_value=min_head_dim, max_value=max_head_dim)
    dtypes = tuple(sorted(dtypes, key=DTYPE_ORDER.index))
    gates = tuple(g for g in DELTA_GATES if g in gates)

    @st.composite
    def draw_cases(draw: st.DrawFn) -> DeltaCase:
        """Draw one case from validated arguments (see `delta_cases`)."""
        gate = draw(st.sampled_from(gates), label="gate")
        # A quarter of the cases, when asked for; shrinks toward in-contract.
        ooc = out_of_contract and draw(st.integers(0, 3), label="out_of_contract") == 3
        l2 = False if ooc else draw(st.sampled_from(l2norm), label="l2norm_qk")
        negative = draw(st.sampled_from(negative_eigenvalues), label="negative_eigenvalues")
        keys: tuple[str, ...] = ("raw", "unit") if l2 else ("unit",)
        betas = tuple(b for b in BETA_FAMILIES if b != "near_two" or negative)
        gate_families: tuple[str, ...] = ("none",) if gate == "none" else GATE_FAMILIES
        values: tuple[str, ...] = VALUE_FAMILIES
        if realistic_only:
            keys = tuple(f for f in keys if f in REALISTIC["key"])
            gate_families = tuple(f for f in gate_families if f in ("none", *REALISTIC["gate"]))
            betas, values = REALISTIC["beta"], ("unit",)
        else:
            keys += ("near_parallel", "repeated")
        key = "large_norm" if ooc else draw(st.sampled_from(keys), label="key_family")
        beta = draw(st.sampled_from(betas), label="beta_family")
        gate_family = draw(st.sampled_from(gate_families), label="gate_family")
        dtype = draw(st.sampled_from(dtypes), label="dtype")
        if dtype == "float16":
            values = tuple(f for f in values if f != "large")
        value = draw(st.sampled_from(values), label="value_family")
        seq_len = draw(T, label="T")
        packed = varlen and draw(st.booleans(), label="varlen")
        # Drawn in the order the fields are listed (the draws of a seed do not move).
        B = 1 if packed else draw(batch_sizes(max_value=2), label="B")
        H = draw(
            head_counts(max_value=min(max_heads, seq_len) if heads_within_seq_len else max_heads),
            label="H",
        )
        K = draw(head_dim, label="K")
        case = DeltaCase(
            B=B,
            T=seq_len,
            H=H,
            K=K,
            V=draw(head_dim, label="V"),
            dtype=dtype,
            gate=gate,
            gate_family=gate_family,
            beta_family=beta,
            key_family=key,
            value_family=value,
            l2norm_qk=l2,
            negative_eigenvalues=negative,
            initial_state=draw(st.sampled_from(initial_state), label="initial_state"),
            output_final_state=draw(st.sampled_from(final_state), label="output_final_state"),
            seq_lens=draw(seq_packings(seq_len), label="seq_lens") if packed else None,
            scale=draw(declared_scales(fixed_scales, K), label="scale"),
            seed=draw(st.integers(0, 2**31 - 1), label="seed"),
            out_of_contract=ooc,
        )
        if value_gate:
            families = REALISTIC["gate"] if realistic_only else GATE_FAMILIES
            case = replace(case, value_gate=draw(st.sampled_from(families), label="value_gate"))
        # The calling style last, so the case's own draws do not depend on it: every keyword
        # passed (half the cases), or each one at its default left out with probability 3/4.
        defaults = _at_default(case)
        candidates = [n for n in omittable if n in defaults]
        if not candidates or not draw(st.booleans(), label="omit defaults"):
            return case
        omit = tuple(n for n in candidates if draw(st.integers(0, 3), label=f"omit {n}"))
        return replace(case, omit=omit)

    return draw_cases()


def delta_cases_for(
    kernel: DeltaKernel,
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 160,
    max_head_dim: int = 32,
    realistic_only: bool = False,
    out_of_contract: bool = False,
) -> st.SearchStrategy[DeltaCase]:
    """Generate `DeltaCase` that ``kernel`` declares it supports (``kernel.supports`` is `None`).

    Every option is drawn from its `DeltaCapabilities`: dtypes, gate shapes, ``l2norm_qk``
    values, negative eigenvalues, varlen, initial and final state, head-dim limits. T covers
    every residue mod 16, 64 and the chunk size of its recipe, and by default runs past two
    chunks of 64. The exclusions of `delta_cases` apply. Out-of-contract keys are drawn only
    when asked for *and* the kernel expects unit keys (``unit_norm_keys``) and takes
    ``l2norm_qk=False``: for any other kernel no input validation accepts is outside its
    contract.

    Args:
        kernel: The kernel under test; its capabilities filter every draw.
        min_seq_len: Shortest T. Default: `1`.
        max_seq_len: Longest T. Default: `160`.
        max_head_dim: Largest K and V (capped by the kernel's limit). Default: `32`.
        realistic_only: Only the families models produce. Default: `False`.
        out_of_contract: Also draw keys breaking the unit-norm contract. Default: `False`.

    Raises:
        InvalidArgument: if ``kernel`` is not a `DeltaKernel` or an argument is malformed.
    """
    if not isinstance(kernel, DeltaKernel):
        raise InvalidArgument(f"Expected a DeltaKernel but got kernel={kernel!r}.")
    cap = kernel.capabilities
    check_int("max_head_dim", max_head_dim)
    _check_bool("out_of_contract", out_of_contract)
    chunks = {kernel.precision_recipe(torch_dtype(d)).chunk_size for d in cap.dtypes}
    return delta_cases(
        dtypes=cap.dtypes,
        gates=cap.gates,
        min_seq_len=min_seq_len,
        max_seq_len=max_seq_len,
        min_head_dim=cap.min_head_dim,
        max_head_dim=max(cap.min_head_dim, min(max_head_dim, cap.max_head_dim)),
        l2norm=cap.l2norm_qk,
        negative_eigenvalues=(False, True) if cap.negative_eigenvalues else (False,),
        initial_state=(False, True) if cap.initial_state else (False,),
        final_state=(False, True) if cap.final_state else (False,),
        varlen=cap.varlen,
        out_of_contract=out_of_contract and cap.unit_norm_keys and False in cap.l2norm_qk,
        realistic_only=realistic_only,
        chunk_sizes=(16, 64, *sorted(chunks)),
        fixed_scales=cap.scales,
        heads_within_seq_len=cap.seq_len_at_least_heads,
        value_gate=cap.value_gate,
        # Only keywords the kernel takes are left out at their default.
        omittable=tuple(
            name
            for name, takes in (
                ("scale", cap.takes_scale),
                ("initial_state", cap.initial_state),
                ("output_final_state", cap.final_state),
                ("cu_seqlens", cap.varlen),
                ("use_qk_l2norm_in_kernel", True in cap.l2norm_qk),
            )
            if takes
        ),
    )


def _at_default(case: DeltaCase) -> frozenset[str]:
    """The keywords of ``case``'s problem at their default (as `DeltaProblem.at_default`)."""
    defaults = {
        "scale": case.scale is None or case.scale == case.K**-0.5,
        "initial_state": not case.initial_state,
        "output_final_state": not case.output_final_state,
        "cu_seqlens": case.seq_lens is None,
        "use_qk_l2norm_in_kernel": not case.l2norm_qk,
    }
    return frozenset(name for name, default in defaults.items() if default)


def random_delta_cotangents(
    problem: DeltaProblem, seed: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draw normal cotangents for a problem's output and final state.

    Returns:
        ``(do, dS_T)``: do ``[B, T, H, V]`` drawn in float64 and rounded to the output (v)
        dtype; dS_T ``[N, H, K, V]`` in float32, or `None` without ``output_final_state``.
    """
    gen = torch.Generator().manual_seed(check_int("seed", seed))
    _, _, H, K, V = problem.shape
    device = problem.q.device
    do = torch.randn(problem.v.shape, generator=gen, dtype=_F64).to(problem.v.dtype)
    if not problem.output_final_state:
        return do.to(device), None
    dS = torch.randn(problem.num_sequences, H, K, V, generator=gen, dtype=_F64)
    return do.to(device), dS.float().to(device)


__all__ = [
    "BETA_FAMILIES",
    "GATE_FAMILIES",
    "KEY_FAMILIES",
    "REALISTIC",
    "VALUE_FAMILIES",
    "DeltaCase",
    "delta_cases",
    "delta_cases_for",
    "random_delta_cotangents",
]
