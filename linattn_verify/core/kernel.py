# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a kernel under test is, in every family: a named function, its declaration and options.

Each family's kernel type (`linattn_verify.linear_attn.kernel.Kernel`,
`linattn_verify.delta.kernel.DeltaKernel`) subclasses `KernelBase` with its capabilities and
recipe types and adds what only it needs (its calling convention, its contract checks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, TypeVar

import torch

CapabilitiesT = TypeVar("CapabilitiesT")
RecipeT = TypeVar("RecipeT")
KernelSelf = TypeVar("KernelSelf", bound="KernelBase[Any, Any]")


@dataclass(frozen=True)
class KernelBase(Generic[CapabilitiesT, RecipeT]):
    """A kernel under test.

    Attributes:
        name: Unique name, ``"<library>/<kernel>"`` (e.g. ``"triton/chunk"``).
        fn: The callable, in its family's calling convention.
        capabilities: What it supports (the family's capabilities dataclass).
        recipe: Its precision recipe (the family's recipe dataclass, with a ``chunk_size``
            field), fixed or as a function of the input dtype.
        options: Extra keywords passed on every call (e.g. ``{"chunk_size": 32}``).
        source: How to load it again where it is not registered (its kernel source as JSON,
            `linattn_verify.core.source.TargetSource.to_json`): saved with its failures so
            that ``linattn-verify replay`` can rebuild a kernel given to ``check``. Default:
            `None`.
    """

    name: str
    fn: Callable[..., Any]
    capabilities: CapabilitiesT
    recipe: RecipeT | Callable[[torch.dtype], RecipeT]
    options: Mapping[str, Any] = field(default_factory=dict)
    source: Mapping[str, Any] | None = None

    family: ClassVar[str]

    def precision_recipe(self, dtype: torch.dtype) -> RecipeT:
        """Return the recipe for inputs of ``dtype``.

        A ``chunk_size=`` call option (`with_options`) overrides the declared recipe's chunk
        size: the rounding counts of a chunked form depend on the C the kernel runs with.
        """
        declared = self.recipe
        recipe: RecipeT = declared(dtype) if callable(declared) else declared
        chunk_size = self.options.get("chunk_size")
        if isinstance(chunk_size, int) and not isinstance(chunk_size, bool):
            recipe = replace(recipe, chunk_size=chunk_size)  # type: ignore[type-var]
        return recipe

    def with_options(self: KernelSelf, name: str, **options: Any) -> KernelSelf:
        """Return this kernel with extra call keywords, under a new name."""
        return replace(self, name=name, options={**self.options, **options})
