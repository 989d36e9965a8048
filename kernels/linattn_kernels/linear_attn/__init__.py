# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Causal linear attention in three forms: parallel, chunked and recurrent (forward + backward).

Each takes a scalar gate g ``[B, T, H]`` or a vector gate g ``[B, T, H, K]``; both run the same
kernels, specialised at compile time by their constexpr ``GATE`` (README, "Vector gates").

Each form's ``precision_recipe(dtype)`` returns the keyword arguments of
``linattn_verify.linear_attn.recipe.PrecisionRecipe`` describing how it rounds in the current mode
(interpreter or CUDA); `precision_recipes` maps form names to those functions.
"""

from collections.abc import Callable

import torch

from linattn_kernels.linear_attn.chunk import chunked_linear_attention
from linattn_kernels.linear_attn.chunk import precision_recipe as chunk_precision_recipe
from linattn_kernels.linear_attn.parallel import parallel_linear_attention
from linattn_kernels.linear_attn.parallel import precision_recipe as parallel_precision_recipe
from linattn_kernels.linear_attn.recurrent import precision_recipe as recurrent_precision_recipe
from linattn_kernels.linear_attn.recurrent import recurrent_linear_attention

FORMS: dict[str, Callable[..., tuple[torch.Tensor, object]]] = {
    "parallel": parallel_linear_attention,
    "chunk": chunked_linear_attention,
    "recurrent": recurrent_linear_attention,
}
"""The public function of each form."""

precision_recipes: dict[str, Callable[..., dict[str, object]]] = {
    "parallel": parallel_precision_recipe,
    "chunk": chunk_precision_recipe,
    "recurrent": recurrent_precision_recipe,
}
"""Each form's ``precision_recipe(dtype, ...)``."""

__all__ = [
    "FORMS",
    "chunked_linear_attention",
    "parallel_linear_attention",
    "precision_recipes",
    "recurrent_linear_attention",
]
