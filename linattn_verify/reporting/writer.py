# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Write a run as it goes (``results.jsonl``), summarize it at the end (``run.json``), read it back.

Layout of a run directory::

    results.jsonl   one `CaseRecord` per line (``to_json``), appended and flushed as each case
                    finishes
    run.json        the run document (schema ``linattn-verify/run/v2``); written with status
                    "incomplete" (no cases) when the run starts and "complete" by `finish`
    report.md, report.html, plots/*.png    rendered by `finish` or ``linattn-verify report``
    failures/       saved failing cases, for ``linattn-verify replay``

An interrupted run keeps its results: `load_run` rebuilds the document from ``results.jsonl``.
A version 1 document (and version 1 lines) are read and upgraded to version 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from linattn_verify._device import package_version
from linattn_verify.errors import InvalidArgument
from linattn_verify.reporting import _v1
from linattn_verify.reporting._validate import SCHEMA_FILES, SCHEMA_V1, validate
from linattn_verify.reporting._values import jsonable
from linattn_verify.reporting.summary import build_document, verdicts_of
from linattn_verify.results import CaseRecord, PropertyVerdict
from linattn_verify.typing import FORMS

if TYPE_CHECKING:
    pass

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"
COMMANDS = ("run", "check")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_environment(
    base: Mapping[str, Any] | None = None, *, profile: str | None = None, seed: int | None = None
) -> dict[str, Any]:
    """Describe where a run happens, for the run document.

    Args:
        base: Device and versions, as `linattn_verify._device.environment` returns them.
            Default: `None` (call it; this imports torch).
        profile: The Hypothesis profile in effect. Default: `None` (Hypothesis's current one).
        seed: The seed of the case draw. Default: `None`.

    Returns:
        ``base`` plus ``interpreter``, ``python``, ``platform``, ``hypothesis``,
        ``hypothesis_profile`` and ``seed``.
    """
    if base is None:
        from linattn_verify._device import environment

        base = environment()
    if not isinstance(base, Mapping):
        raise InvalidArgument(f"Expected a mapping but got base={base!r}.")
    if profile is not None and not isinstance(profile, str):
        raise InvalidArgument(f"Expected str or None but got profile={profile!r}.")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise InvalidArgument(f"Expected int or None but got seed={seed!r}.")
    if profile is None:
        from hypothesis import settings

        profile = settings.get_current_profile_name()
    env: dict[str, Any] = {str(k): str(v) for k, v in base.items()}
    env.setdefault("device", "unknown")
    for name in ("torch", "triton", "linattn_verify"):
        env.setdefault(name, package_version(name.replace("_", "-")))
    env["interpreter"] = env.get("triton_mode") == "interpreter"
    env["python"] = platform.python_version()
    env["platform"] = platform.platform()
    env["hypothesis"] = package_version("hypothesis")
    env["hypothesis_profile"] = profile
    env["seed"] = seed
    return env


def kernel_entry(kernel: Any) -> dict[str, Any]:
    """Describe ``kernel`` for the run document: name, form, capabilities, recipe per dtype."""
    import torch

    from linattn_verify.core.family import families

    if getattr(kernel, "family", None) not in families():
        raise InvalidArgument(
            f"Expected a kernel of a family (a linattn_verify.Kernel, a DeltaKernel) but got "
            f"kernel={kernel!r}."
        )
    recipes: dict[str, Any] = {}
    for dtype in kernel.capabilities.dtypes:
        try:
            recipes[dtype] = dataclasses.asdict(kernel.precision_recipe(getattr(torch, dtype)))
        except Exception as exc:  # a third-party recipe function: report, do not crash the run
            recipes[dtype] = {"error": f"{type(exc).__name__}: {exc}"}
    entry: dict[str, Any] = jsonable(
        {
            "name": kernel.name,
            "family": kernel.family,
            "form": kernel.form,
            "capabilities": dataclasses.asdict(kernel.capabilities),
            "recipes": recipes,
        }
    )
    return entry


def _atomic_write(path: Path, text: str) -> None:
    # Write beside the target and rename, so a reader never sees half a document.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunWriter:
    """Record one run in a directory: cases as JSON lines while running, the summary at the end.

    Args:
        directory: The run directory; created if missing. An earlier run there is replaced.
        command: ``"run"`` or ``"check"``. Default: `"run"`.
        environment: Device and versions, as `linattn_verify._device.environment` returns
            them; `run_environment` adds the rest. Default: `None` (ask it).
        arguments: The command's arguments, for the record. Default: `None` (none).
        profile: The Hypothesis profile. Default: `None` (the current one).
        seed: The seed of the case draw. Default: `None`.

    Raises:
        InvalidArgument: naming the malformed argument.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        command: str = "run",
        environment: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        profile: str | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise InvalidArgument(f"Expected a path but got directory={directory!r}.")
        if command not in COMMANDS:
            raise InvalidArgument(f"Got command={command!r}, but it must be one of {COMMANDS}.")
        if environment is not None and not isinstance(environment, Mapping):
            raise InvalidArgument(
                f"Expected a mapping or None but got environment={environment!r}."
            )
        if arguments is not None and not isinstance(arguments, Mapping):
            raise InvalidArgument(f"Expected a mapping or None but got arguments={arguments!r}.")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.command = command
        self.environment = run_environment(environment, profile=profile, seed=seed)
        self.arguments = jsonable({str(k): _plain(v) for k, v in (arguments or {}).items()})
        self.kernels: dict[str, dict[str, Any]] = {}
        self.cases: list[CaseRecord] = []
        self.verdicts: list[PropertyVerdict] = []
        self.started = _now()
        self._clock = time.perf_counter()
        self._finished = False
        self.lines_path.write_text("")
        self._write(status="incomplete")

    @property
    def lines_path(self) -> Path:
        """The JSON-lines file cases are appended to."""
        return self.directory / RESULTS_FILE

    def add_kernel(self, kernel: Any) -> None:
        """Record a kernel under test of any family (capabilities, recipes); repeats are ignored."""
        self._check_open()
        entry = kernel_entry(kernel)
        if entry["name"] not in self.kernels:
            self.kernels[entry["name"]] = entry
            self._write(status="incomplete")

    def add_case(self, record: CaseRecord) -> None:
        """Append one case record to ``results.jsonl`` at once (flushed), and keep it.

        Args:
            record: The `CaseRecord` of one property on one case (a harness error on the case
                included: status ``failed``, ``error`` set).

        Raises:
            InvalidArgument: if ``record`` is not a `CaseRecord`.
        """
        self._check_open()
        if not isinstance(record, CaseRecord):
            raise InvalidArgument(
                f"Expected a linattn_verify.results.CaseRecord but got record={record!r}."
            )
        self.cases.append(record)
        with self.lines_path.open("a") as f:
            f.write(json.dumps(jsonable(record.to_json())) + "\n")
            f.flush()

    def add_verdict(self, verdict: PropertyVerdict) -> None:
        """Record a search's verdict on one property of one kernel (what `check` reports).

        It replaces an earlier verdict on the same kernel and property, and the verdict derived
        from the cases of that kernel and property.

        Args:
            verdict: The `PropertyVerdict`.

        Raises:
            InvalidArgument: if ``verdict`` is not a `PropertyVerdict`.
        """
        self._check_open()
        if not isinstance(verdict, PropertyVerdict):
            raise InvalidArgument(
                f"Expected a linattn_verify.results.PropertyVerdict but got verdict={verdict!r}."
            )
        key = (verdict.kernel, verdict.property)
        self.verdicts = [v for v in self.verdicts if (v.kernel, v.property) != key]
        self.verdicts.append(verdict)
        self._write(status="incomplete")

    def document(self, *, status: str = "complete") -> dict[str, Any]:
        """Return the run document for what was recorded so far."""
        complete = status == "complete"
        return build_document(
            command=self.command,
            status=status,
            started=self.started,
            finished=_now() if complete else None,
            seconds=time.perf_counter() - self._clock,
            environment=self.environment,
            arguments=self.arguments,
            kernels=list(self.kernels.values()),
            cases=self.cases if complete else [],
            verdicts=self.verdicts,
        )

    def finish(self, *, render: bool = True) -> dict[str, Any]:
        """Write ``run.json`` (validated) and, when ``render``, the Markdown and HTML report.

        Returns:
            The run document.
        """
        self._check_open()
        document = self.document(status="complete")
        validate(document)
        _atomic_write(self.directory / RUN_FILE, json.dumps(document, indent=1) + "\n")
        self._finished = True
        if render:
            from linattn_verify.reporting.render import render_report

            render_report(document, self.directory)
        return document

    def _write(self, *, status: str) -> None:
        # While running, run.json holds no cases: they are in results.jsonl (see load_run).
        document = self.document(status=status)
        _atomic_write(self.directory / RUN_FILE, json.dumps(document, indent=1) + "\n")

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError(f"the run in {self.directory} is finished; start a new RunWriter")


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def read_results(path: Path) -> list[CaseRecord]:
    """Read a ``results.jsonl`` file; a truncated last line (an interrupted write) is dropped.

    Version 1 lines (written before `CaseRecord`) are upgraded (`linattn_verify.reporting._v1`).

    Raises:
        InvalidArgument: naming the line that is not JSON or not a case record.
    """
    lines = path.read_text().splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise InvalidArgument(f"{path}:{number} is not a JSON line: {line[:80]!r}") from None
        if not isinstance(data, dict):
            raise InvalidArgument(f"{path}:{number} is not a JSON object.")
        try:
            record = _v1.case_from_v1(data) if _v1.is_v1_case(data) else CaseRecord.from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"{path}:{number} is not a case record ({type(exc).__name__}: {exc})."
            ) from None
        records.append(record)
    return records


def _read_header(run_path: Path) -> dict[str, Any]:
    try:
        header = json.loads(run_path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{run_path} is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidArgument(f"{run_path} is not a run document (a JSON object).")
    version = header.get("schema")
    if version not in SCHEMA_FILES:
        raise InvalidArgument(
            f"{run_path} has schema={version!r}, but this version reads {sorted(SCHEMA_FILES)}."
        )
    validate(header, version=version)
    checked: dict[str, Any] = header
    return checked


def load_run(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run directory's document, rebuilding it from ``results.jsonl`` if incomplete.

    Args:
        directory: A directory written by `RunWriter` (``linattn-verify run`` or
            ``check --report``), by this version or the previous one (schema version 1: the
            document is upgraded to version 2, see `linattn_verify.reporting._v1`).

    Returns:
        The validated run document (version 2); ``status`` is ``"incomplete"`` when it was
        rebuilt. Its cases and verdicts read back with `summary.cases_of` and
        `summary.verdicts_of`.

    Raises:
        InvalidArgument: if ``directory`` holds no run, or its files are malformed.
    """
    if not isinstance(directory, str | os.PathLike):
        raise InvalidArgument(f"Expected a path but got directory={directory!r}.")
    folder = Path(directory)
    run_path, lines_path = folder / RUN_FILE, folder / RESULTS_FILE
    if not folder.is_dir():
        raise InvalidArgument(f"Got RUN_DIR={str(folder)!r}, but it is not a directory.")
    if not run_path.is_file() and not lines_path.is_file():
        raise InvalidArgument(
            f"Got RUN_DIR={str(folder)!r}, but it holds neither {RUN_FILE} nor {RESULTS_FILE}."
        )
    header: dict[str, Any] = {}
    verdicts: list[PropertyVerdict] | None = None
    if run_path.is_file():
        header = _read_header(run_path)
        v1 = header["schema"] == SCHEMA_V1
        if header["status"] == "complete":
            return _v1.upgrade(header) if v1 else header
        verdicts = [_v1.verdict_from_v1(v) for v in header["verdicts"]] if v1 else None
    cases = read_results(lines_path) if lines_path.is_file() else []
    document = build_document(
        command=header.get("command", "run"),
        status="incomplete",
        started=header.get("started", "unknown"),
        finished=None,
        seconds=sum(record.seconds for record in cases),
        environment=header.get("environment") or _unknown_environment(),
        arguments=header.get("arguments", {}),
        kernels=header.get("kernels") or _kernels_from(cases),
        cases=cases,
        verdicts=verdicts_of(header) if verdicts is None else verdicts,
    )
    validate(document)
    return document


def _kernels_from(cases: list[CaseRecord]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for record in cases:
        form = record.form if record.form in FORMS else None
        seen.setdefault(
            record.kernel,
            {"name": record.kernel, "form": form, "capabilities": {}, "recipes": {}},
        )
    return list(seen.values())


def _unknown_environment() -> dict[str, Any]:
    fields = ("device", "torch", "triton", "linattn_verify", "python", "hypothesis")
    env: dict[str, Any] = dict.fromkeys(fields, "unknown")
    env.update(interpreter=False, hypothesis_profile="unknown", seed=None)
    return env
