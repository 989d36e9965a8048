# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What every family's FLA adapters assume of the flash-linear-attention release."""

FLA_REQUIREMENT = "fla-core==0.6.0"
"""The FLA release the adapters were written against (semantics, casts, limits)."""

CHUNK_SIZE = 64
"""FLA's chunk size for ``chunk_*`` (and the largest ``fused_chunk`` uses)."""
