# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Soak: search the property catalogue for hours, across invocations, keeping score in a file.

`soak` visits (kernel, property) pairs round-robin (the pair with the fewest visits next, ties in
kernel then catalogue order) and gives each visit one Hypothesis search of
``SoakSettings.chunk_examples`` cases: the search `linattn_verify.checking` runs for ``check``
(`checking.search_property`, through `running.check_property`, so a failure is shrunk and saved
for ``linattn-verify replay``). After every visit the state file is rewritten atomically, so a
killed soak loses at most the visit it was in, and the next invocation goes on from the counts.

The seed of a visit is a function of the state: the state's base seed, the pair and the pair's
visit number (`visit_seed`), so no pair ever repeats a search, whatever the invocation.

The state file (JSON, `SoakState.to_json`)::

    {"format": "linattn-verify-soak", "version": 1, "seed": 0,
     "wall_seconds": 812.4,                      # derived, for readers: the invocations' sum
     "pairs": [{"kernel": "torch/chunk", "property": "outputs_match_oracle", "visits": 3,
                "examples": 30, "not_applicable": 0, "seconds": 2.9,
                "failures": [{"visit": 2, "seed": ..., "case": "ProblemSpec(...)",
                              "message": "...", "failure_file": "....json",
                              "examples_before": 10, "found_at": "2026-...Z",
                              "error": false}]}, ...],
     "invocations": [{"started": "2026-...Z", "seconds": 400.1, "visits": 220,
                      "stopped": "budget", "versions": {...}, "settings": {...}}, ...]}

A failure is recorded once per distinct case (the minimal case Hypothesis shrank to); a pair
that failed is still visited, since a second, different failure is news. Failing cases are saved
in the folder beside the state file (`failures_dir_of`), one subfolder per failing visit.

SIGINT and SIGTERM stop a soak cleanly (`Stopper`): the visit under way is abandoned and the
state, already saved after the previous visit, is saved once more with why the soak stopped.
"""

from linattn_verify.soak.state import (
    DEFAULT_CHUNK_EXAMPLES,
    DEFAULT_KERNELS,
    DEFAULT_STATE,
    STATE_FORMAT,
    STATE_VERSION,
    Invocation,
    PairState,
    SoakBusy,
    SoakFailure,
    SoakState,
    SoakStateError,
    SoakStopped,
    failures_dir_of,
    load_state,
    locked,
    save_state,
    visit_seed,
)
from linattn_verify.soak.visits import (
    SoakSettings,
    Stopper,
    VisitOutcome,
    progress_line,
    soak,
    summary,
    visit,
)

__all__ = [
    "DEFAULT_CHUNK_EXAMPLES",
    "DEFAULT_KERNELS",
    "DEFAULT_STATE",
    "STATE_FORMAT",
    "STATE_VERSION",
    "Invocation",
    "PairState",
    "SoakBusy",
    "SoakFailure",
    "SoakSettings",
    "SoakState",
    "SoakStateError",
    "SoakStopped",
    "Stopper",
    "VisitOutcome",
    "failures_dir_of",
    "load_state",
    "locked",
    "progress_line",
    "save_state",
    "soak",
    "summary",
    "visit",
    "visit_seed",
]
