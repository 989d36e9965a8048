# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The result model: one shape for every result, from one comparison to one verdict.

Data moves down this list once, and nothing re-derives what an earlier step already knew:

* `Comparison`: one tensor of one property on one case, against the oracle (``reference``
  ``"oracle"``), against another run (``"pair:<label>"``: |a - b| <= B_a + B_b) or bit for bit
  (``"bitwise:<condition>"``). Its ``deciding`` score is the one its rule is decided on.
* `PropertyResult`: one property on one case: a status, its comparisons, and the one-line
  ``reason`` no comparison carries (why it did not apply, what the kernel did wrong).
* `CaseRecord`: a `PropertyResult` as `run` and `check` record it (kernel, form, dtype, sizes,
  time, saved failure): what the run document's ``results.jsonl`` holds, one per line.
* `PropertyVerdict`: one kernel x property over a whole search.

Every type is frozen and has one ``to_json`` / ``from_json``; the writer, the summary, the plots
and the CLI read them by attribute. This package imports no torch: `comparison` holds the
first rung, `verdicts` the others, `message` renders a comparison for a person.
"""

from linattn_verify.results.comparison import (
    FAIL_THRESHOLD,
    STATUSES,
    Comparison,
    Counts,
    Scores,
    Severity,
    Status,
    TensorStatus,
    Worst,
    base_tensor,
    worst_of,
)
from linattn_verify.results.verdicts import (
    CaseRecord,
    PropertyResult,
    PropertyVerdict,
    judged_status,
)

__all__ = [
    "FAIL_THRESHOLD",
    "STATUSES",
    "CaseRecord",
    "Comparison",
    "Counts",
    "PropertyResult",
    "PropertyVerdict",
    "Scores",
    "Severity",
    "Status",
    "TensorStatus",
    "Worst",
    "base_tensor",
    "judged_status",
    "worst_of",
]
