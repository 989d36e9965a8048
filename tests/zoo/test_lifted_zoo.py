# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The lifted-map bug zoo: the catalogue must reject every broken kernel and accept every twin.

Two checks per entry of ``lifted_bugs.py``. `CAUGHT_BY` names the property that catches each
broken kernel and a case on which it does: the broken kernel fails that property there and its
twin holds it (a deterministic, fast statement of what sees the bug). Then the whole catalogue
is searched as `test_zoo.py` searches the main zoo (`test_zoo.search_catalogue`: a failure
counts only where the twin holds the same property on the same case), and each twin must pass
the same search.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from linattn_properties import catalogue

from linattn_verify.core.loading import import_file
from linattn_verify.errors import PropertyViolation
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec

lifted_bugs = import_file(Path(__file__).with_name("lifted_bugs.py"), "_linattn_zoo_lifted_bugs")
test_zoo = import_file(Path(__file__).with_name("test_zoo.py"), "_linattn_zoo_search")

ZOO = lifted_bugs.LIFTED_ZOO
TWINS: tuple[tuple[Kernel, tuple[str, ...]], ...] = lifted_bugs.LIFTED_TWINS


def _spec(feature_map: str, **changes: Any) -> ProblemSpec:
    favor = feature_map == "favor+"
    fields: dict[str, Any] = {
        "B": 1,
        "T": 9,
        "H": 2,
        "K": 3,
        "V": 4,
        "dtype": "float32",
        "feature_map": feature_map,
        "normalize": False,
        "eps": 0.0,
        "scale": None,
        "values": "normal",
        "decay": "none",
        "initial_state": False,
        "output_final_state": False,
        "segments": None,
        "seed": 5,
        "projection": "gaussian" if favor else None,
        "features": 6 if favor else 0,
    }
    return ProblemSpec(**{**fields, **changes})


CAUGHT_BY: dict[str, tuple[str, ProblemSpec]] = {
    # κ = 1 + x + x² instead of 1 + x + x²/2: every output with a nonzero score moves.
    "taylor2_without_inv_sqrt2": ("outputs_match_oracle", _spec("taylor2")),
    # Unnormalized, the query's factor exp(-max_f y_f) scales o: nothing divides it out.
    "favor_stabilised_unnormalized": ("outputs_match_oracle", _spec("favor+")),
    # Z + (t + 1) eps: visible where eps is not negligible next to Z (eps = 1e-2).
    "eps_per_term": ("outputs_match_oracle", _spec("rebased", normalize=True, eps=1e-2)),
    "eps_after_division": ("outputs_match_oracle", _spec("taylor2", normalize=True, eps=1e-2)),
    # Exact in value (the factor cancels in N / Z), but the last key changes earlier rows' bits.
    "favor_keys_sequence_max": ("causal_outputs_exact", _spec("favor+", normalize=True)),
}
"""Per broken kernel: the property that catches it and a case where it does."""


def _ids(entries: tuple[Any, ...]) -> list[str]:
    return [e.broken.name.removeprefix("zoo/") for e in entries]


def test_every_lifted_bug_has_its_catching_property() -> None:
    assert sorted(CAUGHT_BY) == sorted(_ids(ZOO))
    assert {prop for prop, _ in CAUGHT_BY.values()} <= set(catalogue())


@pytest.mark.parametrize("entry", ZOO, ids=_ids(ZOO))
def test_broken_and_twin_declare_the_same_search(entry: Any) -> None:
    broken, twin = entry.broken, entry.twin
    assert broken.capabilities == twin.capabilities
    assert broken.recipe is twin.recipe
    assert broken.fn is not twin.fn


@pytest.mark.parametrize("entry", ZOO, ids=_ids(ZOO))
def test_property_catches_lifted_bug(entry: Any) -> None:
    name, spec = CAUGHT_BY[entry.broken.name.removeprefix("zoo/")]
    prop = catalogue()[name]
    assert entry.broken.supports(spec.build()) is None
    twin = prop(spec, entry.twin)
    assert twin.status == "held", twin.report()
    broken = prop(spec, entry.broken)
    assert broken.status == "failed", broken.report()


@pytest.mark.parametrize("entry", ZOO, ids=_ids(ZOO))
def test_catalogue_rejects_lifted_broken_kernel(entry: Any) -> None:
    log: dict[str, Any] = {}
    search = test_zoo.search_catalogue(entry.broken, entry.twin, log, entry.extra)
    with pytest.raises(PropertyViolation):
        search()
    print(
        f"{entry.broken.name} ({entry.bug_class}): caught by {log['properties']} at example "
        f"{log['examples']} after {log['seconds']:.1f}s"
    )
    assert log["properties"], "the search failed without a property failure the twin holds"
    assert not log["shared"], log["shared"]


@pytest.mark.parametrize(("twin", "extra"), TWINS, ids=[t.name for t, _ in TWINS])
def test_catalogue_accepts_lifted_twin(twin: Kernel, extra: tuple[str, ...]) -> None:
    log: dict[str, Any] = {}
    test_zoo.search_catalogue(twin, None, log, extra)()
    assert log["examples"] > 0
    assert not log["properties"]
