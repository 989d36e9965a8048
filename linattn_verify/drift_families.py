# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What `linattn_verify.drift` needs from each family: inputs, problems, O(T) bounds.

A driver per family (`linattn_verify.core.Family.drift_driver`):
it draws the realistic inputs of `linattn_verify.drift`'s docstring once, and measures one
(variant, T) point: builds the problem from the prefix, checks the kernel declares it, calls it
and judges ``o`` and the final state against the oracle and the bound of the variant's own recipe.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from linattn_verify.drift import (
    GATE_BIAS,
    DriftPoint,
    DriftSettings,
    Variant,
    cast_inputs,
    tensor_drift,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.typing import LIFTED_MAPS


def _normal(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


DRIFT_FEATURE_MAPS = ("identity", "relu", "elu1", "exp", "softmax", "taylor2", "rebased")
"""The feature maps drift draws, in order of preference (favor+ needs a projection drift does
not draw)."""


class LinearDriver:
    """Linear attention: the kernel's own semantics, with a scalar, vector or no gate."""

    def __init__(self, kernel: Any, settings: DriftSettings) -> None:
        cap = kernel.capabilities
        takes_scalar = (cap.decay and "scalar" in cap.gates) or kernel.implied_decay is not None
        takes_vector = cap.decay and "vector" in cap.gates and kernel.implied_decay is None
        gate = settings.gate
        if gate == "auto":
            if takes_scalar and kernel.implied_decay is None:
                gate = "scalar"
            elif takes_vector and cap.decay_required:
                gate = "vector"
            else:
                gate = "none"
        if gate == "scalar" and not takes_scalar:
            raise InvalidArgument(
                f"Got gate='scalar', but {kernel.name} declares no scalar gate (decay="
                f"{cap.decay}, gates={cap.gates}); use gate 'none' or 'vector'."
            )
        if gate == "vector" and not takes_vector:
            raise InvalidArgument(
                f"Got gate='vector', but {kernel.name} declares no vector gate (decay="
                f"{cap.decay}, gates={cap.gates}); use gate 'none' or 'scalar'."
            )
        if gate == "none" and cap.decay_required:
            raise InvalidArgument(
                f"Got gate='none', but {kernel.name} requires a gate (decay_required)."
            )
        maps = [m for m in DRIFT_FEATURE_MAPS if m in cap.feature_maps]
        if gate == "vector":  # a vector gate does not combine with a lifted map (semantics)
            maps = [m for m in maps if m in ("identity", "relu", "elu1", "exp")]
            if cap.query_feature_map in LIFTED_MAPS:
                maps = []
        if not maps:
            raise InvalidArgument(
                f"Got kernel {kernel.name} with feature_maps={cap.feature_maps}; drift draws "
                f"one of {DRIFT_FEATURE_MAPS} (with gate={gate!r})."
            )
        self.kernel = kernel
        self.feature_map = maps[0]
        self.gate = gate
        self.normalize = False not in cap.normalize
        self.eps = (1e-6 if cap.configurable else cap.eps) if self.normalize else 0.0
        self.final_state = cap.final_state

    def inputs(self, settings: DriftSettings) -> dict[str, torch.Tensor]:
        """q, k, v ~ N(0, 1) ``[B, max_T, H, K]`` (|q|, |k| normalized), g = logsigmoid(N(6, 1))."""
        s = settings
        gen = torch.Generator().manual_seed(s.seed)
        shape = (s.batch, s.max_T, s.heads)
        out = {
            "q": _normal(gen, *shape, s.head_dim),
            "k": _normal(gen, *shape, s.head_dim),
            "v": _normal(gen, *shape, s.value_dim),
        }
        if self.normalize:
            out["q"], out["k"] = out["q"].abs(), out["k"].abs()
        if self.gate != "none":
            g_shape = (*shape, s.head_dim) if self.gate == "vector" else shape
            out["g"] = torch.nn.functional.logsigmoid(_normal(gen, *g_shape) + GATE_BIAS)
        return out

    def measure(self, variant: Variant, inputs: dict[str, torch.Tensor], T: int) -> DriftPoint:
        """Run ``variant`` on the first T tokens and judge it."""
        from linattn_verify.linear_attn.semantics import validate_problem
        from linattn_verify.linear_attn.tolerance import forward_bounds

        x = cast_inputs(inputs, T, variant.dtype)
        kernel = variant.kernel
        problem = validate_problem(
            x["q"],
            x["k"],
            x["v"],
            x.get("g"),
            normalize=self.normalize,
            eps=self.eps,
            feature_map=self.feature_map,
            output_final_state=self.final_state,
            query_feature_map=kernel.capabilities.query_feature_map,
        )
        problem = kernel.prepare(problem)
        _require(kernel.supports(problem))

        def bounds_of(p: Any, recipe: Any) -> dict[str, Any]:
            zero = kernel.capabilities.zero_denominator
            return forward_bounds(p, recipe, zero_denominator=zero).tensors

        return _judged(variant, T, problem, bounds_of, self.final_state)


class DeltaDriver:
    """The delta rule: unit-norm keys, beta = sigmoid(N(0, 1)), a scalar gate or none."""

    def __init__(self, kernel: Any, settings: DriftSettings) -> None:
        cap = kernel.capabilities
        gate = settings.gate
        if gate == "auto":
            gate = next(g for g in ("scalar", "vector", "none") if g in cap.gates)
        if gate not in cap.gates:
            raise InvalidArgument(
                f"Got gate={gate!r}, but {kernel.name} declares gates={cap.gates}."
            )
        self.kernel = kernel
        self.gate = gate
        self.l2norm_qk = False not in cap.l2norm_qk
        self.final_state = cap.final_state

    def inputs(self, settings: DriftSettings) -> dict[str, torch.Tensor]:
        """q, v ~ N(0, 1), unit-norm k, beta = sigmoid(N(0, 1)), g = logsigmoid(N(6, 1)).

        g is ``[B, T, H]``, or ``[B, T, H, K]`` for a vector gate.
        """
        s = settings
        gen = torch.Generator().manual_seed(s.seed)
        shape = (s.batch, s.max_T, s.heads)
        out = {
            "q": _normal(gen, *shape, s.head_dim),
            "k": torch.nn.functional.normalize(_normal(gen, *shape, s.head_dim), dim=-1),
            "v": _normal(gen, *shape, s.value_dim),
            "beta": torch.sigmoid(_normal(gen, *shape)),
        }
        if self.gate != "none":
            g_shape = (*shape, s.head_dim) if self.gate == "vector" else shape
            out["g"] = torch.nn.functional.logsigmoid(_normal(gen, *g_shape) + GATE_BIAS)
        return out

    def measure(self, variant: Variant, inputs: dict[str, torch.Tensor], T: int) -> DriftPoint:
        """Run ``variant`` on the first T tokens and judge it."""
        from linattn_verify.delta.bounds import forward_bounds
        from linattn_verify.delta.problem import validate_delta

        x = cast_inputs(inputs, T, variant.dtype)
        kernel = variant.kernel
        problem = validate_delta(
            x["q"],
            x["k"],
            x["v"],
            x["beta"],
            x.get("g"),
            l2norm_qk=self.l2norm_qk,
            output_final_state=self.final_state,
        )
        _require(kernel.supports(problem))
        _require(kernel.contract(problem))
        return _judged(variant, T, problem, forward_bounds, self.final_state)


def _require(reason: str | None) -> None:
    if reason is not None:
        raise InvalidArgument(f"The drift's problem is outside the kernel's declaration: {reason}")


def _judged(
    variant: Variant, T: int, problem: Any, bounds_of: Any, final_state: bool
) -> DriftPoint:
    """Run ``variant``'s kernel on ``problem`` and judge o (and S_T) against ``bounds_of``'s.

    ``bounds_of(problem, recipe)`` is the family's O(T) forward bound; its time and the
    oracle's are the point's ``oracle_seconds``.
    """
    kernel = variant.kernel
    started = time.monotonic()
    o, state = kernel.call(problem)
    kernel_seconds = time.monotonic() - started
    bounds = bounds_of(problem, kernel.precision_recipe(problem.q.dtype))
    tensors = {"o": tensor_drift(o, bounds["o"])}
    if final_state:
        tensors["final_state"] = tensor_drift(state, bounds["final_state"])
    return DriftPoint(
        dtype=variant.dtype,
        state_dtype=variant.state_dtype,
        T=T,
        tensors=tensors,
        kernel_seconds=kernel_seconds,
        oracle_seconds=time.monotonic() - started - kernel_seconds,
    )


Driver = LinearDriver | DeltaDriver


__all__ = ["DeltaDriver", "Driver", "LinearDriver"]
