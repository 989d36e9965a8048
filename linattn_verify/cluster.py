# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Ray as the engine of work spread over processes or machines: start or join it, size its tasks.

Ray is an optional extra (``pip install -e ".[cluster]"``); nothing here imports it until a
session starts, so the in-process paths never import it. The API, for a command with
``--workers N`` and ``--ray-address ADDRESS``:

.. code-block:: python

    check_engine(workers=args.workers, address=args.ray_address)   # usage errors, before work
    with ray_session(workers=args.workers, address=args.ray_address) as session:
        task = ray.remote(function).options(**session.task_options())
        ...                                       # at most `workers` tasks in flight

`ray_session` starts a local Ray instance sized to ``workers`` CPUs (the embedded default:
nothing to set up; ``RAY_ADDRESS`` is not consulted) or joins the cluster at ``address``, and
stops what it started. `RaySession.task_options` asks one GPU per task where the cluster has GPUs
(so tasks spread over its devices), else one CPU, and lets Ray retry a task whose worker died
(killed, node lost) elsewhere: the task must therefore be safe to run twice, and its caller
must count its result once.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from linattn_verify.errors import InvalidArgument

INSTALL_HINT = 'pip install -e ".[cluster]"'
"""How to install Ray with linattn-verify (the ``cluster`` extra)."""

TASK_RETRIES = 3
"""Times Ray runs a task again after its worker died, by default (4 attempts in all)."""

LOCAL_OBJECT_STORE_BYTES = 256 * 2**20
"""The local instance's object store: tasks return small records, not tensors (Ray's default
takes 30% of the memory in /dev/shm)."""


class ClusterError(InvalidArgument):
    """Ray is missing, or the cluster cannot be started or joined (a usage error)."""


def ray_installed() -> bool:
    """Whether Ray can be imported (importing it: call only when it is about to be used)."""
    try:
        importlib.import_module("ray")
    except ImportError:
        return False
    return True


