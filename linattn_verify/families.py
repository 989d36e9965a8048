# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The families the harness verifies, and what each provides (ARCHITECTURE.md §4).

A *family* is one recurrence with its options: ``linear_attn`` (linear attention with scalar or
vector gates, normalized or not, feature maps) and ``delta`` (the delta rule: DeltaNet, Gated
DeltaNet, KDA). Its kernels, cases and problems carry a ``family`` class attribute, and
everything the shared machinery (the search, the runner, failures and replay, the CLI) needs
from a family it asks the `Family` found by `family_of`: no code outside a family's own package
branches on the family's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from linattn_verify.errors import InvalidArgument

PropertyFn = Callable[..., Any]


@dataclass(frozen=True)
class Family:
    """What one family provides to the shared machinery.

    Attributes:
        name: The family's name (``check --family NAME``).
        description: One line for ``list``.
        properties: Its catalogue, ``{name: (case, kernel) -> PropertyResult}``.
        cases_for: ``(kernel, *, max_seq_len, max_head_dim, realistic) -> strategy`` of the
            cases the kernel declares it supports.
        narrowed: ``(kernel, dtype, gates) -> kernel`` drawing only that dtype and those gate
            shapes (what ``run`` judges per group), or `None` when no declared shape is left.
        case_type: The family's case class (saved failures rebuild it from its fields).
        problem_from_tensors: ``(tensors, case) -> problem`` from a saved failure's inputs.
        source_from_json: ``(document) -> source`` with ``.load()`` (a kernel given to
            ``check``, saved with its failures for ``replay``).
        source_from_args: ``(args, *, on_cuda) -> source``: the kernel ``check``'s flags
            describe.
        library_kernels: ``(library) -> kernels`` of a library that is not registered by default
            (``"fla"``: importing it selects the interpreter's patches and costs seconds).
        drift_driver: ``(kernel, settings) -> driver`` that draws the long-context inputs and
            measures one (variant, T) point for ``linattn-verify drift`` (`drift_families`).
        reach: Whether the size reach (`linattn_verify.reach`) knows its cases.
        diagnose: Whether the recipe diagnosis (`linattn_verify.diagnosis`) knows its recipes.
    """

    name: str
    description: str
    properties: Callable[[], dict[str, PropertyFn]]
    cases_for: Callable[..., Any]
    narrowed: Callable[[Any, str, Sequence[str]], Any]
    case_type: Callable[[], type]
    problem_from_tensors: Callable[[Mapping[str, Any], Any], Any]
    source_from_json: Callable[[Any], Any]
    source_from_args: Callable[..., Any]
    library_kernels: Callable[[str], list[Any]]
    drift_driver: Callable[[Any, Any], Any]
    reach: bool = False
    diagnose: bool = False


def family_of(thing: Any) -> Family:
    """The family of a kernel, a case or a problem (by its ``family`` attribute).

    Raises:
        InvalidArgument: if ``thing`` names no known family.
    """
    return family_named(getattr(thing, "family", None))


def family_named(name: Any) -> Family:
    """The family called ``name``.

    Raises:
        InvalidArgument: naming the families there are.
    """
    if not isinstance(name, str) or name not in FAMILIES:
        raise InvalidArgument(f"Got family {name!r}, but the families are {sorted(FAMILIES)}.")
    return FAMILIES[name]


def is_case(spec: Any) -> bool:
    """Whether ``spec`` is a case of one of the families."""
    name = getattr(type(spec), "family", None)
    return name in FAMILIES and isinstance(spec, FAMILIES[name].case_type())


# The linear-attention family ----------------------------------------------------------------


def _linear_properties() -> dict[str, PropertyFn]:
    from linattn_verify.registry import registered_properties

    return registered_properties()


def _linear_cases(kernel: Any, *, max_seq_len: int, max_head_dim: int, realistic: bool) -> Any:
    from linattn_verify.strategies import REALISTIC_FAMILIES, kernel_specs

    if realistic:
        return kernel_specs(
            kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim, values=REALISTIC_FAMILIES
        )
    return kernel_specs(kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim)


def _linear_narrowed(kernel: Any, dtype: str, gates: Sequence[str]) -> Any:
    from linattn_verify.running import takes_gates, with_gates

    if not takes_gates(kernel, gates):  # type: ignore[arg-type]
        return None
    narrowed = with_gates(kernel, gates)  # type: ignore[arg-type]
    return replace(narrowed, capabilities=replace(narrowed.capabilities, dtypes=(dtype,)))


def _linear_case_type() -> type:
    from linattn_verify.strategies import ProblemSpec

    return ProblemSpec


