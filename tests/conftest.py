# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Suite-wide setup: share the CPUs among pytest-xdist workers instead of oversubscribing them.

Each xdist worker is a process whose torch would start one intra-op thread per core; with
``-n 2`` on 2 cores that is 4 busy threads on 2 cores, and torch's spinning threads then make
small tensor operations an order of magnitude slower (the size reach of `check`, which is timed,
got to T = 257 in 24 s instead of T = 2177). Each worker gets its share of the cores instead.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
