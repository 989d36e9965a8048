"""Gated DeltaNet / KDA token recurrence on the *transposed* state M = S^T, batched with bmm.

What is different: the state is kept as M = S^T ``[B*H, V, K]`` (value rows, key columns), so a
vector gate scales M's columns, the prediction is the matrix-vector product ``M @ k`` (``bmm``)
and the write is a rank-one ``torch.baddbmm(M, err, (beta k)^T)``: beta multiplies the key, not
the error. One code path serves all three gate shapes (a scalar gate is broadcast over K,
``g=None`` skips the decay). Batch rows and heads are folded into one bmm batch; packed
sequences run one after the other with the same code. Autograd backward.
"""

from __future__ import annotations

import torch


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = K**-0.5 if scale is None else scale

    # [B, T, H, X] -> [B, H, T, X], fp32
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    bh = beta.float().transpose(1, 2)  # [B, H, T]
    if use_qk_l2norm_in_kernel:
        qh = qh / torch.sqrt(qh.square().sum(-1, keepdim=True) + 1e-6)
        kh = kh / torch.sqrt(kh.square().sum(-1, keepdim=True) + 1e-6)
    qh = s * qh
    if g is None:
        decay = None
    else:
        gh = g.float().transpose(1, 2)
        if gh.dim() == 3:
            gh = gh.unsqueeze(-1).expand(B, H, T, K)
        decay = torch.exp(gh)  # [B, H, T, K]

    def scan(rows: slice, lo: int, hi: int, M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run tokens lo..hi-1 of batch rows ``rows``; M is [n*H, V, K]."""
        n = M.shape[0] // H
        outs = []
        for t in range(lo, hi):
            if decay is not None:
                M = M * decay[rows, :, t].reshape(n * H, 1, K)
            kt = kh[rows, :, t].reshape(n * H, K, 1)
            err = vh[rows, :, t].reshape(n * H, V, 1) - torch.bmm(M, kt)
            bk = (bh[rows, :, t].reshape(n * H, 1, 1) * kt).transpose(1, 2)
            M = torch.baddbmm(M, err, bk)
            qt = qh[rows, :, t].reshape(n * H, K, 1)
            outs.append(torch.bmm(M, qt).reshape(n, H, V))
        o = torch.stack(outs, 1) if outs else M.new_zeros(n, 0, H, V)
        return o, M

    if cu_seqlens is None:
        if initial_state is None:
            M0 = q.new_zeros(B * H, V, K, dtype=torch.float32)
        else:
            M0 = initial_state.float().transpose(-1, -2).reshape(B * H, V, K)
        o, M = scan(slice(0, B), 0, T, M0)
        final = M.reshape(B, H, V, K).transpose(-1, -2)
    else:
        edges = cu_seqlens.tolist()
        pieces, states = [], []
        for n in range(len(edges) - 1):
            if initial_state is None:
                M0 = q.new_zeros(H, V, K, dtype=torch.float32)
            else:
                M0 = initial_state[n].float().transpose(-1, -2)
            o_n, M = scan(slice(0, 1), edges[n], edges[n + 1], M0)
            pieces.append(o_n)
            states.append(M.transpose(-1, -2))
        o = torch.cat(pieces, 1)
        final = torch.stack(states)
    return o.to(q.dtype), (final.contiguous() if output_final_state else None)