def check_engine(*, workers: int, address: str | None = None) -> None:
    """Check ``--workers`` and ``--ray-address`` together, before any work starts.

    Args:
        workers: Tasks in flight at once; 1 is the in-process path, which needs no Ray.
        address: The Ray cluster to join, or `None` for a local instance. Default: `None`.

    Raises:
        InvalidArgument: if ``workers`` is not an int >= 1 or ``address`` an empty string.
        ClusterError: if ``address`` is given with ``workers`` 1, or ``workers`` > 1 without
            Ray installed; the message names the flag and the fix.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidArgument(f"Expected an int >= 1 but got --workers {workers!r}.")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise InvalidArgument(
            f"Expected a Ray address (host:port) but got --ray-address {address!r}."
        )
    if address is not None and workers == 1:
        raise ClusterError(
            f"Got --ray-address {address}, but --workers is 1, which runs in this process: "
            "pass --workers N (N > 1 visits at once) to use the cluster."
        )
    if workers > 1 and not ray_installed():
        raise ClusterError(
            f"Got --workers {workers}, but Ray is not installed: install it with `{INSTALL_HINT}`,"
            " or pass --workers 1."
        )


@dataclass(frozen=True)
class RaySession:
    """A started or joined Ray instance, as a command sees it.

    Attributes:
        address: The address of the cluster (of its GCS).
        started_here: Whether this session started it as a local instance (`ray_session`
            stops it at the end; a joined cluster is only disconnected from).
        cpus: CPUs in the cluster.
        gpus: GPUs in the cluster.
        nodes: Nodes alive in the cluster.
        retries: Times Ray runs a task again after its worker died. Default: `TASK_RETRIES`.

    Raises:
        InvalidArgument: if ``retries`` is not an int >= 0.
    """

    address: str
    started_here: bool
    cpus: float
    gpus: float
    nodes: int
    retries: int = TASK_RETRIES

    def __post_init__(self) -> None:
        _check_retries(self.retries)

    @property
    def attempts(self) -> int:
        """Times a task runs at most: once, and once per retry."""
        return self.retries + 1

    def task_options(self) -> dict[str, Any]:
        """The ``.options(...)`` of a task: one GPU on a cluster with GPUs, else one CPU."""
        resources: dict[str, Any] = {"num_gpus": 1} if self.gpus > 0 else {"num_cpus": 1}
        # An exception raised by the task is its result (the caller records it); only the death
        # of its worker is worth another attempt.
        return {**resources, "max_retries": self.retries, "retry_exceptions": False}

    def describe(self) -> str:
        """One line: where the tasks run."""
        devices = f"{self.cpus:g} CPUs" + (f", {self.gpus:g} GPUs" if self.gpus else "")
        if self.started_here:
            return f"a local Ray instance ({devices})"
        nodes = f"{self.nodes} node{'s' * (self.nodes != 1)}"
        return f"the Ray cluster at {self.address} ({nodes}, {devices})"


def _check_retries(retries: int) -> None:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidArgument(f"Expected an int >= 0 but got retries={retries!r}.")


@contextlib.contextmanager
def ray_session(
    *, workers: int, address: str | None = None, retries: int = TASK_RETRIES
) -> Iterator[RaySession]:
    """Start a local Ray instance of ``workers`` CPUs, or join ``address``, for the block.

    A Ray already initialised in this process is used as it is, and left running. Ray installs
    its own SIGTERM handler when it starts: install yours (`linattn_verify.soak.Stopper`) inside
    the block.

    Args:
        workers: CPUs of the local instance (tasks in flight at once). Must be > 1.
        address: The cluster to join (``host:port``, or ``auto``), or `None` to start a local
            instance. Default: `None`.
        retries: Times Ray runs a task again after its worker died (`RaySession.retries`).
            Default: `TASK_RETRIES`.

    Raises:
        ClusterError: if Ray is missing, ``address`` is given with ``workers`` 1, or the
            instance cannot be started or joined.
        InvalidArgument: for a malformed ``workers``, ``address`` or ``retries``.
    """
    check_engine(workers=workers, address=address)
    _check_retries(retries)
    if workers == 1:
        raise ClusterError("Got --workers 1, but a Ray session runs tasks for --workers N > 1.")
    # Any: Ray's API is partly untyped, and mypy may run where the extra is not installed.
    ray: Any = importlib.import_module("ray")
    # What this session does it undoes: a local instance is stopped, a joined cluster left.
    initialised_here = not ray.is_initialized()
    if initialised_here:
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            # The workers' output would break the progress bar; Ray keeps it in its session
            # logs (/tmp/ray/session_latest/logs on the node).
            "log_to_driver": False,
        }
        if address is None:
            # "local": a new instance even when RAY_ADDRESS is set (joining takes the flag).
            options |= {
                "address": "local",
                "num_cpus": workers,
                "object_store_memory": LOCAL_OBJECT_STORE_BYTES,
            }
        else:
            options["address"] = address
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = "start a local Ray instance" if address is None else f"join {address}"
            flag = "--workers" if address is None else "--ray-address"
            raise ClusterError(
                f"Got {flag} {address or workers}, but Ray could not {where}: {exc}"
            ) from None
    try:
        resources = ray.cluster_resources()
        yield RaySession(
            address=str(ray.get_runtime_context().gcs_address),
            started_here=initialised_here and address is None,
            cpus=float(resources.get("CPU", 0.0)),
            gpus=float(resources.get("GPU", 0.0)),
            nodes=sum(1 for node in ray.nodes() if node.get("Alive")),
            retries=retries,
        )
    finally:
        if initialised_here:
            ray.shutdown()


__all__ = [
    "INSTALL_HINT",
    "LOCAL_OBJECT_STORE_BYTES",
    "TASK_RETRIES",
    "ClusterError",
    "RaySession",
    "check_engine",
    "ray_installed",
    "ray_session",
]
