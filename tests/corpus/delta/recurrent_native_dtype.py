"""Gated DeltaNet token recurrence computed entirely in the input dtype (no upcast).

What is different: nothing is promoted to fp32. q, k, v, beta, the decay factor exp(g) (rounded
to the input dtype) and the state itself are fp16 / bf16 tensors when the inputs are; every
elementwise product and every reduction over K rounds to the input dtype. This is how a quick
port without ``.float()`` calls looks (only the optional L2 norm is formed in fp32 and its result
stored in the input dtype). The final state is returned in the input dtype. It
computes the delta rule correctly to within the rounding of that dtype (for fp32 inputs it is an
ordinary fp32 recurrence). Gates: none or scalar ``[B, T, H]``. No varlen.
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
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = q.dtype
    if scale is None:
        scale = 1.0 / K**0.5
    if use_qk_l2norm_in_kernel:
        # The one exception: Σx² + 1e-6 is formed in fp32 (in fp16 it would be subnormal for
        # small x, and the backward of the root overflows), the normalised q, k stored back.
        q = (q.float() / (q.float().square().sum(-1, keepdim=True) + 1e-6).sqrt()).to(dt)
        k = (k.float() / (k.float().square().sum(-1, keepdim=True) + 1e-6).sqrt()).to(dt)
    q = q * scale
    decay = None if g is None else g.exp().to(dt)
    S = (
        torch.zeros(B, H, K, V, dtype=dt, device=q.device)
        if initial_state is None
        else initial_state.to(dt)
    )
    out = []
    for t in range(T):
        if decay is not None:
            S = S * decay[:, t, :, None, None]
        kt = k[:, t, :, :, None]  # [B, H, K, 1]
        err = v[:, t] - (S * kt).sum(-2)  # [B, H, V]
        S = S + kt * (beta[:, t, :, None] * err)[:, :, None, :]
        out.append((S * q[:, t, :, :, None]).sum(-2))
    o = torch.stack(out, 1) if out else v.new_zeros(B, 0, H, V)
    return o, (S if output_final_state else None)
