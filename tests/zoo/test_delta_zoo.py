# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule bug zoo: the family's catalogue must catch every broken kernel, pass every twin.

For each broken kernel of ``delta_bugs.py`` the properties of `delta_catalogue` are searched in
catalogue order, each by a Hypothesis search over the cases the kernel declares it supports
(`delta_cases_for`, small sizes), until one fails; a failure counts only if the kernel's
correct twin holds the same property on the same case (a failure the twin shares is the
harness's, and is itself an error). The property that caught the bug must be one that can see
its bug class (`SEES`): a gradient bug caught by a forward property would be a false alarm that
happened to land on a broken kernel. Each twin must hold every property on the same searches.

The searches are deterministic: a fixed seed per property (`SEED` plus its catalogue index), no
example database, no shrinking (the search only has to find a failure; shrinking one would cost
more examples than finding it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from linattn_properties.delta import delta_catalogue

from linattn_verify.core.loading import import_file
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.strategies import DeltaCase, delta_cases_for
from linattn_verify.results import PropertyResult

delta_bugs = import_file(Path(__file__).with_name("delta_bugs.py"), "_linattn_zoo_delta_bugs")
DELTA_ZOO: list[tuple[DeltaKernel, str, str]] = delta_bugs.DELTA_ZOO
DELTA_TWINS: list[DeltaKernel] = delta_bugs.DELTA_TWINS
DELTA_TWIN_OF: dict[str, DeltaKernel] = delta_bugs.DELTA_TWIN_OF

CATALOGUE = delta_catalogue()

SEED = 2026
"""The base seed of every search; the property at catalogue index i searches with SEED + i, so
properties that see the same bug look at different cases."""

MAX_EXAMPLES = 10
"""Examples per property and kernel. Measured with SEED = 2026: the property that caught each
entry first (in catalogue order, each earlier one having passed its 10 examples) and the
example at which it failed:

    state_bf16                  outputs_match_oracle    #2
    inverse_fp16                outputs_match_oracle    #7
    undecayed_prediction        outputs_match_oracle    #4
    factored_gate               chunk_size_invariant    #6
    w_undecayed                 outputs_match_oracle    #4
    beta_wrong_side             outputs_match_oracle    #5
    inclusive_tril              outputs_match_oracle    #2
    beta_value_only             outputs_match_oracle    #5
    initial_state_by_batch_row  zero_beta_keeps_state   #6
    final_state_before_tail     outputs_match_oracle    #4
    full_qk_mask                outputs_match_oracle    #4
    dbeta_without_prediction    gradients_match_oracle  #5
    scale_on_k                  outputs_match_oracle    #4
    l2norm_eps_outside_sqrt     outputs_match_oracle    #4
    output_truncated            dyadic_inputs_exact     #4
    last_dim_stride_ignored     contract_holds          #4
    dense_cotangent_assumed     backward_takes_any_cotangent    #4

With SEED = 0 to 7 as well every entry was caught by a property of `SEES`, at example 2 to 9
(``output_truncated``: 4 to 10; only a 16-bit case can show it, and no other property sees it),
and every twin held. Two entries need a rare combination and so are caught by later properties
on some seeds: ``factored_gate`` (a steep gate over a chunk long enough for the cumulative gate
to pass -104) and ``initial_state_by_batch_row`` (packed sequences, an initial state, and a
second non-empty sequence); a bare whole-catalogue search needed up to 58 and 71 examples for
them on some seeds."""

SMALL: dict[str, Any] = {"max_seq_len": 40, "max_head_dim": 8}
"""Up to two and a half chunks of 16 (the chunk kernels' C) and K, V up to 8."""

FORWARD = frozenset(
    {"precision", "decay", "wy system", "beta", "state", "causality", "conventions"}
)
"""Every bug class of the zoo that changes the forward (all but ``gradients``)."""

SEES: dict[str, frozenset[str]] = {
    # Forward against the oracle: every forward bug.
    "outputs_match_oracle": FORWARD,
    # The gradients of a wrong forward are wrong too.
    "gradients_match_oracle": FORWARD | {"gradients"},
    # Pairs whose runs cut the sequence differently: bugs that depend on where chunks (or the
    # split) fall, or on the state handed between them.
    "chunk_size_invariant": frozenset({"precision", "decay", "wy system", "state", "causality"}),
    "state_split_composes": frozenset({"precision", "decay", "wy system", "state", "causality"}),
    # Packed against separate runs: what crosses a sequence boundary.
    "varlen_matches_separate_runs": frozenset({"state", "causality"}),
    # The future changed: a read of it, or an unmasked gate difference (inf · 0 = NaN).
    "causal_outputs_exact": frozenset({"causality", "decay"}),
    # Doubling is exact in every format: only a rounding that is not scale-invariant breaks it.
    "linear_in_values_and_state": frozenset({"precision"}),
    "scalar_gate_matches_repeated_vector": frozenset({"decay", "precision"}),
    "no_gate_matches_zero_gate": frozenset({"decay"}),
    # beta = 0, g = 0: a write that is not zero, a state not kept bit for bit, o = s S_0^T q.
    "zero_beta_keeps_state": frozenset({"beta", "state", "precision", "conventions"}),
    # beta = 1: the system, the state, the decay before the read, the key's norm and scale.
    "unit_key_reads_back_value": frozenset(
        {"wy system", "decay", "state", "precision", "conventions"}
    ),
    "contract_holds": FORWARD,
    # Its cotangents laid out as real losses hand them over: how the backward reads them.
    "backward_takes_any_cotangent": frozenset({"gradients"}),
    # Basis keys, beta = 1, g = 0, dyadic q and v: every sum exact, o rounded once to nearest.
    # Sees a wrong rounding however small, and a wrong system, state, mask or scale; not beta
    # (beta = 1), not the decay (g = 0), not gradients.
    "dyadic_inputs_exact": frozenset(
        {"precision", "wy system", "state", "causality", "conventions"}
    ),
}
"""Property -> the bug classes it can observe."""


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Run on one intra-op thread (tiny tensors; spinning threads on shared cores cost 40x)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class _Found(Exception):
    """Raised inside a search at the first failure the twin does not share."""


def search(
    name: str, kernel: DeltaKernel, twin: DeltaKernel | None
) -> tuple[PropertyResult | None, int, list[str]]:
    """Search property ``name`` on ``kernel`` for a failing case, at most `MAX_EXAMPLES`.

    Returns:
        ``(result, examples, shared)``: the first failed result whose case ``twin`` holds (or
        `None`), the examples run, and the cases on which ``twin`` failed as well.
    """
    prop = CATALOGUE[name]
    found: list[PropertyResult] = []
    shared: list[str] = []
    examples = 0

    # The seed fixes the draws (derandomize would too, from this function's source, which
    # changes with every edit); nothing is reused from or saved to a database.
    @seed(SEED + list(CATALOGUE).index(name))
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(case=delta_cases_for(kernel, **SMALL))
    def run(case: DeltaCase) -> None:
        nonlocal examples
        examples += 1
        result = prop(case, kernel)
        if result.status != "failed":
            return
        if twin is not None and prop(case, twin).status == "failed":
            shared.append(f"{name}: {case!r}")
            return
        found.append(result)
        raise _Found

    try:
        run()
    except _Found:
        return found[0], examples, shared
    return None, examples, shared


@pytest.mark.parametrize("entry", DELTA_ZOO, ids=lambda e: e[0].name.removeprefix("zoo/"))
def test_catalogue_catches_broken_kernel(entry: tuple[DeltaKernel, str, str]) -> None:
    broken, bug_class, _ = entry
    twin = DELTA_TWIN_OF[broken.name]
    shared: list[str] = []
    caught: tuple[str, int, PropertyResult] | None = None
    for name in CATALOGUE:
        result, examples, twin_failed = search(name, broken, twin)
        shared += twin_failed
        if result is not None:
            caught = (name, examples, result)
            break
    assert not shared, f"the twin {twin.name} failed as well (a false alarm): {shared}"
    assert caught is not None, (
        f"{broken.name} ({bug_class}) passed every property within {MAX_EXAMPLES} examples each"
    )
    name, examples, result = caught
    print(f"{broken.name} ({bug_class}): caught by {name} at example {examples}")
    assert bug_class in SEES[name], (
        f"{broken.name} ({bug_class}) was caught by {name}, which cannot see that class: "
        f"a false alarm?\n{result.report()}"
    )


@pytest.mark.parametrize("twin", DELTA_TWINS, ids=lambda t: t.name.removeprefix("zoo-twin/"))
def test_twin_holds_every_property(twin: DeltaKernel) -> None:
    failures = []
    for name in CATALOGUE:
        result, _, _ = search(name, twin, None)
        if result is not None:
            failures.append(result.report())
    assert not failures, "\n\n".join(failures)


def test_sees_classifies_every_property() -> None:
    # A new catalogue property must say which bug classes it sees; every class is seen by one,
    # and every entry has a twin that declares the same search.
    classes = {bug_class for _, bug_class, _ in DELTA_ZOO}
    assert classes <= set().union(*SEES.values())
    assert set(SEES) == set(CATALOGUE)
    for broken, _, _ in DELTA_ZOO:
        twin = DELTA_TWIN_OF[broken.name]
        assert twin in DELTA_TWINS
        assert broken.capabilities == twin.capabilities
        assert broken.recipe == twin.recipe


def test_chunk_kernels_take_the_chunk_sizes_they_declare() -> None:
    # chunk_size_invariant calls a kernel with each declared chunk size: one that declared sizes
    # it cannot take would fail every search with a TypeError, whatever its bug.
    case = DeltaCase(
        B=1,
        T=21,
        H=2,
        K=4,
        V=3,
        dtype="float32",
        gate="vector",
        gate_family="logsigmoid",
        beta_family="sigmoid",
        key_family="unit",
        value_family="unit",
        l2norm_qk=False,
        negative_eigenvalues=False,
        initial_state=True,
        output_final_state=True,
        seq_lens=(4, 17),
        scale=None,
        seed=1,
    )
    problem = case.build()
    reference = delta_bugs.CHUNK_REFERENCE
    kernels = [*DELTA_TWINS, *(broken for broken, _, _ in DELTA_ZOO)]
    declaring = [k for k in kernels if k.capabilities.chunk_sizes]
    assert delta_bugs.CHUNK_TWIN in declaring
    for kernel in declaring:
        for size in kernel.capabilities.chunk_sizes:
            o, S = kernel.with_options(kernel.name, chunk_size=size).call(problem)
            assert o.shape == problem.v.shape
            if kernel is delta_bugs.CHUNK_TWIN:
                # The twin is the reference at every chunk size, bit for bit.
                o_ref, S_ref = reference.with_options(reference.name, chunk_size=size).call(problem)
                assert torch.equal(o, o_ref), size
                assert torch.equal(S, S_ref), size
