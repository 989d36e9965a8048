"""A kernel with two independent defects, for the search that goes on past a finding.

`two_defects` is recurrent linear attention (scalar gate, varlen, initial and final states)
that is wrong in two unrelated ways:

* an empty sequence of a varlen batch gets a zero final state, not its initial state (the
  forward pass: it needs a varlen batch with an empty sequence and an initial state);
* the gradient of k is 1.5 times too large for every token from the ninth on (the backward
  pass only: it needs T >= 9, and the forward values are right).

One defect must not hide the other: `test_two_defects.py` checks that ``check`` names both.
"""

from __future__ import annotations

import torch


def _inflated_after(k: torch.Tensor, first: int) -> torch.Tensor:
    """k, whose gradient is 1.5 times too large from token ``first`` on (its value is exact)."""
    late = torch.zeros_like(k)
    late[:, first:] = 0.5 * k[:, first:]
    return k + late - late.detach()


def two_defects(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """Varlen batches are one row (B = 1) of packed sequences, one state row per sequence."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    edges = [0, T] if cu_seqlens is None else [int(e) for e in cu_seqlens]
    k = _inflated_after(k, 8)  # the second defect
    outputs, finals = [], []
    for n in range(len(edges) - 1):
        rows = slice(n, n + 1) if cu_seqlens is not None else slice(None)
        S = torch.zeros(B, H, K, V) if initial_state is None else initial_state[rows].float()
        for t in range(edges[n], edges[n + 1]):
            if g is not None:
                S = S * torch.exp(g[:, t].float())[..., None, None]
            S = S + k[:, t].float()[..., None] * v[:, t].float()[..., None, :]
            outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t].float(), S))
        if edges[n + 1] == edges[n]:
            S = torch.zeros_like(S)  # the first defect: an empty sequence's state is dropped
        finals.append(S)
    o = torch.stack(outputs, dim=1).to(q.dtype)
    return o, (torch.cat(finals) if output_final_state else None)
