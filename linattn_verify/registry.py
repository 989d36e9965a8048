# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernel registration: built-in kernels, `register()`, and the entry-point group.

An installed package offers kernels to linattn-verify (the CLI and the pytest plugin) through
the entry-point group ``linattn_verify.kernels``: each entry point names a callable that takes no
arguments and returns a `Kernel` or an iterable of them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING, cast

import torch

from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.results import PropertyResult
from linattn_verify.typing import FORMS, OWN_FEATURE_MAPS, Form

if TYPE_CHECKING:
    from linattn_verify.linear_attn.strategies import ProblemSpec

PropertyFunction = Callable[["ProblemSpec", Kernel], PropertyResult]
"""A per-kernel property: (case, kernel) -> result."""

FULL = Capabilities(
    normalize=(False, True),
    feature_maps=OWN_FEATURE_MAPS,
    configurable=True,
    decay=True,
    gates=("scalar", "vector"),
    varlen=True,
    zero_denominator="zero",
    deterministic=True,
    causal_exact=True,
    layout_exact=True,
)
"""Everything the function allows: what our Triton kernels and torch references support.

They return 0 where the exact denominator is 0 (``zero_denominator="zero"``, docs/design.md §3).
Every feature map, the lifted ones (docs/design.md §3) included. They promise every exactness
the catalogue can judge bit for bit: deterministic reruns, bit-exact causality (masked terms are
exact zeros, decays from exp of pairwise differences) and results independent of the memory
layout (every load goes through the strides)."""

ENTRY_POINT_GROUP = "linattn_verify.kernels"

AnyKernel = Kernel | DeltaKernel
"""A kernel of one of the families."""

_REGISTERED: dict[str, AnyKernel] = {}
_LOADED = False


def register(kernel: AnyKernel, *, replace: bool = False) -> AnyKernel:
    """Add ``kernel`` to the registry (names must be unique unless ``replace``) and return it.

    A kernel of any installed family (`Kernel`, `linattn_verify.delta.DeltaKernel`, a plug-in
    family's); names are unique across families.
    """
    if not _is_kernel(kernel):
        raise InvalidArgument(
            f"Expected a kernel of a family (a linattn_verify.Kernel, a DeltaKernel, or a kernel "
            f"whose family is installed) but got {type(kernel).__name__}."
        )
    if kernel.name in _REGISTERED and not replace:
        raise InvalidArgument(f"Got kernel name {kernel.name!r}, but it is already registered.")
    _REGISTERED[kernel.name] = kernel
    return kernel


def _is_kernel(thing: object) -> bool:
    """Whether ``thing`` is a kernel of an installed family (`linattn_verify.core.FamilyKernel`)."""
    from linattn_verify.core.family import FamilyKernel, families

    return isinstance(thing, FamilyKernel) and thing.family in families()


def triton_kernels() -> list[Kernel]:
    """Return our Triton kernels: the three forms, every semantic variant configurable."""
    from linattn_kernels.linear_attn import FORMS, precision_recipes

    kernels = []
    for form, fn in FORMS.items():
        # A lifted map goes through a separate Triton step (linattn_kernels.lifted) whose F x V
        # state the forms hold in one tile, F <= 256; the parallel form fuses the score maps
        # where no state is involved.
        cap = replace(FULL, max_feature_dim=256)
        if form == "chunk":
            cap = replace(cap, chunk_sizes=(16, 32, 64, 128))
        kernels.append(
            Kernel(
                name=f"triton/{form}",
                fn=fn,
                capabilities=cap,
                form=cast(Form, form),
                recipe=_declared_recipe(precision_recipes[form]),
            )
        )
    return kernels


def _declared_recipe(
    declare: Callable[..., dict[str, object]],
) -> Callable[[torch.dtype], PrecisionRecipe]:
    """Turn a kernel module's ``precision_recipe(dtype) -> dict`` into recipes."""

    def recipe(dtype: torch.dtype) -> PrecisionRecipe:
        return PrecisionRecipe.from_dict(declare(dtype))

    return recipe


def reference_kernels() -> list[Kernel]:
    """Return the float32 torch reference forms (correct kernels with known recipes)."""
    from linattn_verify.linear_attn.reference_kernels import RECIPES, float32_reference

    forms: tuple[Form, ...] = FORMS
    return [
        Kernel(
            name=f"torch/{form}",
            fn=float32_reference(form),
            capabilities=FULL,
            recipe=RECIPES[form],
            form=form,
        )
        for form in forms
    ]


def delta_triton_kernels() -> list[DeltaKernel]:
    """Return our Triton delta-rule kernels, declared (`linattn_verify.delta.triton_kernels`)."""
    from linattn_verify.delta.triton_kernels import delta_chunk_kernel, delta_recurrent_kernel

    return [delta_recurrent_kernel(), delta_chunk_kernel()]


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from linattn_verify.delta.reference_kernels import delta_reference_kernels

    builtin: list[AnyKernel] = [*triton_kernels(), *reference_kernels()]
    for kernel in [*builtin, *delta_reference_kernels(), *delta_triton_kernels()]:
        _REGISTERED.setdefault(kernel.name, kernel)
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        offered = entry.load()()
        for kernel in [offered] if _is_kernel(offered) else list(offered):
            register(kernel)


def registered_kernels(family: str | None = None) -> dict[str, AnyKernel]:
    """Return the registered kernels by name (built-ins, entry points, `register()` calls).

    Args:
        family: Only the kernels of this family (``"linear_attn"``, ``"delta"``); `None`: all.
            Default: `None`.
    """
    _load()
    return {n: k for n, k in _REGISTERED.items() if family is None or k.family == family}


def get_kernel(name: str) -> AnyKernel:
    """Return the registered kernel called ``name``."""
    kernels = registered_kernels()
    if name not in kernels:
        raise InvalidArgument(
            f"Got kernel {name!r}, but the registered kernels are {sorted(kernels)}."
        )
    return kernels[name]


def kernels_matching(names: Iterable[str], family: str | None = None) -> list[AnyKernel]:
    """Return the registered kernels (of ``family``, or all) whose names match a glob."""
    kernels = registered_kernels(family)
    chosen = [k for n, k in kernels.items() if any(fnmatch.fnmatch(n, p) for p in names)]
    if not chosen:
        raise InvalidArgument(
            f"No registered kernel matches {list(names)}; registered: {sorted(kernels)}."
        )
    return chosen


def registered_properties(family: str = "linear_attn") -> dict[str, PropertyFunction]:
    """Return the per-kernel properties of ``family`` (`linattn_verify.core.Family.properties`).

    Each entry point of ``linattn_verify.properties.<family>`` names a callable returning
    ``{name: property_function}``; the project's own catalogue (`linattn_properties.catalogue`)
    is one of them. Each call returns a fresh dict.

    Raises:
        InvalidArgument: if ``family`` names no family.
    """
    from linattn_verify.core.family import family_named

    return family_named(family).properties()


__all__ = [
    "ENTRY_POINT_GROUP",
    "delta_triton_kernels",
    "get_kernel",
    "kernels_matching",
    "reference_kernels",
    "register",
    "registered_kernels",
    "registered_properties",
    "triton_kernels",
]
