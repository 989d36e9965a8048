# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The pytest plugin (entry point ``pytest11``): Hypothesis profiles, markers and a header.

Loaded by every pytest run in an environment where linattn-verify is installed, so it imports
neither torch nor triton at module level (Hypothesis's own plugin keeps light for the same reason).

Hypothesis profiles (select with Hypothesis's own ``--hypothesis-profile NAME``):

* ``dev``: 50 examples. * ``ci``: 25 examples, derandomized, no example database, blobs
  printed; it replaces the ``ci`` profile Hypothesis loads by itself when ``CI`` is set.
* ``gpu``: 300 examples. * ``nightly``: 2000 examples. * ``debug``: verbose.

Every profile has ``deadline=None``: the first call of a Triton kernel compiles (or, under the
interpreter, is slow), which would trip any deadline.
"""

from __future__ import annotations

import os
from importlib import metadata

import pytest
from hypothesis import HealthCheck, Verbosity, settings

_COMMON = {"deadline": None, "print_blob": True}
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

PROFILES: dict[str, dict[str, object]] = {
    "dev": {"max_examples": 50, "suppress_health_check": _SLOW_OK},
    "ci": {
        "max_examples": 25,
        "derandomize": True,
        "database": None,
        "suppress_health_check": _SLOW_OK,
    },
    "gpu": {"max_examples": 300, "suppress_health_check": _SLOW_OK},
    "nightly": {"max_examples": 2000, "suppress_health_check": _SLOW_OK},
    "debug": {
        "max_examples": 10,
        "verbosity": Verbosity.verbose,
        "suppress_health_check": _SLOW_OK,
    },
}

MARKERS = {
    "gpu": "needs a CUDA device (skipped without one)",
    "interpret": "runs Triton kernels under the interpreter",
    "slow": "long-running; deselect with -m 'not slow'",
}


def register_profiles() -> None:
    """Register the profiles; re-load the active one if it is ours (CI=true loads ``ci`` early)."""
    for name, values in PROFILES.items():
        settings.register_profile(name, **_COMMON, **values)  # type: ignore[arg-type]
    active = settings._current_profile  # Hypothesis has no public getter
    if active in PROFILES:
        settings.load_profile(active)


register_profiles()


def pytest_configure(config: pytest.Config) -> None:
    """Register markers and load our profile (``ci`` when CI is set, else ``dev``)."""
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    # Without --hypothesis-profile, CI gets our ``ci`` and everything else ``dev``: Hypothesis's
    # ``default`` has a 200 ms deadline, which the interpreter's first calls always exceed.
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the versions, the interpreter mode and the Hypothesis profile."""
    interpret = os.environ.get("TRITON_INTERPRET", "")
    mode = "interpreter" if interpret not in ("", "0") else "compiled if CUDA is present"
    return [
        f"linattn-verify {_version('linattn-verify')}: torch {_version('torch')}, "
        f"triton {_version('triton')}, Triton mode: {mode}, "
        f"hypothesis profile: {settings._current_profile}",
    ]
