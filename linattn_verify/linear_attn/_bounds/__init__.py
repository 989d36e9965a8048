# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The term-counting machinery behind `linattn_verify.linear_attn.tolerance` (see its docstring)."""
