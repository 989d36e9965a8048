# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The bug zoo: the property catalogue must reject every broken kernel and accept every twin.

For each zoo kernel (``bugs.py``) Hypothesis searches the cases the kernel declares it
supports, runs the whole catalogue on each, and must find a failing case within the active
profile's budget; each correct twin must pass the same search. A failure counts against a
broken kernel only when its twin passes the same property on the same case, so a harness
false positive can never pass for a caught bug.

The catalogue's compile invariance (``compiled_matches_eager``) traces the kernel with dynamo,
1-3 s per example on a CPU: too much to add to every search within the ``ci`` budget, so it
runs where a zoo entry asks for it (``ZooEntry.extra``): the compile row's broken kernel and its
twin.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import Phase, given, settings, target
from linattn_properties import catalogue
from linattn_properties.compilation import compiled_matches_eager

from linattn_verify.errors import PropertyViolation
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs
from linattn_verify.results import PropertyResult

MAX_SEQ_LEN = 24
"""Longest T: three reference chunks (C = 8) and room for |G| > 88 inside one of them."""

MAX_HEAD_DIM = 8
"""Largest K and V: covers 1, powers of two and non-powers of two."""

BUG_CLASSES = (
    "normalization",
    "gate overflow",
    "precision",
    "tail and length",
    "varlen",
    "state",
    "shapes and layout",
    "scale",
    "compile and device",
    "contract",
    "reference",
)
"""The rows of docs/bug-classes.md."""

Property = Callable[[ProblemSpec, Kernel], PropertyResult]


BROKEN_BUDGET_FACTOR = 8
"""A broken kernel's search may run this many times the profile's examples (a twin runs 1x).

The search stops at the first failure, so a caught bug costs no more; the factor keeps the
verdict from hanging on where the derandomized draw sequence happens to put the one case that
exposes a bug that needs a rare combination (an overflowing gate in the parallel form, an empty
segment, a normalized vector-gate case whose dimensions decay apart), a sequence that changes
whenever this file's source does. Measured once the draws stopped depending on the modules a
worker had loaded (`linattn_verify.core.draws`, issue #26): ``vector_normalizer_first_gate`` is
caught at example 129 of this sequence (at 25 of the earlier one), the others within 100."""

EXTRA: dict[str, Property] = {"compiled_matches_eager": compiled_matches_eager}
"""Catalogue properties too costly for every zoo search, added where an entry asks for them."""


def _catalogue(extra: tuple[str, ...] = ()) -> list[tuple[str, Property]]:
    """The property catalogue, less the costly `EXTRA` properties other than ``extra``."""
    return [
        (name, prop) for name, prop in catalogue().items() if name not in EXTRA or name in extra
    ]


def _worst(result: PropertyResult) -> float | None:
    """The deciding score of the result's worst bound comparison, for `target`."""
    values = [
        c.deciding for c in result.comparisons if c.kind != "bitwise" and not math.isnan(c.deciding)
    ]
    return min(max(values), 1e30) if values else None


def search_catalogue(
    kernel: Kernel, twin: Kernel | None, log: dict[str, Any], extra: tuple[str, ...] = ()
) -> Callable[[], None]:
    """Return a Hypothesis search that raises `PropertyViolation` on the first failing case.

    Every example runs the whole catalogue (each property called directly rather than through
    `linattn_verify.running.check_property`, which would raise at the first failure before the
    twin could say whether the failure is the harness's); with a ``twin``, a property failure
    counts only if the twin holds that property on the same case (otherwise it is logged as the
    harness's).
    ``log`` receives ``examples``, ``properties`` (what failed first), ``seconds`` (time to the
    first failure) and ``shared`` (failures the twin shared).
    """
    properties = _catalogue(extra)
    log.update(examples=0, properties=[], seconds=math.nan, shared=[])
    start = time.perf_counter()

    # The zoo asks whether the catalogue finds a bug within the profile's budget. Shrinking a
    # found failure would cost more examples than the search itself, and the target phase spends
    # the second half of the budget mutating the highest-scoring examples, which does not help
    # with structural bugs (H > 1, an empty segment, K != V) before the first failure; `target`
    # still records the scores (Hypothesis prints them with a failure).
    @settings(
        report_multiple_bugs=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        max_examples=settings.default.max_examples * (BROKEN_BUDGET_FACTOR if twin else 1),
    )
    @given(spec=kernel_specs(kernel, max_seq_len=MAX_SEQ_LEN, max_head_dim=MAX_HEAD_DIM))
    def search(spec: ProblemSpec) -> None:
        log["examples"] += 1
        results = {name: prop(spec, kernel) for name, prop in properties}
        for name, res in results.items():
            score = _worst(res)
            if score is not None:
                target(score, label=name)
        failed = [name for name, res in results.items() if not res.ok]
        if twin is not None:
            props = dict(properties)
            shared = [n for n in failed if not props[n](spec, twin).ok]
            log["shared"] += [f"{n}: {spec!r}" for n in shared]
            failed = [n for n in failed if n not in shared]
        if failed:
            if not log["properties"]:
                log.update(properties=failed, seconds=time.perf_counter() - start)
            raise PropertyViolation(results[failed[0]].report(), result=results[failed[0]])

    return search


def test_zoo_covers_every_bug_class(zoo):
    assert {e.bug_class for e in zoo} == set(BUG_CLASSES)
    names = [e.broken.name for e in zoo]
    assert len(set(names)) == len(names), "zoo kernel names must be unique"


def test_broken_and_twin_declare_the_same_search(zoo_entry):
    broken, twin = zoo_entry.broken, zoo_entry.twin
    assert broken.capabilities == twin.capabilities
    assert broken.recipe is twin.recipe
    assert broken.fn is not twin.fn


def test_zoo_extras_are_catalogue_properties():
    # Every zoo search runs the catalogue less EXTRA; an EXTRA name outside the catalogue would
    # silently search nothing.
    assert set(EXTRA) <= set(catalogue())


def test_catalogue_rejects_broken_kernel(small_size_entry, zoo_log):
    # Kernels wrong only beyond MAX_SEQ_LEN and MAX_HEAD_DIM are `check`'s size reach's to catch
    # (test_zoo_cli.py).
    entry = small_size_entry
    log: dict[str, Any] = {}
    zoo_log[entry.broken.name] = log
    search = search_catalogue(entry.broken, entry.twin, log, entry.extra)
    with pytest.raises(PropertyViolation):
        search()
    print(
        f"{entry.broken.name} ({entry.bug_class}, {entry.mirrors}): caught by "
        f"{log['properties']} at example {log['examples']} after {log['seconds']:.1f}s"
    )
    assert log["properties"], "the search failed without a property failure the twin holds"


def test_catalogue_accepts_twin(zoo_twin):
    twin, extra = zoo_twin
    log: dict[str, Any] = {}
    search_catalogue(twin, None, log, extra)()
    assert log["examples"] > 0
    assert not log["properties"]
