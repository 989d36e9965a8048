# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Parametrization shared by the property tests.

* Tests over registered kernels take the plugin's ``linattn_kernel`` fixture (narrowed by
  ``--linattn-kernels``), as a user's tests would.
* Every test ignores `linattn_kernels.InterpreterFallbackWarning`.
* ``@pytest.mark.cases(NASTY)`` runs a test with a ``spec`` argument on every case of the dict
  ``NASTY`` (id: the key), after every other parametrization.
* The plugin's kernels draw the elementwise feature maps here: the lifted ones (twice the kernel
  launches per case under the interpreter) have their own catalogue test over the same kernels,
  `test_lifted_catalogue.py`, which keeps CI within its budget. `run`, `check` and the soak draw
  every map.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from linattn_verify.kernel import Kernel
from linattn_verify.typing import LIFTED_MAPS

QUIET = pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cases(named_specs): run on every spec of the dict")


SLOW_SEARCHES = {
    "test_batch_and_head_equivariant[triton/chunk]",
    "test_batch_and_head_equivariant[triton/parallel]",
    "test_contract_holds[triton/chunk]",
    "test_contract_holds[triton/parallel]",
    "test_linear_in_values_and_state[triton/parallel]",
    "test_normalized_affine_and_convex[triton/recurrent]",
    "test_state_split_composes[triton/recurrent]",
    "test_state_split_composes[triton/parallel]",
}
"""Searches CI leaves to ``pytest -m slow``: the interpreted searches that take 18 to 50 s on a
2-core CI machine (several kernel runs per case). Each property is still searched in CI on the
other Triton kernels and the torch references, and its nasty cases run on every kernel; ``-m
slow`` and the soak search every kernel."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(QUIET)
            if item.name in SLOW_SEARCHES:
                item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("cases")
    if marker is not None:
        (cases,) = marker.args
        metafunc.parametrize("spec", list(cases.values()), ids=list(cases.keys()))


@pytest.fixture(scope="session")
def linattn_kernel(request: pytest.FixtureRequest) -> Kernel:
    """The plugin's kernel under test (``--linattn-kernels``), drawing elementwise maps only."""
    kernel: Kernel = request.param
    cap = kernel.capabilities
    elementwise = tuple(m for m in cap.feature_maps if m not in LIFTED_MAPS)
    if not elementwise or elementwise == cap.feature_maps:
        return kernel
    return replace(kernel, capabilities=replace(cap, feature_maps=elementwise))
