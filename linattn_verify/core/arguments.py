# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""argparse types shared by the CLI and the families' flag groups (`Family.add_flags`).

Each raises `argparse.ArgumentTypeError` with what it expected, so argparse reports the flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

DTYPE_ALIASES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
"""The short spellings every dtype flag of the CLI also takes (``--dtypes fp32,bf16``); results
and messages always use the torch names."""


def csv_of(
    choices: Sequence[str],
    *,
    spelling: Callable[[str], str] = str.strip,
    listed: str | None = None,
) -> Any:
    """A comma-separated subset of ``choices``, as a tuple in the given order.

    ``spelling`` turns each item into its name among ``choices`` (default: stripped as it is);
    ``listed`` is how the error names the choices (default: joined by commas).
    """

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(spelling(x) for x in text.split(",") if x.strip())
        if not items or any(x not in choices for x in items):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {listed or ','.join(choices)} but got "
                f"{text!r}"
            )
        return items

    return parse


def dtype_name(text: str) -> str:
    """A dtype by its torch name or short spelling (`DTYPE_ALIASES`), as its torch name.

    For flags with ``choices``: argparse checks the choice after this conversion.
    """
    name = text.strip()
    return DTYPE_ALIASES.get(name, name)


def dtypes_of(choices: Sequence[str]) -> Any:
    """A comma-separated subset of the dtypes ``choices``, each by either spelling, once each."""
    short = {name: alias for alias, name in DTYPE_ALIASES.items()}
    spelled = ", ".join(f"{c} ({short[c]})" if c in short else c for c in choices)
    subset = csv_of(choices, spelling=dtype_name, listed=spelled)

    def parse(text: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(subset(text)))

    return parse


def globs(text: str) -> tuple[str, ...]:
    """Comma-separated glob patterns (at least one)."""
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated globs but got {text!r}")
    return items


def positive(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}")
    return value


def nonnegative(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 but got {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds > 0 (a time budget)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0 but got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number but got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 but got {text!r}")
    return value


__all__ = [
    "DTYPE_ALIASES",
    "csv_of",
    "dtype_name",
    "dtypes_of",
    "globs",
    "nonnegative",
    "nonnegative_float",
    "positive",
    "seconds",
]
