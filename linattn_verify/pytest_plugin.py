# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The pytest plugin (entry point ``pytest11``): options, fixtures, markers, Hypothesis profiles.

Loaded by every pytest run in an environment where linattn-verify is installed, so it imports
neither torch nor triton at module level (Hypothesis's own plugin keeps light for the same reason):
the kernel registry is imported only when a test asks for ``linattn_kernel``, and torch only when
a collected test carries the ``gpu`` marker.

Options (group ``linattn-verify``):

* ``--linattn-kernels PATTERNS``: comma-separated globs over registered kernel names; the
  ``linattn_kernel`` fixture is parametrized over the kernels they match (ids: kernel names).
* ``--linattn-failures DIR``: where `linattn_verify.running.check_property` saves failing cases
  (relative paths are taken from the invocation directory; the default from the rootdir).

Fixtures: ``linattn_kernel`` (a registered `Kernel`), ``linattn_failures_dir`` (a `Path`).
Markers: ``gpu`` (skipped, reason ``no CUDA device``, without CUDA), ``interpret``, ``slow``.

Hypothesis profiles (select with Hypothesis's own ``--hypothesis-profile NAME``):

* ``dev``: 50 examples. * ``ci``: 25 examples, derandomized, no example database, blobs
  printed; it replaces the ``ci`` profile Hypothesis loads by itself when ``CI`` is set.
* ``gpu``: 300 examples. * ``nightly``: 2000 examples. * ``debug``: verbose.

At the end of a session the plugin prints a short section, ``linattn-verify: worst headroom per
kernel``: for each kernel a property exercised through `linattn_verify.running.check_property`
(against the oracle), the worst deciding score r (error over bound; fails above 2), the headroom
``2 / r`` (how many times the error could grow before failing) and where it was reached. Under
xdist each worker collects its own and sends it to the controller, which prints the merge.

Every profile has ``deadline=None``: the first call of a Triton kernel compiles (or, under the
interpreter, is slow), which would trip any deadline.

Scale-out with pytest-xdist (``-n auto``): on a machine with several GPUs each worker ``gwN`` sees
one of them, the ``N mod count``-th entry of the visible list (`worker_device`), set through
``CUDA_VISIBLE_DEVICES`` before any conftest can import torch. The GPUs are counted from an
existing ``CUDA_VISIBLE_DEVICES``, else with ``nvidia-smi -L``; with fewer than two, or outside
xdist, nothing changes.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Verbosity, settings

from linattn_verify import observe
from linattn_verify._device import package_version

if TYPE_CHECKING:
    from linattn_verify.linear_attn.kernel import Kernel

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


DEFAULT_KERNELS = ("*",)
DEFAULT_FAILURES = ".linattn-failures"
_FAILURES_DIR = pytest.StashKey[Path]()
_PREVIOUS_DIR = pytest.StashKey["Path | None"]()
_HEADROOM = pytest.StashKey["Headroom"]()
_STOP_OBSERVING = pytest.StashKey["Callable[[], None]"]()
_SEEDED_DRAWS = pytest.StashKey["contextlib.ExitStack"]()
_WORKER_KEY = "linattn_verify_headroom"
HEADROOM_TITLE = "linattn-verify: worst headroom per kernel"


class Headroom:
    """The worst oracle comparison per kernel seen in a session (what the summary prints).

    A kernel's entry is ``{"r", "property", "tensor", "dtype"}``: the largest deciding score r
    of its comparisons against the oracle, and where it was reached. Plain values, so a worker
    can send them to the controller (`merge`).
    """

    def __init__(self) -> None:
        self.worst: dict[str, dict[str, Any]] = {}

    def observe(self, result: Any, spec: Any) -> None:
        """Keep ``result``'s worst oracle comparison if it is its kernel's worst so far."""
        # A pytester session nested in this one (in-process) collects for itself alone.
        if not _ACTIVE or _ACTIVE[-1] is not self:
            return
        worst = observe.oracle_worst(result)
        if worst is None:
            return
        dtype = getattr(spec, "dtype", None)
        self.merge(
            {
                result.kernel: {
                    "r": float(worst.deciding),
                    "property": result.property,
                    "tensor": worst.tensor,
                    "dtype": None if dtype is None else str(dtype),
                }
            }
        )

    def merge(self, worst: Mapping[str, Mapping[str, Any]]) -> None:
        """Take in another collection's entries (a worker's), keeping each kernel's worst."""
        for kernel, entry in worst.items():
            known = self.worst.get(kernel)
            if known is None or _rank(entry["r"]) > _rank(known["r"]):
                self.worst[kernel] = dict(entry)

    def lines(self) -> list[str]:
        """The summary's lines, worst first; none when no property ran."""
        if not self.worst:
            return []
        rows = sorted(self.worst.items(), key=lambda item: -_rank(item[1]["r"]))
        # Aligned up to a width: a check's kernel is named by its path, which may be long.
        width = min(32, max(len(kernel) for kernel, _ in rows))
        lines = []
        for kernel, entry in rows:
            where = ", ".join(
                str(x) for x in (entry["property"], entry["tensor"], entry["dtype"]) if x
            )
            lines.append(
                f"{kernel:{width}s}  r {entry['r']:<9.3g} headroom "
                f"{observe.format_headroom(entry['r']):7s} {where}"
            )
        lines.append("r = error / bound against the oracle (fails above 2); headroom = 2 / r")
        return lines


_ACTIVE: list[Headroom] = []
"""The collections of the sessions configured in this process, innermost last."""


def _rank(score: float) -> float:
    """A score to sort by: NaN is the worst."""
    return math.inf if math.isnan(score) else score


def _kernel_patterns(text: str) -> tuple[str, ...]:
    """Parse ``--linattn-kernels``: a comma-separated list of glob patterns."""
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    if not patterns:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated glob patterns such as 'torch/*,triton/chunk' "
            f"but got {text!r}"
        )
    return patterns


def _failures_dir(text: str) -> str:
    """Parse ``--linattn-failures``: a directory path (need not exist yet)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory path but got an empty string")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"expected a directory but {text!r} is a file")
    return text


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--linattn-*`` options in the ``linattn-verify`` group."""
    group = parser.getgroup("linattn-verify", "linattn-verify: kernels under test and failures")
    group.addoption(
        "--linattn-kernels",
        dest="linattn_kernels",
        metavar="PATTERNS",
        type=_kernel_patterns,
        default=DEFAULT_KERNELS,
        help="comma-separated glob patterns over registered kernel names; tests that use the "
        "linattn_kernel fixture run once per matching kernel. Default: %(default)r",
    )
    group.addoption(
        "--linattn-failures",
        dest="linattn_failures",
        metavar="DIR",
        type=_failures_dir,
        default=DEFAULT_FAILURES,
        help="directory where failing cases are saved (JSON + .pt) for "
        "'linattn-verify replay'; the default is relative to the rootdir. Default: %(default)r",
    )


def worker_device(worker_id: str | None, devices: Sequence[str]) -> str | None:
    """Return the GPU xdist worker ``worker_id`` (``"gw3"``) should see, or `None` to leave it.

    Workers take the visible devices round-robin: ``gwN`` gets ``devices[N % len(devices)]``.
    Outside xdist (``worker_id`` `None`), with fewer than two devices, or for a worker id that is
    not ``gw<number>``, there is nothing to choose.
    """
    if worker_id is None or len(devices) < 2:
        return None
    number = worker_id.removeprefix("gw")
    if not number.isdigit():
        return None
    return devices[int(number) % len(devices)]


def _nvidia_smi_gpus() -> list[str]:
    """Return the indices of the GPUs ``nvidia-smi -L`` lists (none if it is absent or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        listing = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    count = sum(line.startswith("GPU ") for line in listing.splitlines())
    return [str(i) for i in range(count)]


def visible_devices(
    env: Mapping[str, str], query: Callable[[], list[str]] = _nvidia_smi_gpus
) -> list[str]:
    """Return the GPUs a process may use: ``CUDA_VISIBLE_DEVICES``'s entries, else ``query()``."""
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return query()
    return [entry.strip() for entry in listed.split(",") if entry.strip()]


def pin_worker_gpu(
    env: MutableMapping[str, str], query: Callable[[], list[str]] = _nvidia_smi_gpus
) -> str | None:
    """Restrict this xdist worker to one GPU through ``env["CUDA_VISIBLE_DEVICES"]``.

    Returns:
        The device chosen, or `None` when the environment was left alone.
    """
    worker_id = env.get("PYTEST_XDIST_WORKER")
    if worker_id is None:
        # Not a worker: spare the plain run the nvidia-smi call.
        return None
    device = worker_device(worker_id, visible_devices(env, query))
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    return device


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Pin an xdist worker to one GPU before the first conftest can initialise CUDA."""
    # CUDA reads CUDA_VISIBLE_DEVICES once, when torch first touches the driver; the initial
    # conftests (and linattn_kernels' backend probe) may do that, so pin before they load.
    pin_worker_gpu(os.environ)


def pytest_configure(config: pytest.Config) -> None:
    """Register markers, point failure saving at ``--linattn-failures``, load our profile."""
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    raw = config.getoption("linattn_failures", DEFAULT_FAILURES)
    directory = Path(raw)
    if not directory.is_absolute():
        # The default belongs to the project (rootdir); a path typed by the user to where it was
        # typed. Either way absolute, so xdist workers and tests that chdir agree.
        base = config.rootpath if raw == DEFAULT_FAILURES else config.invocation_params.dir
        directory = base / directory
    from linattn_verify import failures

    config.stash[_PREVIOUS_DIR] = failures._directory
    config.stash[_FAILURES_DIR] = directory
    failures.set_failures_directory(directory)
    if settings.default is not None and settings.default.derandomize:
        # A derandomized profile (``ci``) promises the same examples on every run; Hypothesis's
        # constants of the loaded modules would make them depend on what each xdist worker
        # happened to import first (`linattn_verify.core.draws`).
        from linattn_verify.core.draws import seeded_draws

        stack = contextlib.ExitStack()
        stack.enter_context(seeded_draws())
        config.stash[_SEEDED_DRAWS] = stack
    headroom = Headroom()
    _ACTIVE.append(headroom)
    config.stash[_HEADROOM] = headroom
    config.stash[_STOP_OBSERVING] = observe.add_observer(headroom.observe)
    # Without --hypothesis-profile, CI gets our ``ci`` and everything else ``dev``: Hypothesis's
    # ``default`` has a 200 ms deadline, which the interpreter's first calls always exceed.
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the failures directory, stop observing (pytester nests sessions in a process)."""
    if _SEEDED_DRAWS in config.stash:
        config.stash[_SEEDED_DRAWS].close()
    if _STOP_OBSERVING in config.stash:
        config.stash[_STOP_OBSERVING]()
        if config.stash[_HEADROOM] in _ACTIVE:
            _ACTIVE.remove(config.stash[_HEADROOM])
    if _PREVIOUS_DIR in config.stash:
        from linattn_verify import failures

        failures.set_failures_directory(config.stash[_PREVIOUS_DIR])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``linattn_kernel`` over the registered kernels ``--linattn-kernels`` selects.

    Those of the linear-attention family, whose catalogue ``linattn_kernel`` tests run; the
    delta family's kernels are tested through its own catalogue (`linattn_properties.delta`).
    """
    if "linattn_kernel" not in metafunc.fixturenames:
        return
    # Imported here: the registry imports torch and the kernels, which plain runs must not pay.
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.registry import kernels_matching

    patterns = metafunc.config.getoption("linattn_kernels")
    try:
        kernels = kernels_matching(patterns, family="linear_attn")
    except InvalidArgument as exc:
        raise pytest.UsageError(f"--linattn-kernels={','.join(patterns)}: {exc}") from None
    metafunc.parametrize("linattn_kernel", kernels, ids=[k.name for k in kernels], indirect=True)


# Session-scoped: a Kernel is immutable, and Hypothesis tests (which share a function-scoped
# fixture across all their examples) may take it.
@pytest.fixture(scope="session")
def linattn_kernel(request: pytest.FixtureRequest) -> Kernel:
    """Return the kernel under test: one registered kernel per test (see ``--linattn-kernels``)."""
    kernel: Kernel | None = getattr(request, "param", None)
    if kernel is None:
        pytest.fail("linattn_kernel is parametrized by the linattn-verify plugin; it was not here")
    return kernel


@pytest.fixture
def linattn_failures_dir(request: pytest.FixtureRequest) -> Path:
    """Return the directory where failing cases are saved (``--linattn-failures``, absolute)."""
    return request.config.stash[_FAILURES_DIR]


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reject ``gpu``/``slow`` markers with arguments; skip ``gpu`` tests without CUDA."""
    gpu_items = []
    for item in items:
        for name in ("gpu", "slow"):
            for marker in item.iter_markers(name):
                if marker.args or marker.kwargs:
                    raise pytest.UsageError(
                        f"{item.nodeid}: the {name} marker takes no arguments but got "
                        f"args={marker.args!r}, kwargs={marker.kwargs!r}"
                    )
        if item.get_closest_marker("gpu") is not None:
            gpu_items.append(item)
    # torch is imported only when a gpu test was collected, to keep plain runs light.
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="no CUDA device")
        for item in gpu_items:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the versions, the interpreter mode and the Hypothesis profile."""
    interpret = os.environ.get("TRITON_INTERPRET", "")
    mode = "interpreter" if interpret not in ("", "0") else "compiled if CUDA is present"
    return [
        f"linattn-verify {package_version('linattn-verify')}: torch {package_version('torch')}, "
        f"triton {package_version('triton')}, Triton mode: {mode}, "
        f"hypothesis profile: {settings._current_profile}",
        f"linattn-verify kernels: {','.join(config.getoption('linattn_kernels'))}, "
        f"failures: {config.stash.get(_FAILURES_DIR, DEFAULT_FAILURES)}",
    ]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker, send the worst headroom per kernel to the controller."""
    config = session.config
    output = getattr(config, "workeroutput", None)
    if output is not None and _HEADROOM in config.stash:
        output[_WORKER_KEY] = config.stash[_HEADROOM].worst


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller, merge what a finished worker collected."""
    worst = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if worst and _HEADROOM in node.config.stash:
        node.config.stash[_HEADROOM].merge(worst)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print the worst headroom per kernel (nothing when no property ran)."""
    if _HEADROOM not in config.stash or hasattr(config, "workerinput"):
        return
    lines = config.stash[_HEADROOM].lines()
    if not lines:
        return
    terminalreporter.write_sep("-", HEADROOM_TITLE)
    for line in lines:
        terminalreporter.write_line(line)
