# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The verdict map: kernels by dtype by tensor, each cell the worst r against the fail line.

One map per family (their tensors differ). A cell holds what a reader needs in one look: the
worst r of the tensor's oracle comparisons over the cases (coloured by headroom, the factor
the error may still grow before the fail line `FAIL_THRESHOLD`), or, where no comparison
decided anything, why: ``undefined`` (the exact value does not exist), ``ill_conditioned``
(the bound certifies no digit), ``out_of_contract`` (inputs the kernel declares it does not
take), ``failed`` (the kernel failed the case without a scored comparison), or ``not
applicable`` (the kernel does not produce the tensor, or does not take the dtype).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from linattn_verify import observe
from linattn_verify.reporting.summary import TENSOR_ORDER, cases_of, oracle_comparisons, rank
from linattn_verify.results import FAIL_THRESHOLD, CaseRecord, base_tensor
from linattn_verify.typing import DTYPE_NAMES

BANDS = (
    ("ample", 0.1, "r <= 0.1: at least 20x headroom"),
    ("good", 0.5, "0.1 < r <= 0.5"),
    ("close", 1.0, "0.5 < r <= 1: within the guaranteed bound"),
    ("suspect", FAIL_THRESHOLD, "1 < r <= 2: past the bound, not yet failing"),
)
"""Headroom bands of a scored cell: name, upper limit of r, legend text."""
STATUS_LEGEND = {
    "failed": "r > 2 or a wrong non-finite value: the kernel is wrong here",
    "ill_conditioned": "held, but the bound spans the whole scale: nothing certified",
    "undefined": "the exact value does not exist (e.g. 0/0): counted, not judged",
    "out_of_contract": "inputs outside what the kernel declares: judged for finiteness only",
    "not_applicable": "n/a: the kernel does not produce this tensor or take this dtype",
}
"""The cell kinds that are not a headroom band, with their legend text."""
UNDECIDED_CELLS = ("ill_conditioned", "undefined", "out_of_contract")

_NAMED_TENSOR = re.compile(r"^(\w+)(?:\[[^\]]*\])?:")


@dataclass(frozen=True)
class Cell:
    """One kernel, dtype and tensor.

    Attributes:
        kind: A band of `BANDS` or a status of `STATUS_LEGEND`.
        r: The worst r (the deciding score) over the scored cases, else `None`.
        cases: Cases with a scored comparison of the tensor.
        undecided: Cases by undecided status attributed to the tensor (its name leads their
            reason) or to no tensor.
    """

    kind: str
    r: float | None
    cases: int
    undecided: Mapping[str, int]

    @property
    def headroom(self) -> float | None:
        """How many times the error may grow before failing (`observe.headroom`), or `None`."""
        return None if self.r is None else observe.headroom(self.r)

    def text(self) -> str:
        """The cell's text: the worst r, or the status."""
        if self.r is None:
            return self.kind.replace("_", " ")
        return f"{self.r:.2g}" if math.isfinite(self.r) else str(self.r)


@dataclass(frozen=True)
class VerdictMap:
    """One family's map: rows (kernel, dtype), columns tensors.

    Attributes:
        family: The family.
        tensors: Column order.
        rows: ``(kernel, dtype, cells)``, one cell per tensor.
    """

    family: str
    tensors: tuple[str, ...]
    rows: tuple[tuple[str, str, tuple[Cell, ...]], ...]


def band(r: float) -> str:
    """The kind of a scored cell with worst score ``r``."""
    if not r <= FAIL_THRESHOLD:  # NaN and inf included
        return "failed"
    return next(name for name, limit, _ in BANDS if r <= limit)


def _tensor_of(record: CaseRecord) -> str | None:
    # An undecided status names its tensor first ("dg: the bound reaches ...").
    match = _NAMED_TENSOR.match(record.reason or "")
    return match.group(1) if match else None


def _cell(records: Sequence[CaseRecord], tensor: str) -> Cell:
    scores = []
    undecided: dict[str, int] = {}
    failed_unscored = False
    for record in records:
        oracle = [c for c in oracle_comparisons(record) if base_tensor(c.tensor) == tensor]
        if record.status in UNDECIDED_CELLS and _tensor_of(record) in (tensor, None):
            undecided[record.status] = undecided.get(record.status, 0) + 1
        if oracle and record.status != "not_applicable":
            scores.append(max(c.deciding for c in oracle))
        elif record.status == "failed" and not record.comparisons:
            failed_unscored = True
    if scores:
        worst = max(scores, key=lambda s: math.inf if math.isnan(s) else s)
        return Cell(band(worst), worst, len(scores), undecided)
    if failed_unscored:
        return Cell("failed", None, 0, undecided)
    if undecided:
        return Cell(max(undecided, key=lambda k: undecided[k]), None, 0, undecided)
    return Cell("not_applicable", None, 0, {})


def _place(kernel: str, kernels: Mapping[str, str]) -> tuple[int, str]:
    # The run's kernels in their order; a kernel that only its cases name, after them.
    names = list(kernels)
    return (names.index(kernel), "") if kernel in names else (len(names), kernel)


def verdict_maps(document: Mapping[str, Any]) -> list[VerdictMap]:
    """Return one `VerdictMap` per family of the run's kernels, in the kernels' order."""
    families = {k["name"]: str(k.get("family", "linear_attn")) for k in document["kernels"]}
    records: dict[tuple[str, str], list[CaseRecord]] = {}
    for record in cases_of(document):
        if record.status != "not_applicable":
            records.setdefault((record.kernel, record.dtype), []).append(record)
    maps = []
    named = [*families.values(), *(families.get(k, "linear_attn") for k, _ in records)]
    for family in dict.fromkeys(named):
        keys = sorted(
            (key for key in records if families.get(key[0], "linear_attn") == family),
            key=lambda k: (_place(k[0], families), rank(k[1], DTYPE_NAMES)),
        )
        names = {
            base_tensor(c.tensor)
            for key in keys
            for record in records[key]
            for c in oracle_comparisons(record)
        }
        tensors = tuple(sorted(names, key=lambda t: rank(t, TENSOR_ORDER)))
        rows = tuple(
            (kernel, dtype, tuple(_cell(records[(kernel, dtype)], t) for t in tensors))
            for kernel, dtype in keys
        )
        if rows:
            maps.append(VerdictMap(family, tensors, rows))
    return maps


def nearest(
    maps: Sequence[VerdictMap], n: int = 3, *, passing: bool = False
) -> list[tuple[str, str, str, Cell]]:
    """The ``n`` scored cells of ``maps`` (`verdict_maps`) nearest (or past) the fail line.

    Each as ``(kernel, dtype, tensor, cell)``; with ``passing``, only cells within the line
    (the findings name the others).
    """
    cells = [
        (kernel, dtype, tensor, cell)
        for vmap in maps
        for kernel, dtype, row in vmap.rows
        for tensor, cell in zip(vmap.tensors, row, strict=True)
        if cell.r is not None and not (passing and cell.kind == "failed")
    ]
    cells.sort(key=lambda item: -(math.inf if math.isnan(item[3].r or 0.0) else item[3].r or 0.0))
    return cells[:n]


__all__ = ["BANDS", "STATUS_LEGEND", "Cell", "VerdictMap", "band", "nearest", "verdict_maps"]
