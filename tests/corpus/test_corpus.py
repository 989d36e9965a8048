# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The soundness corpus: correct kernels nobody here shaped like ours must never be rejected.

`linear_attn.toml` and `delta.toml` list independently written correct kernels (cumsum forms,
fp16 throughout, reciprocal division, general solvers, hand-written backwards, other signatures)
and real third-party functions (transformers' delta-rule fallbacks, performer-pytorch's), each
with the ``check`` flags that truthfully declare it. Every manifest entry must load as ``check``
loads it; CI's sample (``ci = true``) is checked here with the catalogue of its family, and the
soak runs all of them (``linattn-verify soak --manifest tests/corpus/linear_attn.toml
--manifest tests/corpus/delta.toml``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from linattn_verify.checking import SearchSettings, check_kernel
from linattn_verify.cli.manifest import ManifestEntry, load_manifest
from linattn_verify.core.family import family_of

HERE = Path(__file__).parent
MANIFESTS = (HERE / "linear_attn.toml", HERE / "delta.toml")
ENTRIES = [entry for path in MANIFESTS for entry in load_manifest(path)]
SAMPLE = [entry for entry in ENTRIES if entry.ci]

BUDGET = 5.0
"""Seconds of search per kernel of CI's sample: the first round of every property (a few
realistic cases each, run whatever the budget) and then more; the soak searches for hours."""

pytestmark = pytest.mark.filterwarnings(
    # transformers and FLA warn on import on a machine without CUDA; not the kernels' business.
    "ignore::UserWarning",
    "ignore::FutureWarning",
    "ignore::DeprecationWarning",
)


def test_the_corpus_covers_both_families_and_third_party_code() -> None:
    families = {family_of(entry.kernel()).name for entry in ENTRIES}
    assert families == {"linear_attn", "delta"}
    assert len(ENTRIES) >= 24
    third_party = [e for e in ENTRIES if not e.target.split(":")[0].endswith(".py")]
    assert {e.target.split(":")[1] for e in third_party} >= {
        "torch_chunk_gated_delta_rule.__wrapped__",
        "torch_recurrent_gated_delta_rule.__wrapped__",
        "chunk_kimi_delta_attention.__wrapped__",
        "recurrent_kimi_delta_attention.__wrapped__",
    }


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_every_entry_loads_as_check_loads_it(entry: ManifestEntry) -> None:
    kernel = entry.kernel()
    assert kernel.name == entry.name
    assert family_of(kernel).name in ("linear_attn", "delta")


@pytest.mark.parametrize("entry", SAMPLE, ids=[e.name for e in SAMPLE])
def test_a_correct_kernel_is_not_rejected(entry: ManifestEntry, tmp_path: Path) -> None:
    kernel = entry.kernel()
    properties = family_of(kernel).properties()
    search = SearchSettings(budget=BUDGET, seed=0, failures_dir=tmp_path, reach=False)
    report = check_kernel(kernel, properties, search)
    failed = [v for v in report.verdicts if not v.ok]
    assert not failed, "\n\n".join(v.message for v in failed)
    assert sum(v.examples for v in report.verdicts) >= len(properties)
