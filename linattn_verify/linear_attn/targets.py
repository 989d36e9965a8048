# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels under test named by a target string, loadable again anywhere.

A `KernelSource` is a target (``package.module:function`` or ``path/to/file.py:function``,
loaded by `linattn_verify.core.loading`) plus everything the user declared about it (capabilities,
precision recipe, form, per-call timeout): it is picklable and JSON-serializable, so the same
kernel can be rebuilt in a child process (`linattn_verify.isolation`) or, from a saved failure,
by ``linattn-verify replay``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

from linattn_verify.core.loading import load_kernel_function, with_timeout
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.typing import Form


@dataclass(frozen=True)
class KernelSource:
    """A third-party kernel as the user named and described it.

    Attributes:
        target: ``package.module:function`` or ``path/to/file.py:function`` (a relative path is
            taken from the directory the source was made in; `resolved` makes it absolute).
        capabilities: What the user declared it supports.
        recipe: How the user declared it rounds.
        form: Its algorithm, if declared.
        timeout: Seconds one call may take (0: no limit).
        inferred: What was read off its signature rather than declared (``check``'s
            ``assumed:`` header prints it). Default: `()`.
    """

    target: str
    capabilities: Capabilities
    recipe: PrecisionRecipe
    form: Form | None = None
    timeout: float = 60.0
    inferred: tuple[str, ...] = ()

    def resolved(self) -> KernelSource:
        """Return this source with a file target's path made absolute (valid from any cwd)."""
        where, sep, name = self.target.rpartition(":")
        if not where.endswith(".py"):
            return self
        return replace(self, target=f"{Path(where).resolve()}{sep}{name}")

    def load(self) -> Kernel:
        """Import the target (`load_kernel_function`) as a `Kernel` with the per-call timeout.

        Raises:
            InvalidArgument: if the target cannot be loaded.
        """
        kernel = Kernel(
            name=self.target,
            fn=load_kernel_function(self.target),
            capabilities=self.capabilities,
            recipe=self.recipe,
            form=self.form,
            source=self.resolved().to_json(),
        )
        return with_timeout(kernel, self.timeout)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (inverse: `from_json`)."""
        return {
            "target": self.target,
            "capabilities": asdict(self.capabilities),
            "recipe": asdict(self.recipe),
            "form": self.form,
            "timeout": self.timeout,
            "inferred": list(self.inferred),
        }

    @classmethod
    def from_json(cls, document: Any) -> KernelSource:
        """Rebuild a source from `to_json`'s dict.

        Raises:
            InvalidArgument: if ``document`` is not such a dict.
        """
        try:
            caps = dict(document["capabilities"])
            # A source saved before kernels declared their zero-denominator convention was
            # checked under the one the harness then imposed: 0 on a 0/0 row.
            caps.setdefault("zero_denominator", "zero")
            for name in (f.name for f in fields(Capabilities)):
                if isinstance(caps.get(name), list):
                    caps[name] = tuple(caps[name])
            recipe = dict(document["recipe"])
            return cls(
                target=str(document["target"]),
                capabilities=Capabilities(**caps),
                recipe=PrecisionRecipe.from_dict(recipe),
                form=cast(Form | None, document.get("form")),
                timeout=float(document.get("timeout", 60.0)),
                inferred=tuple(str(x) for x in document.get("inferred", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidArgument):
                raise
            raise InvalidArgument(
                f"Expected a kernel source (target, capabilities, recipe) but got {document!r}: "
                f"{exc!r}."
            ) from None


__all__ = ["KernelSource"]
