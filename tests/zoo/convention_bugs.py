"""Broken kernels written in the conventions users declare instead of wrapping.

Each is a plain function in its own convention (heads-first tensors, a value-major state, eps
inside the dot, o returned alone) with one real defect; `test_convention_zoo.py` checks that
``check``, given the truthful declaration, rejects it. Their correct twins are in the soundness
corpus (tests/corpus: ``heads_first_vk`` of both families, ``performer_pytorch``).
"""

from __future__ import annotations

import torch


def heads_first_exclusive(
    q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False
):
    """Heads-first, value-major state; o_t reads the state before token t is added."""
    B, H, T, K = q.shape
    scale = K**-0.5 if scale is None else scale
    state = torch.zeros(B, H, v.shape[-1], K) if initial_state is None else initial_state.float()
    outs = []
    for t in range(T):
        if g is not None:
            state = state * torch.exp(g[:, :, t].float())[..., None, None]
        outs.append((state @ (scale * q[:, :, t].float())[..., None])[..., 0])  # the defect
        state = state + v[:, :, t].float()[..., None] * k[:, :, t].float()[..., None, :]
    return torch.stack(outs, 2).to(q.dtype), (state if output_final_state else None)


def delta_initial_state_unread_transposed(
    q, k, v, beta, scale=None, initial_state=None, output_final_state=False
):
    """DeltaNet heads-first with a value-major state, but it reads the initial state key-major."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    if initial_state is None:
        M = torch.zeros(B, H, V, K)
    else:  # the defect: the caller's [V, K] state taken as [K, V]
        M = initial_state.float().reshape(B, H, K, V).transpose(-1, -2)
    outs = []
    for t in range(T):
        kt = k[:, :, t].float()
        err = v[:, :, t].float() - torch.einsum("bhvk,bhk->bhv", M, kt)
        M = M + torch.einsum("bhv,bhk->bhvk", beta[:, :, t].float()[..., None] * err, kt)
        outs.append(torch.einsum("bhvk,bhk->bhv", M, scale * q[:, :, t].float()))
    return torch.stack(outs, 2).to(q.dtype), (M if output_final_state else None)


def eps_in_dot_stale_key_sum(q, k, v, eps=1e-6):
    """Heads-first, eps inside the dot, o alone; the denominator's key sum misses token t."""
    z = torch.cumsum(k.float(), dim=-2) - k.float()  # the defect: exclusive
    kv = torch.cumsum(k.float()[..., :, None] * v.float()[..., None, :], dim=-3)
    num = torch.einsum("bhtd,bhtde->bhte", q.float(), kv)
    den = torch.einsum("bhtd,bhtd->bht", q.float(), z + eps)
    return (num / den[..., None]).to(q.dtype)


def efficient_softmax_over_tokens(q, k, v, eps=1e-6):
    """Efficient attention whose query softmax runs over the tokens, not the features (dim=-2,
    the non-causal form's key softmax, copied to the queries): every output reads the future."""
    dtype = q.dtype
    q = torch.softmax(q.float(), dim=-2)  # the defect
    k = torch.exp(k.float())
    context = torch.cumsum(torch.einsum("bhtk,bhtv->bhtkv", k, v.float()), dim=2)
    num = torch.einsum("bhtk,bhtkv->bhtv", q, context)
    den = torch.einsum("bhtk,bhtk->bht", q, torch.cumsum(k, dim=2)) + eps
    return (num / den[..., None]).to(dtype)


def value_gate_after_update(
    q, k, v, g, beta, *, gv, scale=None, initial_state=None, output_final_state=False
):
    """Gated DeltaNet whose value gate decays the state after the correction, not before."""
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.float()
    outs = []
    for t in range(T):
        if g is not None:
            S = S * torch.exp(g[:, t].float())[..., None, None]
        kt = k[:, t].float()
        err = v[:, t].float() - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + torch.einsum("bhk,bhv->bhkv", kt, beta[:, t].float()[..., None] * err)
        S = S * torch.exp(gv[:, t].float())[:, :, None, :]  # the defect: after the correction
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t].float() * scale))
    return torch.stack(outs, dim=1).to(q.dtype), (S if output_final_state else None)


def gla_value_gate_after_update(
    q, k, v, gk=None, gv=None, scale=None, initial_state=None, output_final_state=False
):
    """GLA whose value gate decays the state after k_t v_t^T is added, not before."""
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.float()
    outs = []
    for t in range(T):
        if gk is not None:
            S = S * torch.exp(gk[:, t].float())[..., None]
        S = S + k[:, t].float()[..., None] * v[:, t].float()[..., None, :]
        S = S * torch.exp(gv[:, t].float())[:, :, None, :]  # the defect: after the update
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t].float() * scale))
    return torch.stack(outs, dim=1).to(q.dtype), (S if output_final_state else None)