def _linear_problem(tensors: Mapping[str, Any], spec: Any) -> Any:
    from linattn_verify.semantics import validate_problem

    h0: Any = tensors.get("initial_state")
    if h0 is not None and spec.normalize:
        # The calling convention's state argument (see `Problem.state_arg`).
        h0 = (h0, tensors["initial_key_sum"])
    problem = validate_problem(
        tensors["q"],
        tensors["k"],
        tensors["v"],
        tensors.get("g"),
        scale=spec.scale,
        normalize=spec.normalize,
        eps=spec.eps,
        feature_map=spec.feature_map,
        initial_state=h0,
        output_final_state=spec.output_final_state,
        cu_seqlens=tensors.get("cu_seqlens"),
        feature_weights=tensors.get("feature_weights"),
    )
    return dataclasses.replace(problem, omit=frozenset(spec.omit))


def _linear_source(document: Any) -> Any:
    from linattn_verify.targets import KernelSource

    return KernelSource.from_json(document)


def _linear_source_from_args(args: Any, *, on_cuda: bool) -> Any:
    from linattn_verify.cli.check import kernel_source

    return kernel_source(args, on_cuda=on_cuda)


def _linear_library(library: str) -> list[Any]:
    from linattn_verify.adapters.fla import fla_kernels

    return fla_kernels() if library == "fla" else []


# The delta-rule family ----------------------------------------------------------------------


def _delta_properties() -> dict[str, PropertyFn]:
    from linattn_properties.delta import delta_catalogue

    return delta_catalogue()


def _delta_cases(kernel: Any, *, max_seq_len: int, max_head_dim: int, realistic: bool) -> Any:
    from linattn_verify.delta.strategies import delta_cases_for

    return delta_cases_for(
        kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim, realistic_only=realistic
    )


def _delta_narrowed(kernel: Any, dtype: str, gates: Sequence[str]) -> Any:
    # A run about some gate shapes only leaves out the gate-less (DeltaNet) cases.
    everything = {"scalar", "vector"} <= set(gates)
    kept = tuple(g for g in kernel.capabilities.gates if g in gates or (g == "none" and everything))
    if not kept:
        return None
    return replace(kernel, capabilities=replace(kernel.capabilities, dtypes=(dtype,), gates=kept))


def _delta_case_type() -> type:
    from linattn_verify.delta.strategies import DeltaCase

    return DeltaCase


def _delta_problem(tensors: Mapping[str, Any], case: Any) -> Any:
    from linattn_verify.delta.problem import validate_delta

    return validate_delta(
        tensors["q"],
        tensors["k"],
        tensors["v"],
        tensors["beta"],
        tensors.get("g"),
        scale=case.scale,
        l2norm_qk=case.l2norm_qk,
        initial_state=tensors.get("initial_state"),
        output_final_state=case.output_final_state,
        cu_seqlens=tensors.get("cu_seqlens"),
        allow_negative_eigenvalues=case.negative_eigenvalues,
    )


def _delta_source(document: Any) -> Any:
    from linattn_verify.delta.targets import DeltaKernelSource

    return DeltaKernelSource.from_json(document)


def _delta_source_from_args(args: Any, *, on_cuda: bool) -> Any:
    from linattn_verify.delta.targets import delta_source_from_args

    return delta_source_from_args(args, on_cuda=on_cuda)


def _linear_drift(kernel: Any, settings: Any) -> Any:
    from linattn_verify.drift_families import LinearDriver

    return LinearDriver(kernel, settings)


def _delta_drift(kernel: Any, settings: Any) -> Any:
    from linattn_verify.drift_families import DeltaDriver

    return DeltaDriver(kernel, settings)


def _delta_library(library: str) -> list[Any]:
    from linattn_verify.delta.fla import fla_delta_kernels

    return fla_delta_kernels() if library == "fla" else []


FAMILIES: dict[str, Family] = {
    "linear_attn": Family(
        name="linear_attn",
        description="linear attention: decay none/scalar/vector (GLA), normalized or not, "
        "feature maps",
        properties=_linear_properties,
        cases_for=_linear_cases,
        narrowed=_linear_narrowed,
        case_type=_linear_case_type,
        problem_from_tensors=_linear_problem,
        source_from_json=_linear_source,
        source_from_args=_linear_source_from_args,
        library_kernels=_linear_library,
        drift_driver=_linear_drift,
        reach=True,
        diagnose=True,
    ),
    "delta": Family(
        name="delta",
        description="the delta rule: DeltaNet (no gate), Gated DeltaNet (scalar gate), KDA "
        "(vector gate)",
        properties=_delta_properties,
        cases_for=_delta_cases,
        narrowed=_delta_narrowed,
        case_type=_delta_case_type,
        problem_from_tensors=_delta_problem,
        source_from_json=_delta_source,
        source_from_args=_delta_source_from_args,
        library_kernels=_delta_library,
        drift_driver=_delta_drift,
    ),
}
"""Every family, by name."""


def source_from_json(document: Any) -> Any:
    """Rebuild a kernel source saved by ``check`` (its ``family`` key; linear before it existed).

    Raises:
        InvalidArgument: if the document names no known family or is malformed.
    """
    name = document.get("family", "linear_attn") if isinstance(document, Mapping) else None
    return family_named(name).source_from_json(document)


__all__ = ["FAMILIES", "Family", "family_named", "family_of", "is_case", "source_from_json"]
