"""Gated DeltaNet with a value gate, token by token: S' = diag(e^g) S diag(e^gv), then the rule.

What is different: the value gate gv [B, T, H, V] (FLA's ``gv``) decays each value column of
the state too, applied as two broadcasts in fp32 (first e^g over the keys, then e^gv over the
values), the correction formed with ``torch.einsum``; forward only, no cu_seqlens.
"""

from __future__ import annotations

import torch


def value_gated_delta_rule(
    q, k, v, g, beta, *, gv, scale=None, initial_state=None, output_final_state=False
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(B, H, K, V) if initial_state is None else initial_state.float()
    with torch.no_grad():
        outs = []
        for t in range(T):
            if g is not None:
                S = S * torch.exp(g[:, t].float())[..., None, None]
            S = S * torch.exp(gv[:, t].float())[:, :, None, :]
            kt = k[:, t].float()
            err = v[:, t].float() - torch.einsum("bhkv,bhk->bhv", S, kt)
            S = S + torch.einsum("bhk,bhv->bhkv", kt, beta[:, t].float()[..., None] * err)
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t].float() * scale))
    o = torch.stack(outs, dim=1).to(q.dtype)
    return o, (S if output_final_state else None)
