# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels declared in a TOML manifest, each exactly as ``linattn-verify check`` would take it.

A manifest lists third-party kernels with the ``check`` flags that declare them, so that a team
can soak its own kernels (``soak --manifest FILE``) and a test can check them, with one
declaration for both. Each table of the ``kernel`` array:

.. code-block:: toml

    [[kernel]]
    name = "cumsum"                                  # unique in the file
    target = "linear_attn/cumsum.py:cumsum_attn"     # relative to the manifest, or pkg.mod:fn
    flags = ["--form", "recurrent", "--causal-exact"]   # check's declaration flags, nothing else
    ci = true                                        # optional: in CI's sample (default false)
    style = "how it is written"                      # optional: one line for a reader

The kernel is registered under ``<manifest stem>/<name>`` (``linear_attn/cumsum`` for
``tests/corpus/linear_attn.toml``), so soak states and reports name it apart from the kernels of
other manifests.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from linattn_verify.errors import InvalidArgument

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KEYS = {"name": str, "target": str, "flags": list, "ci": bool, "style": str}
"""The keys of a manifest entry and their TOML types (``ci`` and ``style`` optional)."""

SEARCH_FLAGS = ("--budget", "--timeout", "--seed", "--report", "--max-seq-len", "--json")
"""``check`` flags that steer a search rather than declare the kernel: not in a manifest."""


class _Parser(argparse.ArgumentParser):
    """A parser whose errors are `InvalidArgument`s (a manifest is no command line)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgument(message)


def _declaration_parser(family: str) -> argparse.ArgumentParser:
    from linattn_verify.cli.check import add_target_flags

    parser = _Parser(prog="manifest", add_help=False)
    parser.add_argument("target")
    add_target_flags(parser, family)
    # What `source_from_args` reads besides the declaration: the per-call timeout.
    parser.set_defaults(timeout=60.0)
    return parser


@dataclass(frozen=True)
class ManifestEntry:
    """One kernel of a manifest.

    Attributes:
        name: Its registered name, ``<manifest stem>/<name>``.
        target: ``path/to/file.py:function`` (absolute) or ``package.module:function``.
        flags: The ``check`` flags that declare it.
        ci: Whether it is in CI's sample.
        style: How it is written, in one line.
    """

    name: str
    target: str
    flags: tuple[str, ...]
    ci: bool = False
    style: str = ""

    @property
    def argv(self) -> list[str]:
        """The ``linattn-verify check`` arguments that check it (without search flags)."""
        return [self.target, *self.flags]

    def source(self, *, on_cuda: bool = False) -> Any:
        """The kernel's source, as ``check`` builds it from the flags and the signature.

        Raises:
            InvalidArgument: naming the entry, if its flags or its target are wrong.
        """
        from linattn_verify.cli._args import family_in, foreign_flags
        from linattn_verify.core.family import family_named

        try:
            family = family_in(self.argv)
            if foreign := foreign_flags(self.argv, family):
                raise InvalidArgument(f"Got {', '.join(foreign)} with --family {family}.")
            args = _declaration_parser(family).parse_args(self.argv)
            return family_named(args.family).source_from_args(args, on_cuda=on_cuda)
        except InvalidArgument as exc:
            raise InvalidArgument(f"manifest kernel {self.name!r}: {exc}") from None

    def kernel(self) -> Any:
        """The kernel under test, registered under `name`."""
        import torch

        return replace(self.source(on_cuda=torch.cuda.is_available()).load(), name=self.name)


def load_manifest(path: Path | str) -> list[ManifestEntry]:
    """Read a manifest (module docstring).

    Raises:
        InvalidArgument: naming the file and the entry, for a file that cannot be read, a
            missing or mistyped key, a duplicate name, or a search flag among the flags.
    """
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgument(f"Got manifest {str(path)!r}, but it cannot be read: {exc}") from None
    tables = document.get("kernel")
    if not isinstance(tables, list) or not tables:
        raise InvalidArgument(
            f"Got manifest {str(path)!r}, but it has no [[kernel]] tables (see "
            "`linattn_verify.cli.manifest`)."
        )
    entries: list[ManifestEntry] = []
    for index, table in enumerate(tables):
        entries.append(_entry(path, index, table))
    names = [e.name for e in entries]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise InvalidArgument(f"Got manifest {str(path)!r} with duplicate names {duplicates}.")
    return entries


def _entry(path: Path, index: int, table: Any) -> ManifestEntry:
    where = f"manifest {str(path)!r}, kernel {index + 1}"
    if not isinstance(table, dict):
        raise InvalidArgument(f"{where}: expected a table, got {table!r}.")
    if unknown := sorted(set(table) - set(KEYS)):
        raise InvalidArgument(f"{where}: unknown keys {unknown}; the keys are {sorted(KEYS)}.")
    for key, kind in KEYS.items():
        required = key in ("name", "target", "flags")
        if key not in table:
            if required:
                raise InvalidArgument(f"{where}: the key {key!r} is missing.")
            continue
        if not isinstance(table[key], kind):
            raise InvalidArgument(
                f"{where}: expected {key} to be a {kind.__name__} but got {table[key]!r}."
            )
    flags = table["flags"]
    if not all(isinstance(f, str) for f in flags):
        raise InvalidArgument(f"{where}: expected flags to be strings but got {flags!r}.")
    if steering := [f for f in flags if f.split("=")[0] in SEARCH_FLAGS]:
        raise InvalidArgument(
            f"{where}: {steering} steer a search, not declare a kernel; give them to the command."
        )
    target = table["target"]
    location, sep, function = target.rpartition(":")
    if location.endswith(".py") and not Path(location).is_absolute():
        target = f"{(path.parent / location).resolve()}{sep}{function}"
    return ManifestEntry(
        name=f"{path.stem}/{table['name']}",
        target=target,
        flags=tuple(flags),
        ci=bool(table.get("ci", False)),
        style=str(table.get("style", "")),
    )


def manifest_kernels(paths: Sequence[Path]) -> list[Any]:
    """Every kernel of every manifest in ``paths`` (`ManifestEntry.kernel`)."""
    return [entry.kernel() for path in paths for entry in load_manifest(path)]


__all__ = ["ManifestEntry", "load_manifest", "manifest_kernels"]
