# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Properties of linear-attention kernels, each a pure function (case, kernel) -> verdict."""
