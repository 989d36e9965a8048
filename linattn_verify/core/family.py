# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The `Family` interface and the registry of families (entry points, as Hypothesis's plugins).

A *family* is one recurrence with its options: ``linear_attn`` (linear attention with scalar or
vector gates, normalized or not, feature maps) and ``delta`` (the delta rule: DeltaNet, Gated
DeltaNet, KDA) ship with linattn-verify. Its kernels, cases and problems carry a ``family``
attribute, and everything the shared machinery (the search, the runner, failures and replay, the
CLI, the report) needs from a family it asks the `Family` found by `family_of`: no shared code
branches on a family's name or imports a family.

A package adds a family by subclassing `Family` and naming the subclass in its metadata::

    [project.entry-points."linattn_verify.families"]
    my_family = "my_package.family:MyFamily"

Its properties are found the same way, under ``linattn_verify.properties.<family name>``
(`Family.properties`).
"""

from __future__ import annotations

import argparse
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from linattn_verify.errors import InvalidArgument

if TYPE_CHECKING:
    import torch
    from hypothesis.strategies import SearchStrategy

    from linattn_verify.core.recipe_steps import Ladders

FAMILY_ENTRY_POINT_GROUP = "linattn_verify.families"
"""The entry-point group naming each family's `Family` subclass."""

PROPERTIES_GROUP_PREFIX = "linattn_verify.properties"
"""Property entry points of family NAME live in ``linattn_verify.properties.NAME``; each names a
callable that returns ``{property name: (case, kernel) -> PropertyResult}``."""


@runtime_checkable
class FamilyKernel(Protocol):
    """What shared code reads off a kernel of any family."""

    name: str
    family: ClassVar[str]

    @property
    def form(self) -> str | None:
        """Its algorithm (``recurrent``, ``chunk``, ...), or `None` when unknown."""

    @property
    def capabilities(self) -> Any:
        """What it supports (a dataclass): at least ``dtypes`` and ``backward``."""

    def precision_recipe(self, dtype: torch.dtype) -> Any:
        """How it rounds in ``dtype`` (a dataclass, shown in reports)."""


@runtime_checkable
class FamilyCase(Protocol):
    """What shared code reads off a case of any family (a frozen dataclass)."""

    family: ClassVar[str]
    seed: int
    dtype: str
    T: int
    K: int
    V: int

    def describe(self) -> str:
        """One line naming the case (shapes, dtype, options, values)."""

    def build(self) -> Any:
        """The family's problem: its tensors, built from the seed."""


class KernelSource(Protocol):
    """How to load a kernel given to ``check`` again (saved with its failures for ``replay``)."""

    @property
    def target(self) -> str:
        """Where its function is: ``package.module:function`` or ``path/file.py:function``."""

    @property
    def timeout(self) -> float:
        """Seconds one call may take (0: no limit)."""

    @property
    def capabilities(self) -> Any:
        """What the declaration says it supports."""

    @property
    def recipe(self) -> Any:
        """How the declaration says it rounds."""

    @property
    def inferred(self) -> tuple[str, ...]:
        """What was read off its signature, one line each."""

    def load(self) -> Any:
        """The kernel (a `FamilyKernel`)."""

    def to_json(self) -> dict[str, Any]:
        """The document `Family.source_from_json` reads back (its ``family`` key included)."""


PropertyFunction = Callable[[Any, Any], Any]
"""A per-kernel property: ``(case, kernel) -> PropertyResult``."""

KernelT = TypeVar("KernelT")
CaseT = TypeVar("CaseT")
ProblemT = TypeVar("ProblemT")


