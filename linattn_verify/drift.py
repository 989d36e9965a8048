# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Long-context accuracy drift: a kernel's error and its bound as the sequence grows.

`measure_drift` draws one set of realistic inputs of length ``max_T`` (one seed) and, for
T = start_T, 2 start_T, ... (each a prefix of the same inputs, so the points are comparable),
runs the kernel in every asked (input dtype, state dtype), computes the float64 oracle and the
forward bound of ``o`` and of the final state for the kernel's declared recipe, and records per
tensor (`TensorDrift`):

* ``max_err`` = max |x̂ - x| and ``bound_at_max_err``, B at that element;
* ``max_bound`` = max B, and ``max_r`` = max err/B (the pass/fail score: a point with r > 2
  is a kernel exceeding its declared bound, docs/error-model.md §7);
* ``rel_err`` = max |x̂ - x| / max |x| and ``rel_bound`` = max B / max |x|: the accuracy lost,
  relative to the tensor's own scale (what "how many digits are left" means for a state);
* ``median_err`` = median |x̂ - x|, the typical element's error beside the worst one.

Both the oracle and the bound cost O(T): linear attention's bound
(`linattn_verify.linear_attn.tolerance`) evaluates its pair sums by a block scan beyond
`DENSE_TOKENS` tokens (`linattn_verify.linear_attn._bounds.pairwise`), its exact output with
them; the delta rule's own bound (`linattn_verify.delta.bounds`) is a running scan already.
Before each T the cost of the next level is predicted from the last one (at least doubled, or by
the growth measured between the last two levels) and the run stops when it would pass the
budget: `DriftResult.stopped` says whether ``max_T`` or the budget ended it.

Inputs (`drift_inputs`): q, k, v ~ N(0, 1) with the convention's default scale K^-1/2; a scalar
gate g = logsigmoid(x), x ~ N(6, 1) (a decay of about 0.9975 per token: a memory of a few
hundred tokens, as trained gates of long-context models), a vector gate likewise per key dimension,
or none; for a normalized linear kernel |q|, |k| (positive scores: denominators that do not
cancel) and its own eps; for the delta rule unit-norm keys and beta = sigmoid(N(0, 1)).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from linattn_verify.errors import InvalidArgument
from linattn_verify.results import FAIL_THRESHOLD
from linattn_verify.typing import KERNEL_DTYPES, torch_dtype

GateChoice = Literal["auto", "scalar", "vector", "none"]
GATE_BIAS = 6.0
"""Mean of x in g = logsigmoid(x): exp(g) about 0.9975, a memory of about 400 tokens."""


