# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parametrization shared by the property tests.

* Tests over registered kernels take the plugin's ``linattn_kernel`` fixture (narrowed by
  ``--linattn-kernels``), as a user's tests would.
* Every test ignores `linattn_kernels.InterpreterFallbackWarning`.
* ``@pytest.mark.cases(NASTY)`` runs a test with a ``spec`` argument on every case of the dict
  ``NASTY`` (id: the key), after every other parametrization.
"""

from __future__ import annotations

from pathlib import Path

import pytest

QUIET = pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cases(named_specs): run on every spec of the dict")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(QUIET)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("cases")
    if marker is not None:
        (cases,) = marker.args
        metafunc.parametrize("spec", list(cases.values()), ids=list(cases.keys()))
