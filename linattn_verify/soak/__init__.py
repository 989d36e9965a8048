# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Soak: search the property catalogue for hours, across invocations, keeping score in a store.

`soak` visits (kernel, property) pairs round-robin (the pair with the fewest visits next, ties in
kernel then catalogue order) and gives each visit one Hypothesis search of
``SoakSettings.chunk_examples`` cases: the search `linattn_verify.checking` runs for ``check``
(`checking.search_property`, through `running.check_property`, so a failure is shrunk and saved
for ``linattn-verify replay``).

The seed of a visit is a function of the state: the state's base seed, the pair and the pair's
visit number (`visit_seed`), so no pair ever repeats a search, whatever the invocation, and a
soak spread over workers visits the same cases as a sequential one (`schedule`).

Engines. With ``workers=1`` (the default) the visits run one at a time in this process, which
never imports Ray. With ``workers=N > 1`` each visit is a Ray task (`on_ray`; Ray is the
``cluster`` extra, started locally or joined through `linattn_verify.cluster`): the driver keeps
N in flight, owns the state alone, and counts each returned result once, even when Ray ran the
visit again after its worker died.

The state is a SQLite store (`store`, WAL journal): per pair the visits, examples, not-applicable
and within-rounding counts, seconds and every distinct failing case (message, case, seed, saved
file); every invocation (wall time, versions, settings, why it stopped); and the log of visits
keyed by (kernel, property, visit number), which makes recording a result twice a no-op. Each
result is recorded in one transaction, so a crash loses at most the visits in flight and a
reader (``soak --summary``, a report) sees every visit whole or not at all. `files` says which
file ``--state`` names and migrates a JSON state file of before into a store (once, leaving it
as it was). The JSON document is now the export (``soak --export``, `SoakState.to_json`)::

    {"format": "linattn-verify-soak", "version": 1, "seed": 0,
     "wall_seconds": 812.4,                      # derived, for readers: the invocations' sum
     "pairs": [{"kernel": "torch/chunk", "property": "outputs_match_oracle", "visits": 3,
                "examples": 30, "not_applicable": 0, "within_rounding": 0, "seconds": 2.9,
                "failures": [{"visit": 2, "seed": ..., "case": "ProblemSpec(...)",
                              "message": "...", "failure_file": "....json",
                              "examples_before": 10, "found_at": "2026-...Z",
                              "error": false}]}, ...],
     "invocations": [{"started": "2026-...Z", "seconds": 400.1, "visits": 220,
                      "stopped": "budget", "versions": {...}, "settings": {...}}, ...]}

A failure is recorded once per distinct case (the minimal case Hypothesis shrank to); a pair
that failed is still visited, since a second, different failure is news. Failing cases are saved
in the folder beside the state (`failures_dir_of`), one subfolder per failing visit; with
workers, a shared folder lets ``replay`` run from any machine.

SIGINT and SIGTERM stop a soak cleanly (`Stopper`): the visits under way are abandoned (their
Ray tasks cancelled) and their numbers given back, so the next invocation makes them; the
invocation is recorded with why it stopped.
"""

from linattn_verify.soak.driver import Properties, soak
from linattn_verify.soak.files import (
    legacy_json_of,
    locked,
    migrate,
    open_state,
    read_state,
    state_source,
    store_path_of,
)
from linattn_verify.soak.state import (
    DEFAULT_CHUNK_EXAMPLES,
    DEFAULT_KERNELS,
    DEFAULT_STATE,
    LEGACY_DEFAULT_STATE,
    STATE_FORMAT,
    STATE_VERSION,
    Invocation,
    PairState,
    SoakBusy,
    SoakFailure,
    SoakState,
    SoakStateError,
    SoakStopped,
    VisitResult,
    failures_dir_of,
    load_state,
    save_state,
    visit_seed,
)
from linattn_verify.soak.store import STORE_FORMAT, STORE_SCHEMA, LoggedVisit, Recorded, SoakStore
from linattn_verify.soak.visits import (
    SoakSettings,
    Stopper,
    VisitOutcome,
    progress_line,
    summary,
    visit,
    visit_folder,
)

__all__ = [
    "DEFAULT_CHUNK_EXAMPLES",
    "DEFAULT_KERNELS",
    "DEFAULT_STATE",
    "LEGACY_DEFAULT_STATE",
    "STATE_FORMAT",
    "STATE_VERSION",
    "STORE_FORMAT",
    "STORE_SCHEMA",
    "Invocation",
    "LoggedVisit",
    "PairState",
    "Properties",
    "Recorded",
    "SoakBusy",
    "SoakFailure",
    "SoakSettings",
    "SoakState",
    "SoakStateError",
    "SoakStopped",
    "SoakStore",
    "Stopper",
    "VisitOutcome",
    "VisitResult",
    "failures_dir_of",
    "legacy_json_of",
    "load_state",
    "locked",
    "migrate",
    "open_state",
    "progress_line",
    "read_state",
    "save_state",
    "soak",
    "state_source",
    "store_path_of",
    "summary",
    "visit",
    "visit_folder",
    "visit_seed",
]
