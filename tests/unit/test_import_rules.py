# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The house's import rules, read from the source (ast), function-level imports included.

* The library never imports the CLI (``linattn_verify.cli``: only the CLI itself does) or the
  property catalogue (``linattn_properties``: found through entry points).
* The core (``linattn_verify.core``) imports nothing of the library but itself,
  ``linattn_verify.errors`` and the Triton interpreter's patches (``linattn_verify.interpreter``,
  which loading a third-party kernel needs): no family, no mode, no CLI, no catalogue.
* No import cycles: a lazy import that hides a cycle is still a cycle of the design.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_MAY_IMPORT = ("linattn_verify.core", "linattn_verify.errors", "linattn_verify.interpreter")


def module_graph(root: Path, package: str) -> dict[str, set[str]]:
    """``{module: the modules of package it imports}`` (absolute names, packages included)."""
    paths = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        paths[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import module`` imports the module; ``from module import name``
                # the module.
                found.update(
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names
                )
        graph[name] = {_known(m, paths) for m in found} - {None, name}  # type: ignore[misc]
        graph[name] |= {m for m in found if m.split(".")[0] != package}
    return graph


def _known(name: str, paths: dict[str, Path]) -> str | None:
    while name and name not in paths:
        name = name.rpartition(".")[0]
    return name or None


def rule_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks a rule of the module docstring, as ``importer -> imported``."""
    bad = []
    for importer, imported in sorted(graph.items()):
        for target in sorted(imported):
            catalogue = target.split(".")[0] == "linattn_properties"
            cli = target.startswith("linattn_verify.cli") and not importer.startswith(
                "linattn_verify.cli"
            )
            core = (
                importer.startswith("linattn_verify.core")
                and target.startswith("linattn_verify")
                and not target.startswith(CORE_MAY_IMPORT)
            )
            if catalogue or cli or core:
                bad.append(f"{importer} -> {target}")
    return bad


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the package's modules, or `None`."""
    inside = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    try:
        graphlib.TopologicalSorter(inside).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_library_keeps_the_import_rules() -> None:
    assert rule_violations(module_graph(ROOT, "linattn_verify")) == []


def test_the_library_has_no_import_cycle() -> None:
    assert cycle_in(module_graph(ROOT, "linattn_verify")) is None


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("core/family.py", "from linattn_verify.delta import kernel\n", "core"),
        ("reach.py", "def f():\n    from linattn_verify.cli import check\n", "cli"),
        ("running.py", "import linattn_properties.delta\n", "catalogue"),
        ("a.py", "from . import b\n", "cycle"),
    ],
)
def test_the_rules_catch_what_they_forbid(
    tmp_path: Path, module: str, source: str, broken: str
) -> None:
    # A small tree with one forbidden import (a cycle: a -> b -> a) must be caught.
    package = tmp_path / "linattn_verify"
    for name in ("__init__.py", "core/__init__.py", "cli/__init__.py", "b.py", "errors.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    (package / "b.py").write_text("from linattn_verify import a\n")
    (package / module).write_text(source)
    graph = module_graph(tmp_path, "linattn_verify")
    if broken == "cycle":
        assert cycle_in(graph) is not None
    else:
        assert rule_violations(graph), graph
