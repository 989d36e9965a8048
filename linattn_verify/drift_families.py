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


def _normal(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


class LinearDriver:
    """Linear attention: unnormalized, identity (or relu) features, a scalar gate or none."""

    def __init__(self, kernel: Any, settings: DriftSettings) -> None:
        cap = kernel.capabilities
        takes_scalar = (cap.decay and "scalar" in cap.gates) or kernel.implied_decay is not None
        gate = settings.gate
        if gate == "auto":
            gate = "scalar" if takes_scalar and kernel.implied_decay is None else "none"
        if gate == "scalar" and not takes_scalar:
            raise InvalidArgument(
                f"Got gate='scalar', but {kernel.name} declares no scalar gate (decay="
                f"{cap.decay}, gates={cap.gates}); use gate 'none'."
            )
        if gate == "none" and cap.decay_required:
            raise InvalidArgument(
                f"Got gate='none', but {kernel.name} requires a gate (decay_required)."
            )
        if False not in cap.normalize:
            raise InvalidArgument(
                f"Got kernel {kernel.name} with normalize={cap.normalize}; drift measures "
                "unnormalized outputs (its O(T) bound has no denominator)."
            )
        maps = [m for m in ("identity", "relu") if m in cap.feature_maps]
        if not maps:
            raise InvalidArgument(
                f"Got kernel {kernel.name} with feature_maps={cap.feature_maps}; drift's O(T) "
                "bound covers exact feature maps (identity, relu) only."
            )
        self.kernel = kernel
        self.feature_map = maps[0]
        self.gate = gate
        self.final_state = cap.final_state

    def inputs(self, settings: DriftSettings) -> dict[str, torch.Tensor]:
        """q, k, v ~ N(0, 1) ``[B, max_T, H, K]``, g = logsigmoid(N(6, 1)) ``[B, max_T, H]``."""
        s = settings
        gen = torch.Generator().manual_seed(s.seed)
        shape = (s.batch, s.max_T, s.heads)
        out = {
            "q": _normal(gen, *shape, s.head_dim),
            "k": _normal(gen, *shape, s.head_dim),
            "v": _normal(gen, *shape, s.value_dim),
        }
        if self.gate == "scalar":
            out["g"] = torch.nn.functional.logsigmoid(_normal(gen, *shape) + GATE_BIAS)
        return out

    def measure(self, variant: Variant, inputs: dict[str, torch.Tensor], T: int) -> DriftPoint:
        """Run ``variant`` on the first T tokens and judge it."""
        from linattn_verify.linear_attn.drift_linear import linear_forward_bounds
        from linattn_verify.linear_attn.semantics import validate_problem

        x = cast_inputs(inputs, T, variant.dtype)
        kernel = variant.kernel
        problem = validate_problem(
            x["q"],
            x["k"],
            x["v"],
            x.get("g"),
            feature_map=self.feature_map,
            output_final_state=self.final_state,
        )
        problem = kernel.prepare(problem)
        _require(kernel.supports(problem))
        return _judged(variant, T, problem, linear_forward_bounds, self.final_state)


class DeltaDriver:
    """The delta rule: unit-norm keys, beta = sigmoid(N(0, 1)), a scalar gate or none."""

    def __init__(self, kernel: Any, settings: DriftSettings) -> None:
        cap = kernel.capabilities
        gate = settings.gate
        if gate == "auto":
            gate = "scalar" if "scalar" in cap.gates else "none"
        if gate not in cap.gates:
            raise InvalidArgument(
                f"Got gate={gate!r}, but {kernel.name} declares gates={cap.gates} (drift draws "
                "a scalar gate or none)."
            )
        self.kernel = kernel
        self.gate = gate
        self.l2norm_qk = False not in cap.l2norm_qk
        self.final_state = cap.final_state

    def inputs(self, settings: DriftSettings) -> dict[str, torch.Tensor]:
        """q, v ~ N(0, 1), unit-norm k, beta = sigmoid(N(0, 1)), g = logsigmoid(N(6, 1))."""
        s = settings
        gen = torch.Generator().manual_seed(s.seed)
        shape = (s.batch, s.max_T, s.heads)
        out = {
            "q": _normal(gen, *shape, s.head_dim),
            "k": torch.nn.functional.normalize(_normal(gen, *shape, s.head_dim), dim=-1),
            "v": _normal(gen, *shape, s.value_dim),
            "beta": torch.sigmoid(_normal(gen, *shape)),
        }
        if self.gate == "scalar":
            out["g"] = torch.nn.functional.logsigmoid(_normal(gen, *shape) + GATE_BIAS)
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
