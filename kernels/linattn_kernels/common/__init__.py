# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Pieces the three kernel forms share.

Host side (torch): `args` (validation into `Inputs`), `results` (what launchers return and how
autograd keeps it), `tables` (the token-block table), `blocks` (tile sizes). Device side
(``@triton.jit``): `loads`, `feature_maps`, `decay`, `division` (and `tables`' readers).
"""
