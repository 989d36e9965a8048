# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exceptions raised by the harness."""

from __future__ import annotations


class InvalidArgument(ValueError):
    """A public function got a malformed argument; the message names it and what was expected."""


class PropertyViolation(AssertionError):
    """A kernel violated a property: an output outside its error bound, a broken invariance."""


__all__ = ["InvalidArgument", "PropertyViolation"]
