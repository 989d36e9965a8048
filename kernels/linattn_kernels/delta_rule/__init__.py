# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta rule (DeltaNet, Gated DeltaNet, KDA-style vector gates), forward and backward.

`recurrent_delta_rule` (``recurrent.py``) evaluates it token by token; `chunk_delta_rule`
(``chunk.py``) in chunks, in the WY / UT form with the triangular inverse in fp32 (CHUNK.md).
Both take FLA's calling convention ``fn(q, k, v, g, beta, *, scale, initial_state,
output_final_state, cu_seqlens, use_qk_l2norm_in_kernel)`` with ``g=None`` for no gate.
README.md derives the recurrent backward; the recurrent module's ``precision_recipe(dtype)``
returns the keyword arguments of ``linattn_verify.delta.DeltaRecipe`` that the family's error
model charges.
"""

from linattn_kernels.delta_rule.chunk import chunk_delta_rule
from linattn_kernels.delta_rule.recurrent import precision_recipe, recurrent_delta_rule

__all__ = ["chunk_delta_rule", "precision_recipe", "recurrent_delta_rule"]
