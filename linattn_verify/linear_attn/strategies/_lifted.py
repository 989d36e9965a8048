# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What the strategies draw for lifted feature maps: favor+'s W and the families that stress them.

The families (docs/design.md §9):

* ``score_cancellation`` (taylor2, rebased): every query lies near one direction d with a large
  norm R, every key nearly orthogonal to d with a large norm, plus the component along d that
  puts the score x = s q·k at the polynomial's cancellation point (x = -1 for taylor2, where
  1 + x + x²/2 = 1/2 while its terms are of size a²/2 with a = s Σ|q_i k_i| ≫ 1; x = 0 for
  rebased, where x² vanishes and its row sum with it). The feature dot then cancels: a kernel
  that loses digits there shows it, and the condition-aware bound says how many it may lose.
* ``large_norm`` (favor+): |x| around 14-20, so exp(W x - |x|²/2) underflows fp32 for every
  feature of a query unless the kernel stabilises it (normalized with eps = 0, where that
  cancels exactly: `linattn_verify.linear_attn.semantics`).

W (``[m, K]``, float32): ``gaussian`` has N(0, 1) entries (Performer's unstructured features);
``orthogonal`` stacks blocks of K orthonormal rows, each row rescaled to the norm of a Gaussian
row (Performer's ORF), so E[φ(x)·φ(y)] = exp(x·y) either way.
"""

from __future__ import annotations

import torch

from linattn_verify.linear_attn.feature_maps import feature_dim
from linattn_verify.typing import FeatureMap

LIFTED_FAMILIES = ("score_cancellation", "large_norm")
"""Value families for lifted maps."""

FAMILY_MAPS = {"score_cancellation": ("taylor2", "rebased"), "large_norm": ("favor+",)}
"""The feature maps each lifted-map family stresses: the strategies draw it for those only (a
spec may still name it with any map: the values are built the same way)."""

PROJECTIONS = ("gaussian", "orthogonal")
"""Kinds of favor+ projection W."""


def largest_key_dim(feature_map: FeatureMap, max_feature_dim: int) -> int:
    """The largest K whose feature dimension under ``feature_map`` stays within the limit (>= 1).

    favor+'s F is m, not a function of K: any K fits.
    """
    if feature_map == "favor+":
        return 1 << 30
    K = 1
    while feature_dim(feature_map, K + 1) <= max_feature_dim:
        K += 1
    return K


def projection_values(kind: str, m: int, K: int, gen: torch.Generator) -> torch.Tensor:
    """Draw favor+'s W ``[m, K]`` (float32) of ``kind`` (`PROJECTIONS`)."""
    gauss = torch.randn(m, K, generator=gen)
    if kind == "gaussian":
        return gauss
    blocks = []
    for start in range(0, m, K):
        rows = min(K, m - start)
        block, _ = torch.linalg.qr(torch.randn(K, K, generator=gen, dtype=torch.float64))
        blocks.append(block[:rows])
    orth = torch.cat(blocks).to(torch.float32)
    scaled: torch.Tensor = orth * gauss.norm(dim=-1, keepdim=True)
    return scaled


def joint_values(
    family: str,
    feature_map: str,
    q: torch.Tensor,
    k: torch.Tensor,
    scale: float,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) reshaped to ``family`` (float32 ``[B, T, H, K]`` draws of the normal family).

    ``scale`` is the problem's resolved scale s (the score maps' x = s q·k).
    """
    if family == "large_norm":
        radius = 14 + 6 * torch.rand(q.shape[:-1], generator=gen)
        unit = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-30)
        return unit * radius[..., None], k
    if family != "score_cancellation":
        return q, k
    K = q.shape[-1]
    d = torch.randn(K, generator=gen)
    d = d / d.norm()
    R = 8.0
    noise = 0.05 * torch.randn(q.shape, generator=gen)
    q_new = R * d + noise
    k_perp = 4 * k - (4 * k @ d)[..., None] * d  # large, orthogonal to d (0 when K = 1)
    target = -1.0 if feature_map == "taylor2" else 0.0
    along = target / (scale * R) if scale else 0.0
    return q_new, k_perp + along * d


__all__ = [
    "FAMILY_MAPS",
    "LIFTED_FAMILIES",
    "PROJECTIONS",
    "joint_values",
    "largest_key_dim",
    "projection_values",
]
