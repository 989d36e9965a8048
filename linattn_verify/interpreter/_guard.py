# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Version guards and attribute bookkeeping shared by the interpreter patches.

Every patch replaces private Triton internals. A patch names the Triton versions it was
written for and the dotted paths it touches; `check` refuses to apply it when either does not
hold, because a patch that silently stops matching the interpreter would leave a kernel
running on the very gaps the patch exists to close. An internal that only some of those
versions have, and that the patch touches only there, is listed as a `Versioned` requirement.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

_MISSING = object()


class InterpreterPatchError(RuntimeError):
    """A patch cannot be applied to the installed Triton (version or internals differ).

    Attributes:
        installed: The installed Triton's version.
        supported: The range the patch was written for (``">=3.7,<3.10"``), or `None` where
            the version is in range but the internals differ.
    """

    def __init__(self, message: str, *, installed: str, supported: str | None = None) -> None:
        super().__init__(message)
        self.installed = installed
        self.supported = supported


VersionRange: TypeAlias = tuple[tuple[int, int], tuple[int, int]]
"""``((major, minor), (major, minor))``: the first version included and the first excluded."""


def span(versions: VersionRange) -> str:
    """Spell a version range the way pip does: ``">=3.7,<3.10"``."""
    lo, hi = versions
    return f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}"


@dataclass(frozen=True)
class Versioned:
    """An internal a patch needs (and touches) only on the Triton versions in ``versions``.

    Attributes:
        path: The internal's dotted path.
        versions: The half-open ``(major, minor)`` range on which it is required.
    """

    path: str
    versions: VersionRange

    def applies(self, version: tuple[int, ...]) -> bool:
        """Whether the requirement holds for ``version`` (only major and minor are compared)."""
        lo, hi = self.versions
        return lo <= version[:2] < hi

    def __str__(self) -> str:
        return f"{self.path} (triton {span(self.versions)})"


Requirement: TypeAlias = str | Versioned
"""A dotted path required on every version of a patch's range, or a `Versioned` one."""


def required(requires: Sequence[Requirement], version: tuple[int, ...]) -> list[str]:
    """The dotted paths among ``requires`` that must exist on Triton ``version``."""
    return [
        r if isinstance(r, str) else r.path
        for r in requires
        if isinstance(r, str) or r.applies(version)
    ]


def triton_version() -> tuple[int, int, int]:
    """Return the installed Triton's ``(major, minor, patch)``; pre-release tags are dropped."""
    import triton

    parts = [int(p) for p in re.findall(r"\d+", str(triton.__version__))[:3]]
    parts += [0] * (3 - len(parts))
    return (parts[0], parts[1], parts[2])


def resolve(dotted: str) -> Any:
    """Return the object at ``dotted`` (``package.module.Class.attribute``).

    Raises:
        AttributeError: when a part of the path does not exist.
    """
    parts = dotted.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise AttributeError(f"no importable module in {dotted!r}")


def check(patch: str, versions: VersionRange, requires: Sequence[Requirement]) -> None:
    """Refuse a patch whose Triton version range or private internals do not match.

    Args:
        patch: The patch's name, for the message.
        versions: ``((major, minor), (major, minor))``: the first version it was written for and
            the first it was not (half-open range).
        requires: Dotted paths of the internals it replaces or calls; a `Versioned` one is
            checked only on the versions it names.

    Raises:
        InterpreterPatchError: naming the patch, the range or the missing internals.
    """
    (lo, hi), found = versions, triton_version()
    installed = ".".join(map(str, found))
    if not lo <= found[:2] < hi:
        supported = span(versions)
        raise InterpreterPatchError(
            f"Interpreter patch {patch!r} was written for triton {supported} but triton "
            f"{installed} is installed. It patches private internals "
            f"({', '.join(map(str, requires))}); "
            "check that they still behave as described in the patch's docstring before "
            "widening its range.",
            installed=installed,
            supported=supported,
        )
    missing = []
    for dotted in required(requires, found):
        try:
            resolve(dotted)
        except (AttributeError, ImportError):
            missing.append(dotted)
    if missing:
        raise InterpreterPatchError(
            f"Interpreter patch {patch!r} cannot be applied: triton {installed} lacks the "
            f"private internals it needs: {', '.join(missing)}.",
            installed=installed,
        )


class Restorer:
    """Set attributes and remember the originals so that `restore` can undo them."""

    def __init__(self) -> None:
        self._changes: list[tuple[object, str, object]] = []

    def set(self, obj: object, name: str, value: object) -> None:
        """Set ``obj.name = value``, remembering the previous value (or its absence)."""
        self._changes.append((obj, name, obj.__dict__.get(name, _MISSING)))
        setattr(obj, name, value)

    def restore(self) -> None:
        """Undo every `set`, newest first."""
        while self._changes:
            obj, name, original = self._changes.pop()
            if original is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, original)
