# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo as ``linattn-verify check`` targets: ``tests/zoo/cli_targets.py:<name>``.

A zoo kernel takes ``normalize=`` and ``feature_map=`` keywords; a third-party kernel under
``check`` has one fixed semantics, declared by flags. `CONFIGS` fixes each kernel's semantics
(normalized for the normalization row, plain otherwise) and `flags` gives the matching command
line. Every broken kernel of `bugs.py` and those of `vector_bugs.py` in `VECTOR_TARGETS` are
exported under their zoo names, every twin as ``twin_<name>``.

Loaded by file path (by the CLI and by `test_zoo_cli.py`), so the zoo's kernels are loaded the
same way (`linattn_verify.core.loading.import_file`) rather than imported.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from linattn_verify.core.loading import import_file

VECTOR_TARGETS = ("zoo/vector_tail_gate_dropped", "zoo/vector_gate_head_first")
"""The vector-gate kernels checked through the command line (``--decay=vector``): two, with their
twin; `test_zoo.py` searches all six with the catalogue, and a minute of CI is not spent on
running the other four through ``check`` as well."""

_VECTOR_ZOO = import_file(
    Path(__file__).with_name("vector_bugs.py"), "_linattn_zoo_vector_kernels"
).VECTOR_ZOO
ZOO = import_file(Path(__file__).with_name("bugs.py"), "_linattn_zoo_kernels").ZOO + tuple(
    e for e in _VECTOR_ZOO if e.broken.name in VECTOR_TARGETS
)

CONFIGS: dict[str, dict[str, Any]] = {
    e.broken.name.removeprefix("zoo/"): {"normalize": e.bug_class == "normalization"} for e in ZOO
}
"""Per zoo kernel (name without ``zoo/``), the semantics it is checked with."""

SIZE_ONLY = frozenset(e.broken.name.removeprefix("zoo/") for e in ZOO if e.size_only)
"""Zoo kernels wrong only at sizes the capped search never draws: checked without caps."""


def flags(name: str) -> list[str]:
    """The ``check`` flags that declare what the zoo kernel ``name`` and its twin compute."""
    (entry,) = [e for e in ZOO if e.broken.name == f"zoo/{name}"]
    recipe, cap = entry.twin.recipe, entry.twin.capabilities
    declared = ["--form", recipe.form, "--chunk-size", str(recipe.chunk_size)]
    declared += ["--dtypes", ",".join(cap.dtypes)]
    for flag, on in (
        ("--decay=scalar", cap.decay and cap.gates == ("scalar",)),
        ("--decay=vector", cap.decay and cap.gates == ("vector",)),
        ("--varlen", cap.varlen),
        ("--no-initial-state", not cap.initial_state),
        ("--no-final-state", not cap.final_state),
        ("--no-backward", not cap.backward),
        ("--normalized", CONFIGS[name]["normalize"]),
        # The twins are written like our kernels and keep every exactness promise.
        ("--deterministic", cap.deterministic),
        ("--causal-exact", cap.causal_exact),
        ("--layout-exact", cap.layout_exact),
    ):
        declared += [flag] if on else []
    return declared


for _entry in ZOO:
    _name = _entry.broken.name.removeprefix("zoo/")
    # One module attribute per kernel, so each is a plain `file.py:function` target.
    globals()[_name] = functools.partial(_entry.broken.fn, **CONFIGS[_name])
    globals()[f"twin_{_name}"] = functools.partial(_entry.twin.fn, **CONFIGS[_name])
