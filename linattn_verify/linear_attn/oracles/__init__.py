# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Oracles: float64 references in three forms, double-double, mpmath and exact arithmetic."""
