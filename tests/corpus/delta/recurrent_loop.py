"""DeltaNet (no gate), token by token, with plain torch ops in a Python loop.

What is different from the project's kernels: no Triton, no autograd.Function. The state is a
``[H, K, V]`` fp32 tensor per sequence, rebuilt functionally every token (``S = S + ...``), the
read-out and the prediction are ``torch.einsum`` contractions, and the backward is torch autograd
through the whole loop. The L2 norm multiplies by ``torch.rsqrt`` instead of dividing by a
square root. Packed sequences (``cu_seqlens``) are handled by looping over the sequences.

The function takes no ``g`` at all (DeltaNet), FLA's keyword arguments otherwise.
"""

from __future__ import annotations

import torch


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
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
    if scale is None:
        scale = K**-0.5
    qf, kf, vf, bf = q.float(), k.float(), v.float(), beta.float()
    if use_qk_l2norm_in_kernel:
        qf, kf = _unit(qf), _unit(kf)
    qf = qf * scale

    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        edges = cu_seqlens.tolist()
        spans = [(0, edges[n], edges[n + 1]) for n in range(len(edges) - 1)]

    rows: list[list[torch.Tensor]] = [[] for _ in range(B)]
    finals = []
    for n, (b, lo, hi) in enumerate(spans):
        if initial_state is None:
            S = q.new_zeros(H, K, V, dtype=torch.float32)
        else:
            S = initial_state[n].float()
        for t in range(lo, hi):
            kt = kf[b, t]
            guess = torch.einsum("hk,hkv->hv", kt, S)
            step = (vf[b, t] - guess) * bf[b, t].unsqueeze(-1)
            S = S + kt.unsqueeze(-1) * step.unsqueeze(-2)
            rows[b].append(torch.einsum("hk,hkv->hv", qf[b, t], S))
        finals.append(S)

    o = torch.stack([torch.stack(r) if r else qf.new_zeros(0, H, V) for r in rows]).to(q.dtype)
    final = torch.stack(finals) if output_final_state else None
    return o, final
