# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Save failing cases, load them back, and replay them.

A failure is two files side by side in a failures directory:

* ``<property>-<kernel>.json``: the property and kernel names, the family and its case's fields, the
  result (status, comparisons, reason), a one-line repro and the package versions;
* ``<property>-<kernel>.pt``: the built input tensors, so the exact inputs survive a change of
  the value generator.

Inside a Hypothesis test every failing example overwrites the same pair, and Hypothesis replays
the shrunk example last, so what remains is the minimal case (`linattn_verify.running.
check_property` saves them). ``linattn-verify replay FILE`` re-runs it.

This module imports torch only inside the functions that need it: the pytest plugin imports it
to set the directory, and the plugin must not import torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from linattn_verify._device import versions
from linattn_verify.errors import InvalidArgument
from linattn_verify.results import PropertyResult

if TYPE_CHECKING:
    import torch


FORMAT_VERSION = 2
"""Version of the saved JSON document; bumped when its fields change meaning."""

DEFAULT_DIRECTORY = ".linattn-failures"
"""Where failures are saved when neither the caller nor the plugin names a directory."""

PropertyFn = Callable[..., PropertyResult]
"""A property: a pure function of a case and a kernel."""

_directory: Path | None = None


class ReplayMismatchWarning(UserWarning):
    """The inputs rebuilt from a saved spec differ from the saved tensors (generator changed)."""


def set_failures_directory(directory: str | os.PathLike[str] | None) -> None:
    """Set where failures are saved (`None` restores `DEFAULT_DIRECTORY`).

    The pytest plugin calls this with ``--linattn-failures``.
    """
    global _directory
    if directory is not None and not isinstance(directory, str | os.PathLike):
        raise InvalidArgument(f"Expected a path but got directory={directory!r}.")
    _directory = None if directory is None else Path(directory)


def failures_directory() -> Path:
    """Return where failures are saved by default."""
    return Path(DEFAULT_DIRECTORY) if _directory is None else _directory


