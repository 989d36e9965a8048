# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parametrization shared by the property tests.

* A test with a ``kernel`` argument (not parametrized otherwise) runs on every registered
  kernel, with the kernel's name as id.
* Every test ignores `linattn_kernels.InterpreterFallbackWarning`.
* ``@pytest.mark.cases(NASTY)`` runs a test with a ``spec`` argument on every case of the dict
  ``NASTY`` (id: the key), after every other parametrization.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from linattn_verify.registry import registered_kernels

KERNELS = list(registered_kernels().values())

QUIET = pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cases(named_specs): run on every spec of the dict")


def _parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(QUIET)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kernel" in metafunc.fixturenames and not _parametrized(metafunc, "kernel"):
        metafunc.parametrize("kernel", KERNELS, ids=lambda k: k.name)
    marker = metafunc.definition.get_closest_marker("cases")
    if marker is not None:
        (cases,) = marker.args
        metafunc.parametrize("spec", list(cases.values()), ids=list(cases.keys()))
