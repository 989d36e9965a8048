# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The run document's JSON Schemas (shipped as ``schema/run-v*.json``) and validation.

This version writes version 2 (`SCHEMA_VERSION`); `load_run` also reads version 1 and upgrades
it (`linattn_verify.reporting._v1`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from linattn_verify.errors import InvalidArgument

SCHEMA_VERSION = "linattn-verify/run/v2"
"""The ``schema`` field of every run document this version writes."""

SCHEMA_V1 = "linattn-verify/run/v1"
"""The ``schema`` field of the previous version's documents (read and upgraded on load)."""

SCHEMA_FILES = {SCHEMA_V1: "run-v1.json", SCHEMA_VERSION: "run-v2.json"}
"""The schema file of each version this version reads."""


@functools.cache
def _schema_text(version: str) -> str:
    return (
        resources.files("linattn_verify.reporting") / "schema" / SCHEMA_FILES[version]
    ).read_text()


def run_schema(version: str = SCHEMA_VERSION) -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of a run document.

    Args:
        version: The document version (its ``schema`` field). Default: `SCHEMA_VERSION`.

    Raises:
        InvalidArgument: for a version this one does not read.
    """
    if version not in SCHEMA_FILES:
        raise InvalidArgument(
            f"Got version={version!r}, but this version reads {sorted(SCHEMA_FILES)}."
        )
    schema: dict[str, Any] = json.loads(_schema_text(version))
    return schema


@functools.cache
def _validator(version: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(run_schema(version))


def validate(document: Any, *, version: str = SCHEMA_VERSION) -> None:
    """Check ``document`` against the run schema of ``version``.

    Args:
        document: A decoded run document (``run.json``).
        version: The version it must be. Default: `SCHEMA_VERSION` (what this version writes;
            `load_run` upgrades older documents to it).

    Raises:
        InvalidArgument: naming the first offending field (as a JSON path such as
            ``kernels/0/name``) and what the schema expected there.
    """
    from jsonschema.exceptions import best_match

    if not isinstance(document, dict):
        raise InvalidArgument(
            f"Expected a run document (a JSON object) but got {type(document).__name__}."
        )
    if document.get("schema") != version:
        raise InvalidArgument(
            f"Got schema={document.get('schema')!r}, but expected {version!r} here."
        )
    error = best_match(_validator(version).iter_errors(document))
    if error is None:
        return
    where = "/".join(str(part) for part in error.absolute_path) or "(the document)"
    raise InvalidArgument(f"Invalid run document at {where}: {error.message} (schema {version}).")
