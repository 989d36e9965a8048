"""Two-pass chunked linear attention (C = 64, scalar gate) that stores chunk states in bf16.

What is different: the computation is split as a serving kernel splits it. Pass 1 runs the
chunk-to-chunk recurrence of the state in float32 and *stores* the state entering every chunk in
a bfloat16 tensor [B, H, n, K, V] (half the memory of fp32), whatever the input dtype. Pass 2
computes every chunk's output at once from that stored tensor, widened back to float32: an
output term that reaches token t through the state meets exactly one rounding to bfloat16 (the
store); intra-chunk terms and the returned final state (the fp32 running state) meet none.
Decays: chunk-local cumulative sums, reference point at the chunk's start. Inputs upcast to
float32; no packed sequences.
"""

from __future__ import annotations

import torch

C = 64


def bf16_state_attention(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else scale
    Q, Kf, Vf = (x.float().transpose(1, 2) for x in (q, k, v))  # [B, H, T, ·]
    Gs = torch.zeros(B, H, T, device=q.device) if g is None else g.float().transpose(1, 2)
    starts = list(range(0, T, C))

    # Pass 1: state recurrence over chunks, fp32; the state entering each chunk stored in bf16.
    S = torch.zeros(B, H, K, V, device=q.device) if initial_state is None else initial_state.float()
    stored = []
    locs = []
    for a in starts:
        b = min(a + C, T)
        loc = torch.cumsum(Gs[..., a:b], dim=-1)
        locs.append(loc)
        stored.append(S.to(torch.bfloat16))
        to_end = torch.exp(loc[..., -1:] - loc)  # [B, H, c]
        S = (
            torch.exp(loc[..., -1])[..., None, None] * S
            + (Kf[..., a:b, :] * to_end[..., None]).transpose(-1, -2) @ Vf[..., a:b, :]
        )

    # Pass 2: outputs of every chunk from the stored states.
    outs = []
    for i, a in enumerate(starts):
        b = min(a + C, T)
        loc = locs[i]
        n = b - a
        qc, kc, vc = Q[..., a:b, :], Kf[..., a:b, :], Vf[..., a:b, :]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(torch.where(causal, loc[..., :, None] - loc[..., None, :], float("-inf")))
        scores = (qc @ kc.transpose(-1, -2)) * decay
        inter = (qc * torch.exp(loc)[..., None]) @ stored[i].float()
        outs.append((scores @ vc + inter) * s)
    o = torch.cat(outs, dim=2) if outs else Vf
    return o.transpose(1, 2).to(q.dtype), (S if output_final_state else None)
