# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Lifted feature maps (taylor2, rebased, favor+): a Triton φ step and attention through a form.

`lift_features` applies φ: R^K -> R^F (forward and backward in Triton); `lifted_attention` lifts
q and k and runs a chunked or recurrent form on the fp32 features. The derivations and the
rounding of every feature are in this package's README.
"""

from linattn_kernels.lifted.attention import check_lifted_gate, lifted_attention, refuse_weights
from linattn_kernels.lifted.lift import LIFTED_MAPS, lift_features

__all__ = [
    "LIFTED_MAPS",
    "check_lifted_gate",
    "lift_features",
    "lifted_attention",
    "refuse_weights",
]
