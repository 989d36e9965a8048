# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Delta-rule zoo kernels as ``linattn-verify check --family delta`` targets.

``tests/zoo/delta_cli_targets.py:<name>`` for every broken kernel of `delta_bugs.py` (its name
without ``zoo/delta_``) and ``twin_recurrent`` / ``twin_chunk`` / ``twin_chunk64``: plain
functions in FLA's calling convention, loaded by path as a user's file would be.
"""

from __future__ import annotations

from pathlib import Path

from linattn_verify.core.loading import import_file

_zoo = import_file(Path(__file__).with_name("delta_bugs.py"), "_linattn_delta_zoo_for_cli")

_broken = [*_zoo.DELTA_ZOO, *_zoo.DELTA_SIZE_ZOO]
globals().update({k.name.removeprefix("zoo/delta_"): k.fn for k, _, _ in _broken})
twin_recurrent = _zoo.RECURRENT_TWIN.fn
twin_chunk = _zoo.CHUNK_TWIN.fn
twin_chunk64 = _zoo.CHUNK64_TWIN.fn
