# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A third-party kernel as the user named and declared it, loadable again anywhere.

A `TargetSource` is a target (``package.module:function`` or ``path/to/file.py:function``,
loaded by `linattn_verify.core.loading`) plus everything the user declared about it: its
capabilities, its precision recipe, a per-call timeout. It is picklable and JSON-serializable,
so the same kernel can be rebuilt in a child process (`linattn_verify.isolation`) or, from a
saved failure, by ``linattn-verify replay``. Each family subclasses it with its capabilities and
recipe types and says how they read back from JSON and how they make its kernel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from linattn_verify.core.loading import load_kernel_function, with_timeout
from linattn_verify.core.placement import on_device
from linattn_verify.errors import InvalidArgument

KernelT = TypeVar("KernelT")
SourceT = TypeVar("SourceT", bound="TargetSource[Any]")


def tuples_in(document: Mapping[str, Any], dataclass_type: type) -> dict[str, Any]:
    """``document`` with its lists as tuples where they are fields of ``dataclass_type``.

    JSON has no tuples; the capabilities dataclasses hold tuples (hashable, immutable).
    """
    names = {f.name for f in fields(dataclass_type)}
    return {k: tuple(v) if k in names and isinstance(v, list) else v for k, v in document.items()}


@dataclass(frozen=True)
class TargetSource(ABC, Generic[KernelT]):
    """A kernel named by a target and declared by the user.

    Attributes:
        target: ``package.module:function`` or ``path/to/file.py:function`` (a relative path is
            taken from the directory the source was made in; `resolved` makes it absolute).
        capabilities: What the user declared it supports (the family's capabilities type).
        recipe: How the user declared it rounds (the family's recipe type).
        timeout: Seconds one call may take (0: no limit). Default: `60.0`.
        inferred: What was read off its signature rather than declared (``check``'s
            ``assumed:`` header prints it). Default: `()`.
        device: Where it computes (``"cpu"``, ``"cuda"``, ``"cuda:1"``): `load` places it there
            (`linattn_verify.core.placement.on_device`). Default: `"cpu"`.
    """

    target: str
    capabilities: Any
    recipe: Any
    timeout: float = 60.0
    inferred: tuple[str, ...] = ()
    device: str = "cpu"

    family: ClassVar[str]

    @abstractmethod
    def kernel(self, fn: Callable[..., Any]) -> KernelT:
        """The family's kernel of ``fn`` as declared (named by the target, without a timeout)."""

    @classmethod
    @abstractmethod
    def declaration_from_json(cls, document: Mapping[str, Any]) -> dict[str, Any]:
        """The family's fields (capabilities, recipe, ...) read back from `to_json`'s dict."""

    def declaration_json(self) -> dict[str, Any]:
        """Fields of the family's own beyond the shared ones, JSON-ready. Default: none."""
        return {}

    def resolved(self: SourceT) -> SourceT:
        """This source with a file target's path made absolute (valid from any cwd)."""
        where, sep, name = self.target.rpartition(":")
        if not where.endswith(".py"):
            return self
        return replace(self, target=f"{Path(where).resolve()}{sep}{name}")

    def load(self) -> KernelT:
        """Import the target (`load_kernel_function`) as the family's kernel, with the timeout.

        Raises:
            InvalidArgument: if the target cannot be loaded.
        """
        kernel = self.kernel(load_kernel_function(self.target))
        if self.device != "cpu":
            kernel = on_device(kernel, self.device)
        return with_timeout(kernel, self.timeout)  # type: ignore[type-var]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (inverse: `from_json`), naming its family."""
        return {
            "family": self.family,
            "target": self.target,
            "capabilities": asdict(self.capabilities),
            "recipe": asdict(self.recipe),
            "timeout": self.timeout,
            "inferred": list(self.inferred),
            "device": self.device,
            **self.declaration_json(),
        }

    @classmethod
    def from_json(cls: type[SourceT], document: Any) -> SourceT:
        """Rebuild a source from `to_json`'s dict.

        Raises:
            InvalidArgument: if ``document`` is not such a dict.
        """
        try:
            return cls(
                target=str(document["target"]),
                timeout=float(document.get("timeout", 60.0)),
                inferred=tuple(str(x) for x in document.get("inferred", ())),
                device=str(document.get("device", "cpu")),
                **cls.declaration_from_json(document),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidArgument):
                raise
            raise InvalidArgument(
                f"Expected a {cls.family} kernel source (target, capabilities, recipe) but got "
                f"{document!r}: {exc!r}."
            ) from None
