# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear family's kernel source: a `TargetSource` with its declared form.

What ``check`` builds from its flags and ``replay`` rebuilds from a saved failure
(`linattn_verify.core.source`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from linattn_verify.core.source import TargetSource, tuples_in
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.typing import Form


@dataclass(frozen=True)
class KernelSource(TargetSource[Kernel]):
    """A third-party linear-attention kernel as the user named and described it.

    Besides `TargetSource`'s fields (target, capabilities, recipe, timeout, inferred):

    Attributes:
        form: Its algorithm, if declared. Default: `None`.
    """

    capabilities: Capabilities
    recipe: PrecisionRecipe
    form: Form | None = None

    family: ClassVar[str] = "linear_attn"

    def kernel(self, fn: Callable[..., Any]) -> Kernel:
        """The declared `Kernel` of ``fn``."""
        return Kernel(
            name=self.target,
            fn=fn,
            capabilities=self.capabilities,
            recipe=self.recipe,
            form=self.form,
            source=self.resolved().to_json(),
        )

    def declaration_json(self) -> dict[str, Any]:
        """The declared form."""
        return {"form": self.form}

    @classmethod
    def declaration_from_json(cls, document: Mapping[str, Any]) -> dict[str, Any]:
        """Capabilities, recipe and form.

        A document saved before kernels declared their zero-denominator convention was checked
        under the one then imposed: 0 on a 0/0 row.
        """
        caps = tuples_in(document["capabilities"], Capabilities)
        caps.setdefault("zero_denominator", "zero")
        return {
            "capabilities": Capabilities(**caps),
            "recipe": PrecisionRecipe.from_dict(dict(document["recipe"])),
            "form": cast(Form | None, document.get("form")),
        }


__all__ = ["KernelSource"]
