# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Vector gates (GLA): g ``[B, T, H, K]``, one log decay per key dimension, in the three forms.

The public functions stay those of `linattn_kernels.linear_attn`; their host launchers hand a
4-D g to the launchers here (`recurrent`, `chunk`, `parallel`). The design is in this package's
README.
"""
