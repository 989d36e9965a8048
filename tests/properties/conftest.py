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

import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.typing import LIFTED_MAPS

QUIET = pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cases(named_specs): run on every spec of the dict")


CI_TRITON_KERNEL = {
    "test_outputs_match_oracle": "triton/chunk",
    "test_gradients_match_oracle": "triton/recurrent",
    "test_causal_outputs_exact": "triton/parallel",
    "test_causal_gradients_exact": "triton/parallel",
    "test_linear_in_values_and_state": "triton/recurrent",
    "test_normalized_affine_and_convex": "triton/parallel",
    "test_varlen_matches_separate_runs": "triton/recurrent",
    "test_scalar_gate_matches_repeated_vector": "triton/recurrent",
    "test_denominator_stable": "triton/recurrent",
    "test_contract_holds": "triton/recurrent",
    "test_dyadic_inputs_exact": "triton/parallel",
}
"""The one Triton kernel (interpreted) each catalogue search runs on in CI, spread over the three
forms; CI searches every property on the torch references too and runs its nasty cases on every
kernel. ``pytest -m slow`` (and the soak) search every kernel: an interpreted search takes 4 to
30 s on a 2-core CI machine (several kernel runs per case), and all of them would take CI past
its 10 minutes. Searches not named here (``batch_and_head_equivariant``, 29 s a kernel;
``state_split_composes``, 14 s; ``backward_takes_any_cotangent``, six backward runs a case) run
on no Triton kernel in CI."""

SLOW_TESTS = {
    # Every form through Hypothesis, each case three interpreted runs: 32 to 39 s.
    "test_forms_agree[triton]",
    "test_chunk_size_invariant",
    # Six interpreted backward runs a case (7 s each); the torch references run it in CI.
    "test_the_catalogue_holds_on_lifted_maps[triton/chunk-backward_takes_any_cotangent]",
    "test_the_catalogue_holds_on_lifted_maps[triton/parallel-backward_takes_any_cotangent]",
}
"""Other tests of this folder CI leaves to ``pytest -m slow``."""


TRITON_FORMS = ("triton/chunk", "triton/parallel", "triton/recurrent")


def _slow(item: pytest.Item) -> bool:
    """Whether CI leaves ``item`` to ``pytest -m slow`` (`CI_TRITON_KERNEL`, `SLOW_TESTS`).

    A test of nasty cases (``[triton/chunk-T=1]``) runs in CI on one Triton form, the same for
    all the cases of one test function and spread over the forms by the function's name (107
    interpreted runs took 101 s); on the torch references on every case.
    """
    if item.name in SLOW_TESTS:
        return True
    name, _, param = item.name.partition("[")
    kernel, nasty, _ = param.rstrip("]").partition("-")
    if not kernel.startswith("triton/"):
        return False
    if nasty:
        return kernel != TRITON_FORMS[zlib.crc32(name.encode()) % len(TRITON_FORMS)]
    return CI_TRITON_KERNEL.get(name) != kernel


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(QUIET)
            if _slow(item):
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
