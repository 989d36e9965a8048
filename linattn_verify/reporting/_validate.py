# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The run document's JSON Schema (shipped as ``schema/run-v1.json``) and its validation."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from linattn_verify.errors import InvalidArgument

SCHEMA_VERSION = "linattn-verify/run/v1"
"""The ``schema`` field of every run document this version writes and reads."""

SCHEMA_FILE = "run-v1.json"


@functools.cache
def _schema_text() -> str:
    return (resources.files("linattn_verify.reporting") / "schema" / SCHEMA_FILE).read_text()


def run_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of a run document."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def validate(document: Any) -> None:
    """Check ``document`` against the run schema.

    Args:
        document: A decoded run document (``run.json``).

    Raises:
        InvalidArgument: naming the first offending field (as a JSON path such as
            ``kernels/0/name``) and what the schema expected there.
    """
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    if not isinstance(document, dict):
        raise InvalidArgument(
            f"Expected a run document (a JSON object) but got {type(document).__name__}."
        )
    if document.get("schema") != SCHEMA_VERSION:
        raise InvalidArgument(
            f"Got schema={document.get('schema')!r}, but this version reads {SCHEMA_VERSION!r}."
        )
    error = best_match(Draft202012Validator(run_schema()).iter_errors(document))
    if error is None:
        return
    where = "/".join(str(part) for part in error.absolute_path) or "(the document)"
    raise InvalidArgument(
        f"Invalid run document at {where}: {error.message} (schema {SCHEMA_VERSION})."
    )
