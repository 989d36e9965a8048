# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Pieces the three kernel forms share: feature maps in Triton, argument preparation."""