def _safe(name: str) -> str:
    """Make ``name`` usable in a file name: ``triton/chunk`` -> ``triton_chunk``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "unnamed"


def _problem_tensors(problem: Any) -> dict[str, torch.Tensor]:
    tensors = dict(problem.inputs())
    for extra in ("cu_seqlens", "feature_weights"):  # the tensors of a problem that are no input
        if getattr(problem, extra, None) is not None:
            tensors[extra] = getattr(problem, extra)
    return tensors


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    # Write beside the target and rename, so a concurrent reader never sees half a file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def save_failure(
    result: PropertyResult,
    spec: Any,
    kernel_name: str,
    directory: str | os.PathLike[str],
    *,
    kernel_source: Mapping[str, Any] | None = None,
) -> Path:
    """Save a failing case as ``<directory>/<property>-<kernel>.json`` plus the same ``.pt``.

    Args:
        result: The property's result (saved whole).
        spec: The case; its fields are saved and its built inputs go to the ``.pt`` file.
        kernel_name: The kernel's registered name (``/`` and other unsafe characters become
            ``_`` in the file name; the JSON keeps the name as given).
        directory: Where to write; created if missing.
        kernel_source: How to load the kernel again when it is not registered (`Kernel.source`).

    Returns:
        The path of the JSON file.

    Raises:
        InvalidArgument: if an argument has the wrong type.
    """
    import torch

    from linattn_verify.core.family import is_case

    if not isinstance(result, PropertyResult):
        raise InvalidArgument(f"Expected a PropertyResult but got result={result!r}.")
    if not is_case(spec):
        raise InvalidArgument(f"Expected a case (ProblemSpec, DeltaCase) but got spec={spec!r}.")
    if not isinstance(kernel_name, str) or not kernel_name:
        raise InvalidArgument(f"Expected a non-empty str but got kernel_name={kernel_name!r}.")
    if not isinstance(directory, str | os.PathLike):
        raise InvalidArgument(f"Expected a path but got directory={directory!r}.")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_safe(result.property)}-{_safe(kernel_name)}.json"
    tensors = {name: t.detach().cpu() for name, t in _problem_tensors(spec.build()).items()}
    _atomic_write(path.with_suffix(".pt"), lambda p: torch.save(tensors, p))
    document = {
        "format": FORMAT_VERSION,
        "property": result.property,
        "kernel": kernel_name,
        "family": spec.family,
        "spec": dataclasses.asdict(spec),
        "result": result.to_json(),
        "repro": spec.repro(),
        "replay": f"linattn-verify replay {path}",
        "versions": versions(),
        "kernel_source": None if kernel_source is None else dict(kernel_source),
    }
    _atomic_write(path, lambda p: p.write_text(json.dumps(document, indent=2) + "\n"))
    return path


@dataclass(frozen=True)
class SavedFailure:
    """A failure read back by `load_failure`.

    Attributes:
        path: The JSON file.
        property: The property's name.
        kernel: The kernel's name.
        spec: The case (a `ProblemSpec`, or the case of its family).
        result: The property's result at save time.
        versions: Package versions at save time.
        inputs: The saved input tensors by name (``q``, ``k``, ``v``, and ``g``,
            ``initial_state``, ``initial_key_sum``, ``cu_seqlens`` where present).
        kernel_source: How to load an unregistered kernel again (`Kernel.source`), if saved.
    """

    path: Path
    property: str
    kernel: str
    spec: Any
    result: PropertyResult
    versions: Mapping[str, str] = field(default_factory=dict)
    inputs: Mapping[str, torch.Tensor] = field(default_factory=dict)
    kernel_source: Mapping[str, Any] | None = None

    def problem(self) -> Any:
        """Return the problem made of the saved tensors (the exact inputs of the failure)."""
        from linattn_verify.core.family import family_of

        return family_of(self.spec).problem_from_tensors(self.inputs, self.spec)


def load_failure(path: str | os.PathLike[str]) -> SavedFailure:
    """Read a failure saved by `save_failure` (``path`` is its ``.json`` or ``.pt`` file).

    Raises:
        InvalidArgument: if ``path`` is missing, not a saved failure, or of another format.
    """
    import torch

    from linattn_verify.core.family import family_named

    if not isinstance(path, str | os.PathLike):
        raise InvalidArgument(f"Expected a path but got path={path!r}.")
    json_path = Path(path).with_suffix(".json")
    tensor_path = json_path.with_suffix(".pt")
    for p in (json_path, tensor_path):
        if not p.is_file():
            raise InvalidArgument(f"Got path={str(path)!r}, but {p} does not exist.")
    try:
        document = json.loads(json_path.read_text())
        if document.get("format") != FORMAT_VERSION:
            raise InvalidArgument(
                f"Got path={str(path)!r} in format {document.get('format')!r}, but this version "
                f"reads format {FORMAT_VERSION}."
            )
        fields = dict(document["spec"])
        # A failure saved before the delta family existed is a linear-attention one.
        case_type = family_named(document.get("family", "linear_attn")).case_type()
        known = {f.name for f in dataclasses.fields(case_type)}
        if unknown := sorted(set(fields) - known):
            raise InvalidArgument(f"Got path={str(path)!r} with unknown spec fields {unknown}.")
        for name, value in fields.items():
            # JSON has lists where the cases hold tuples (segments, omit, seq_lens). A spec
            # saved before ``omit`` existed has none: it is replayed with every argument passed
            # explicitly.
            if isinstance(value, list):
                fields[name] = tuple(value)
        spec = case_type(**fields)
        inputs = torch.load(tensor_path, weights_only=True)
        return SavedFailure(
            path=json_path,
            property=str(document["property"]),
            kernel=str(document["kernel"]),
            spec=spec,
            result=PropertyResult.from_json(document["result"]),
            versions=dict(document.get("versions", {})),
            inputs=dict(inputs),
            kernel_source=document.get("kernel_source"),
        )
    except (KeyError, TypeError, ValueError, RuntimeError, pickle.UnpicklingError) as exc:
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(
            f"Got path={str(path)!r}, but it is not a saved failure: {exc!r}."
        ) from None


def _differences(
    saved: Mapping[str, torch.Tensor], rebuilt: Mapping[str, torch.Tensor]
) -> list[str]:
    import torch

    names = sorted(set(saved) | set(rebuilt))
    return [
        n
        for n in names
        if n not in saved
        or n not in rebuilt
        or saved[n].dtype != rebuilt[n].dtype
        or not torch.equal(saved[n].cpu(), rebuilt[n].cpu())
    ]


def replay(
    path: str | os.PathLike[str],
    *,
    properties: Mapping[str, PropertyFn],
    kernels: Mapping[str, Any],
) -> PropertyResult:
    """Re-run the property of a saved failure on its case and kernel.

    The spec is rebuilt and its tensors compared with the saved ones; if they differ (the value
    generator changed since the save), a `ReplayMismatchWarning` is issued and the result's
    message says so. The saved tensors remain available through `load_failure`.

    Args:
        path: The failure's ``.json`` (or ``.pt``) file.
        properties: Property functions by name; must hold the saved property.
        kernels: Kernels by name; must hold the saved kernel, unless the failure saved how to
            load it (a kernel given to ``linattn-verify check``): then it is loaded from there.

    Returns:
        The property's result on the saved case.

    Raises:
        InvalidArgument: if the file cannot be read, its property is not given, or its kernel is
            neither given nor loadable.
    """
    saved = load_failure(path)
    if saved.property not in properties:
        raise InvalidArgument(
            f"Got a failure of property {saved.property!r} ({saved.path}), but properties holds "
            f"only {sorted(properties)}."
        )
    if saved.kernel in kernels:
        kernel = kernels[saved.kernel]
    elif saved.kernel_source is not None:
        from linattn_verify.core.family import source_from_json

        kernel = source_from_json(saved.kernel_source).load()
    else:
        raise InvalidArgument(
            f"Got a failure of kernel {saved.kernel!r} ({saved.path}), but kernels holds only "
            f"{sorted(kernels)} and the failure does not say how to load it."
        )
    differing = _differences(saved.inputs, _problem_tensors(saved.spec.build()))
    result = properties[saved.property](saved.spec, kernel)
    if differing:
        note = (
            f"The inputs rebuilt from the spec differ from the saved ones in {differing}: this "
            "replay did not run on the saved inputs (load_failure(path).problem() has them)."
        )
        warnings.warn(note, ReplayMismatchWarning, stacklevel=2)
        result = dataclasses.replace(result, notes=(*result.notes, f"Warning: {note}"))
    return result


__all__ = [
    "DEFAULT_DIRECTORY",
    "FORMAT_VERSION",
    "PropertyFn",
    "ReplayMismatchWarning",
    "SavedFailure",
    "failures_directory",
    "load_failure",
    "replay",
    "save_failure",
    "set_failures_directory",
]
