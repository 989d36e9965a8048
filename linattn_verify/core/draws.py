# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Seeded Hypothesis draws that depend on the seed alone, in every process.

Hypothesis (6.13x and later) mixes constants it finds in the *loaded local modules* into its
draws (`hypothesis.internal.conjecture.providers._get_local_constants`: with probability 1/20 a
drawn integer or float is one of them). Which modules a process has imported then changes what
a seed draws: a ``run --workers 2`` worker, a ``check --isolation process`` child, or a test run
alone drew other cases than the same seed in a process that had imported more. `seeded_draws`
takes the local constants out for the duration of a seeded search (Hypothesis's own global
constants stay), so the same strategy and seed give the same cases everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock


@contextmanager
def seeded_draws() -> Iterator[None]:
    """Within the block, Hypothesis draws no constants of the loaded local modules.

    On a Hypothesis without that mechanism (older, or renamed internals) nothing is patched: its
    draws depend on the seed alone already, or the tests of `linattn_verify.running` say so.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - an older or newer Hypothesis
        yield
        return
    if not hasattr(providers, "_get_local_constants"):  # pragma: no cover
        yield
        return
    with mock.patch.object(providers, "_get_local_constants", Constants):
        yield


__all__ = ["seeded_draws"]