@dataclass(frozen=True)
class DriftSettings:
    """What `measure_drift` measures.

    Attributes:
        dtypes: Input dtypes. Default: `("float32",)`.
        state_dtypes: State dtypes (``"float32"``: the kernel as declared; others only for
            kernels that take ``state_dtype=``). Default: `("float32",)`.
        start_T: First T, a power of two. Default: `64`.
        max_T: Last T, a power of two >= start_T. Default: `65536`.
        budget: Wall-clock seconds; no level starts that is predicted to end past it.
            Default: `300.0`.
        batch: B. Default: `1`.
        heads: H. Default: `2`.
        head_dim: K. Default: `32`.
        value_dim: V. Default: `32`.
        gate: ``"scalar"``, ``"vector"`` (one decay per key dimension, the linear family's
            GLA form), ``"none"`` or ``"auto"`` (scalar where the kernel takes one, else a
            vector gate where it requires one). Default: `"auto"`.
        seed: Seed of the inputs. Default: `0`.
    """

    dtypes: tuple[str, ...] = ("float32",)
    state_dtypes: tuple[str, ...] = ("float32",)
    start_T: int = 64
    max_T: int = 65536
    budget: float = 300.0
    batch: int = 1
    heads: int = 2
    head_dim: int = 32
    value_dim: int = 32
    gate: GateChoice = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("start_T", "max_T"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Got {name}={value!r}, but {name} must be an int >= 1.")
            if value & (value - 1):
                raise InvalidArgument(f"Got {name}={value}, but {name} must be a power of two.")
        if self.max_T < self.start_T:
            raise InvalidArgument(
                f"Got max_T={self.max_T} < start_T={self.start_T}; max_T must be >= start_T."
            )
        for name in ("batch", "heads", "head_dim", "value_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Got {name}={value!r}, but {name} must be an int >= 1.")
        if not self.budget > 0 or math.isinf(self.budget):
            raise InvalidArgument(f"Got budget={self.budget!r}, but budget must be finite > 0.")
        for name in ("dtypes", "state_dtypes"):
            value = getattr(self, name)
            if not value or any(d not in KERNEL_DTYPES for d in value):
                raise InvalidArgument(
                    f"Got {name}={value!r}, but {name} must be a non-empty subset of "
                    f"{KERNEL_DTYPES}."
                )
        if self.gate not in ("auto", "scalar", "vector", "none"):
            raise InvalidArgument(
                f"Got gate={self.gate!r}, but gate must be auto, scalar, vector or none."
            )

    @property
    def lengths(self) -> list[int]:
        """The T measured, start_T to max_T by doubling."""
        return [self.start_T << i for i in range((self.max_T // self.start_T).bit_length())]


@dataclass(frozen=True)
class TensorDrift:
    """One tensor at one T (the module docstring defines each field)."""

    max_err: float
    bound_at_max_err: float
    max_bound: float
    max_r: float
    rel_err: float
    rel_bound: float
    median_err: float
    finite: bool


@dataclass(frozen=True)
class DriftPoint:
    """One (dtype, state dtype, T): its tensors and what each part cost (seconds)."""

    dtype: str
    state_dtype: str
    T: int
    tensors: dict[str, TensorDrift]
    kernel_seconds: float
    oracle_seconds: float

    @property
    def max_r(self) -> float:
        """The largest r over the tensors."""
        return max((t.max_r for t in self.tensors.values()), default=0.0)

    @property
    def failed(self) -> bool:
        """The kernel exceeded its declared bound (r > 2) or returned non-finite values."""
        return self.max_r > FAIL_THRESHOLD or not all(t.finite for t in self.tensors.values())


@dataclass(frozen=True)
class DriftResult:
    """What a drift measurement found, and where and why it stopped."""

    kernel: str
    settings: DriftSettings
    gate: str
    points: list[DriftPoint] = field(default_factory=list)
    stopped: Literal["max_T", "budget"] = "max_T"
    reason: str = ""
    seconds: float = 0.0

    @property
    def reached_T(self) -> int:
        """The largest T measured in every variant (0 if none)."""
        series = {(p.dtype, p.state_dtype) for p in self.points}
        per = [max(p.T for p in self.points if (p.dtype, p.state_dtype) == s) for s in series]
        return min(per, default=0)


@dataclass(frozen=True)
class Variant:
    """One kernel run: its input dtype, state dtype and the kernel that declares them."""

    dtype: str
    state_dtype: str
    kernel: Any


def drift_variants(kernel: Any, settings: DriftSettings) -> list[Variant]:
    """Return the (dtype, state dtype) kernels to measure.

    Raises:
        InvalidArgument: naming ``dtypes`` or ``state_dtypes`` when the kernel declares no such
            dtype or takes no ``state_dtype=`` option.
    """
    missing = [d for d in settings.dtypes if d not in kernel.capabilities.dtypes]
    if missing:
        raise InvalidArgument(
            f"Got dtypes={list(settings.dtypes)}, but {kernel.name} declares only "
            f"{list(kernel.capabilities.dtypes)} (not {missing})."
        )
    out: list[Variant] = []
    for state in settings.state_dtypes:
        variant = state_dtype_kernel(kernel, state)
        out.extend(Variant(d, state, variant) for d in settings.dtypes)
    return out


def state_dtype_kernel(kernel: Any, state_dtype: str) -> Any:
    """``kernel`` reading its state in ``state_dtype``, its recipe declaring it.

    ``"float32"`` is the kernel as declared. The others need a kernel with a ``state_dtype=``
    option: the torch chunk references (``torch/chunk``, ``torch/delta.chunk``).

    Raises:
        InvalidArgument: naming ``state_dtypes`` for any other kernel.
    """
    from linattn_verify.delta import reference_kernels as delta_refs
    from linattn_verify.linear_attn.reference_kernels import Float32ChunkReference, with_state_dtype

    if state_dtype == "float32":
        return kernel
    if isinstance(kernel.fn, Float32ChunkReference):
        return with_state_dtype(kernel, state_dtype)
    if kernel.fn is delta_refs.delta_chunk_torch:
        return delta_refs.with_state_dtype(kernel, state_dtype)
    raise InvalidArgument(
        f"Got state_dtypes={state_dtype!r}, but {kernel.name} has no state_dtype= option "
        "(torch/chunk and torch/delta.chunk have one); its state is what its recipe declares, "
        "so measure it with state_dtypes float32."
    )


def prepare_drift(kernel: Any, settings: DriftSettings) -> tuple[Any, list[Variant]]:
    """Check that ``kernel`` can be measured as ``settings`` ask: its driver and variants.

    Raises:
        InvalidArgument: naming the setting the kernel cannot take (a dtype, state dtype or
            gate it does not declare, a family or option drift does not cover).
    """
    from linattn_verify.core.family import family_of

    return family_of(kernel).drift_driver(kernel, settings), drift_variants(kernel, settings)


def measure_drift(
    kernel: Any,
    settings: DriftSettings,
    *,
    on_point: Callable[[DriftPoint], None] | None = None,
) -> DriftResult:
    """Measure ``kernel``'s error and bound at every T of ``settings`` within its budget.

    Args:
        kernel: A `linattn_verify.Kernel` or `linattn_verify.delta.DeltaKernel`.
        settings: What to measure.
        on_point: Called with each point as it is measured. Default: `None`.

    Returns:
        The `DriftResult`.

    Raises:
        InvalidArgument: if the kernel cannot take the drift's problems (a dtype, state dtype
            or gate it does not declare, an unsupported family or option).
    """
    driver, variants = prepare_drift(kernel, settings)
    inputs = driver.inputs(settings)
    # The work is many small per-chunk operations, which intra-op threads do not speed up; on a
    # shared CPU they oversubscribe the cores instead (measured on 2 loaded cores: 53 s to reach
    # T = 1024 with torch's default threads, 1 s with one).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(kernel, settings, driver, variants, inputs, on_point)
    finally:
        torch.set_num_threads(threads)


def _measure(
    kernel: Any,
    settings: DriftSettings,
    driver: Any,
    variants: list[Variant],
    inputs: dict[str, torch.Tensor],
    on_point: Callable[[DriftPoint], None] | None,
) -> DriftResult:
    started = time.monotonic()
    points: list[DriftPoint] = []
    costs: list[list[float]] = []  # per level, per variant: seconds
    stopped: Literal["max_T", "budget"] = "max_T"
    reason = f"max_T={settings.max_T} reached"
    for T in settings.lengths:
        predicted = _predicted(costs, len(variants))
        left = settings.budget - (time.monotonic() - started)
        # The first level has no cost to predict from: it runs whatever the budget (a budget
        # of a millisecond could otherwise be spent before the first point on a loaded machine).
        if costs and sum(predicted) > left:
            stopped = "budget"
            reason = (
                f"stopped before T={T}: predicted {sum(predicted):.0f} s for it, {left:.0f} s "
                f"of the {settings.budget:g} s budget left"
            )
            break
        level: list[float] = []
        for variant, guess in zip(variants, predicted, strict=True):
            left = settings.budget - (time.monotonic() - started)
            # A level that takes longer than predicted is cut short between points.
            if costs and guess > left:
                stopped = "budget"
                reason = (
                    f"stopped at T={T} before {variant.dtype}/{variant.state_dtype}: predicted "
                    f"{guess:.0f} s for it, {left:.0f} s of the {settings.budget:g} s budget left"
                )
                break
            point_started = time.monotonic()
            point = driver.measure(variant, inputs, T)
            level.append(time.monotonic() - point_started)
            points.append(point)
            if on_point is not None:
                on_point(point)
        costs.append(level)
        if stopped == "budget":
            break
    return DriftResult(
        kernel=kernel.name,
        settings=settings,
        gate=driver.gate,
        points=points,
        stopped=stopped,
        reason=reason,
        seconds=time.monotonic() - started,
    )


def _predicted(costs: list[list[float]], variants: int) -> list[float]:
    """Each variant's predicted seconds at the next T, from its cost at the last two.

    Doubling T at least doubles an O(T) computation (the oracle, the bound): the factor is the
    growth measured between the last two levels, at least 2 (fixed overheads make small T look
    flat) and at most 8 (a noisy first level must not stop a run at once). Before the second
    level nothing is known: 0.
    """
    if not costs:
        return [0.0] * variants
    last = costs[-1]
    before = costs[-2] if len(costs) > 1 else [0.0] * variants
    return [
        cost * (min(max(cost / previous, 2.0), 8.0) if previous > 0 else 2.0)
        for cost, previous in zip(last, before, strict=True)
    ]


def tensor_drift(actual: torch.Tensor, expected: Any) -> TensorDrift:
    """Summarise ``actual`` against a `linattn_verify.core.bound.TensorBound`."""
    from linattn_verify.compare import compare

    comparison = compare(actual, expected)
    ref = expected.reference
    x = actual.detach().to(device="cpu", dtype=torch.float64)
    err = (x - ref).abs()
    finite = bool(torch.isfinite(x).all())
    err = torch.where(torch.isfinite(err), err, torch.inf)
    flat = int(err.argmax()) if err.numel() else 0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    max_err = float(err.flatten()[flat]) if err.numel() else 0.0
    max_bound = float(expected.bound.max()) if ref.numel() else 0.0
    return TensorDrift(
        max_err=max_err,
        bound_at_max_err=float(expected.bound.flatten()[flat]) if ref.numel() else 0.0,
        max_bound=max_bound,
        max_r=float(comparison.deciding),
        rel_err=max_err / scale if scale else 0.0,
        rel_bound=max_bound / scale if scale else 0.0,
        median_err=float(err.median()) if err.numel() else 0.0,
        finite=finite,
    )


def growth_exponent(points: list[DriftPoint], tensor: str, what: str = "max_err") -> float | None:
    """The least-squares slope of log(``what``) against log T over ``points`` (one series).

    About 0.5 for errors growing like √T, 0 once a decay's memory bounds them; `None` with
    fewer than two positive values.
    """
    pairs = [
        (math.log(p.T), math.log(getattr(p.tensors[tensor], what)))
        for p in points
        if tensor in p.tensors and 0 < getattr(p.tensors[tensor], what) < math.inf
    ]
    if len(pairs) < 2:
        return None
    mx = sum(a for a, _ in pairs) / len(pairs)
    my = sum(b for _, b in pairs) / len(pairs)
    sxx = sum((a - mx) ** 2 for a, _ in pairs)
    return sum((a - mx) * (b - my) for a, b in pairs) / sxx if sxx else None


def cast_inputs(inputs: dict[str, torch.Tensor], T: int, dtype: str) -> dict[str, torch.Tensor]:
    """The first T tokens of every ``[B, T, ...]`` input, in ``dtype``."""
    return {k: v[:, :T].to(torch_dtype(dtype)).contiguous() for k, v in inputs.items()}


__all__ = [
    "DriftPoint",
    "DriftResult",
    "DriftSettings",
    "TensorDrift",
    "Variant",
    "cast_inputs",
    "drift_variants",
    "growth_exponent",
    "measure_drift",
    "prepare_drift",
    "state_dtype_kernel",
    "tensor_drift",
]
