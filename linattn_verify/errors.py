# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exceptions raised by the harness."""

from __future__ import annotations

from typing import Any


class InvalidArgument(ValueError):
    """A public function got a malformed argument; the message names it and what was expected."""


class PropertyViolation(AssertionError):
    """A kernel violated a property: an output outside its error bound, a broken invariance.

    Attributes:
        result: The failing `linattn_verify.verdict.PropertyResult`, when one was produced.
        failure_file: Where the failing case was saved for ``linattn-verify replay``, if it was.
    """

    def __init__(self, message: str, *, result: Any = None, failure_file: str | None = None):
        super().__init__(message)
        self.result = result
        self.failure_file = failure_file


__all__ = ["InvalidArgument", "PropertyViolation"]