class Family(ABC, Generic[KernelT, CaseT, ProblemT]):
    """What one family provides to the shared machinery, typed by its kernel, case and problem.

    Subclasses (``class DeltaFamily(Family[DeltaKernel, DeltaCase, DeltaProblem])``) set `name`
    and `description` and implement the abstract methods; the others have defaults a small
    family can keep (no library adapters, no drift, no size reach, no recipe diagnosis). Shared
    code holds a ``Family[Any, Any, Any]`` and reads its kernels and cases through `FamilyKernel`
    and `FamilyCase`.
    """

    name: ClassVar[str]
    """The family's name (``check --family NAME``, the ``family`` of its kernels and cases)."""

    description: ClassVar[str]
    """One line for ``list``."""

    reach: ClassVar[bool] = False
    """Whether the size reach (`linattn_verify.reach`) checks its kernels (`reach_case`)."""

    def properties(self) -> dict[str, PropertyFunction]:
        """Its catalogue: every property offered under ``linattn_verify.properties.<name>``."""
        return dict(_properties(f"{PROPERTIES_GROUP_PREFIX}.{self.name}"))

    @abstractmethod
    def case_type(self) -> type[CaseT]:
        """Its case class (saved failures rebuild it from its fields)."""

    @abstractmethod
    def cases_for(
        self, kernel: KernelT, *, max_seq_len: int, max_head_dim: int, realistic: bool
    ) -> SearchStrategy[CaseT]:
        """The cases ``kernel`` declares it supports, within the size limits.

        Args:
            kernel: A kernel of this family.
            max_seq_len: Longest T drawn.
            max_head_dim: Largest K and V drawn.
            realistic: Draw only the value families of real inputs (``check``'s first round).
        """

    @abstractmethod
    def narrowed(self, kernel: KernelT, dtype: str, gates: Sequence[str]) -> KernelT | None:
        """``kernel`` drawing only ``dtype`` and those gate shapes, or `None` if none is left.

        What ``run`` judges per group (a dtype, the gate shapes asked for).
        """

    @abstractmethod
    def problem_from_tensors(self, tensors: Mapping[str, torch.Tensor], case: CaseT) -> ProblemT:
        """The problem of a saved failure, from its saved input tensors."""

    @abstractmethod
    def source_from_json(self, document: Mapping[str, Any]) -> KernelSource:
        """A kernel source saved by ``check`` (`KernelSource.to_json`).

        Raises:
            InvalidArgument: if the document is malformed.
        """

    @abstractmethod
    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """Add the flags that declare a kernel of this family (``check``, ``drift``, manifests).

        The flags every family shares (what the kernel supports, its exactness, the precision
        recipe) are added by the CLI; a family adds only its own, in its own argument group.
        """

    @abstractmethod
    def source_from_args(self, args: argparse.Namespace, *, on_cuda: bool) -> KernelSource:
        """The kernel ``check``'s flags describe (shared flags and this family's).

        Raises:
            InvalidArgument: naming the flag that does not fit, or the parameter the kernel's
                signature lacks for what was declared.
        """

    def library_kernels(self, library: str) -> list[KernelT]:
        """Kernels of a library that is not registered by default (``"fla"``), or none."""
        del library
        return []

    def drift_driver(self, kernel: KernelT, settings: Any) -> Any:
        """The driver ``linattn-verify drift`` measures ``kernel`` with.

        Raises:
            InvalidArgument: when the family has no long-context driver.
        """
        del kernel, settings
        raise InvalidArgument(f"The {self.name} family has no drift driver.")

    def reach_case(self, kernel: KernelT, size: Any, seed: int) -> CaseT:
        """A realistic case of the reach's ``size`` (T, K, V) that ``kernel`` supports.

        Only called where `reach` is true.
        """
        raise NotImplementedError(f"The {self.name} family has no size reach.")

    def error_shape(self, case: CaseT, kernel: KernelT) -> str | None:
        """What ``kernel``'s output on ``case`` looks like, where it is a known defect's shape.

        Called once per diagnosed failure (`linattn_verify.diagnosis.diagnose`), not per case:
        it may cost a kernel call and an oracle. `None` where nothing is recognised, or the
        family recognises nothing (the default).
        """
        del case, kernel
        return None

    def recipe_ladders(
        self, declared: Any, case: CaseT, kernel: KernelT, dtype: torch.dtype
    ) -> Ladders | None:
        """The changes to ``declared`` (``kernel``'s recipe for ``dtype``) a diagnosis tries.

        By axis, each ladder smallest first (`linattn_verify.core.recipe_steps`); `None` where
        the family has no recipe diagnosis (the default).
        """
        del declared, case, kernel, dtype
        return None


@functools.cache
def _properties(group: str) -> dict[str, PropertyFunction]:
    found: dict[str, PropertyFunction] = {}
    for entry in metadata.entry_points(group=group):
        found.update(entry.load()())
    return found


AnyFamily = Family[Any, Any, Any]
"""A family of any kernel, case and problem types (what shared code holds)."""

_EXTRA: dict[str, AnyFamily] = {}


@functools.cache
def _installed() -> dict[str, AnyFamily]:
    found: dict[str, AnyFamily] = {}
    for entry in metadata.entry_points(group=FAMILY_ENTRY_POINT_GROUP):
        cls = entry.load()
        if not (isinstance(cls, type) and issubclass(cls, Family)):
            raise InvalidArgument(
                f"The entry point {entry.name} = {entry.value!r} of {FAMILY_ENTRY_POINT_GROUP} "
                f"names {cls!r}, not a subclass of linattn_verify.core.Family."
            )
        found[cls.name] = cls()
    return found


def families() -> dict[str, AnyFamily]:
    """Every family, by name: the installed ones (entry points), then any `register_family`."""
    return {**_installed(), **_EXTRA}


def register_family(family: AnyFamily) -> None:
    """Add a family for this process (a test, a notebook) without installing an entry point.

    Raises:
        InvalidArgument: if ``family`` is not a `Family` or its name is taken.
    """
    if not isinstance(family, Family):
        raise InvalidArgument(f"Expected a linattn_verify.core.Family but got {family!r}.")
    if family.name in families():
        raise InvalidArgument(f"Got family {family.name!r}, but a family of that name exists.")
    _EXTRA[family.name] = family


def family_named(name: Any) -> AnyFamily:
    """The family called ``name``.

    Raises:
        InvalidArgument: naming the families there are.
    """
    known = families()
    if not isinstance(name, str) or name not in known:
        raise InvalidArgument(f"Got family {name!r}, but the families are {sorted(known)}.")
    return known[name]


def family_of(thing: Any) -> AnyFamily:
    """The family of a kernel, a case or a problem (by its ``family`` attribute).

    Raises:
        InvalidArgument: if ``thing`` names no known family.
    """
    return family_named(getattr(thing, "family", None))


def is_case(spec: Any) -> bool:
    """Whether ``spec`` is a case of one of the families."""
    family = families().get(getattr(type(spec), "family", None))  # type: ignore[arg-type]
    return family is not None and isinstance(spec, family.case_type())


def source_from_json(document: Any) -> KernelSource:
    """Rebuild a kernel source saved by ``check`` (its ``family`` key; linear before it existed).

    Raises:
        InvalidArgument: if the document names no known family or is malformed.
    """
    name = document.get("family", "linear_attn") if isinstance(document, Mapping) else None
    return family_named(name).source_from_json(document)


__all__ = [
    "FAMILY_ENTRY_POINT_GROUP",
    "PROPERTIES_GROUP_PREFIX",
    "AnyFamily",
    "Family",
    "FamilyCase",
    "FamilyKernel",
    "KernelSource",
    "PropertyFunction",
    "families",
    "family_named",
    "family_of",
    "is_case",
    "register_family",
    "source_from_json",
]
