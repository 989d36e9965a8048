# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Suite-wide setup: share the CPUs among pytest-xdist workers and start the longest tests first.

Each xdist worker is a process whose torch would start one intra-op thread per core; with
``-n 2`` on 2 cores that is 4 busy threads on 2 cores, and torch's spinning threads then make
small tensor operations an order of magnitude slower (the size reach of `check`, which is timed,
got to T = 257 in 24 s instead of T = 2177). Each worker gets its share of the cores instead.

xdist hands tests out in collection order, and the bug zoo's ``check`` runs (each up to a
minute, the longest of the suite) would otherwise come last: one worker ran them alone for the
last 2.5 minutes of a 14.7-minute run. They are collected first instead, so the short tests fill
in behind them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LONGEST_FIRST = ("zoo/test_zoo_cli.py", "zoo/test_zoo.py", "properties/test_equivalence.py")
"""Test files whose tests take 10 to 75 s each, in the order they are handed out."""


def pytest_configure(config: pytest.Config) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        where = item.path.relative_to(here).as_posix() if here in item.path.parents else ""
        return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within each group is kept
