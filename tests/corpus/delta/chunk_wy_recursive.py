"""Gated DeltaNet / DeltaNet chunk form, C = 128, WY factors built token by token.

What is different: no matrix L and no inverse are ever formed. Inside a chunk the corrected
values u_i and the WY keys w_i are built by the DeltaNet paper's recursion, one token at a time,
with beta applied *outside* the bracket:

    u_i = beta_i (v_i - sum_{j<i} (k_i . k_j) e^{G_i - G_j} u_j)
    w_i = beta_i (k_i e^{G_i} - sum_{j<i} (k_i . k_j) e^{G_i - G_j} w_j)

(explicit forward substitution, the rows kept in a Python list). The chunk is 128 tokens. The
signature has no ``use_qk_l2norm_in_kernel``: it never normalises q and k. Gates: none or
scalar. Packed sequences supported. Autograd backward.
"""

from __future__ import annotations

import torch

CHUNK = 128


def _chunk(qc, kc, vc, bc, gc, S, scale):
    """One chunk, heads first: qc, kc [H, c, K]; vc [H, c, V]; bc, gc [H, c]; S [H, K, V]."""
    H, c, K = kc.shape
    G = gc.cumsum(-1) if gc is not None else kc.new_zeros(H, c)
    gram = torch.einsum("hik,hjk->hij", kc, kc)
    us, ws = [], []
    for i in range(c):
        if i == 0:
            du = vc[:, 0]
            dw = kc[:, 0] * G[:, :1].exp()
        else:
            coef = gram[:, i, :i] * torch.exp(G[:, i : i + 1] - G[:, :i])  # [H, i]
            du = vc[:, i] - torch.einsum("hj,hjv->hv", coef, torch.stack(us, 1))
            dw = kc[:, i] * G[:, i : i + 1].exp() - torch.einsum(
                "hj,hjk->hk", coef, torch.stack(ws, 1)
            )
        us.append(bc[:, i, None] * du)
        ws.append(bc[:, i, None] * dw)
    U, W = torch.stack(us, 1), torch.stack(ws, 1)
    Vn = U - torch.einsum("hik,hkv->hiv", W, S)
    lower = torch.ones(c, c, dtype=torch.bool, device=kc.device).tril()
    decay = torch.where(lower, G[:, :, None] - G[:, None, :], float("-inf")).exp()
    scores = torch.einsum("hik,hjk->hij", qc, kc) * decay
    o = scale * (torch.einsum("hik,hkv->hiv", qc * G.exp()[..., None], S) + scores @ Vn)
    carry = (G[:, -1:] - G).exp()[..., None] * kc
    S = G[:, -1].exp()[:, None, None] * S + torch.einsum("hik,hiv->hkv", carry, Vn)
    return o, S


def chunk_delta_rule_wy(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    q32, k32, v32 = (x.float().permute(0, 2, 1, 3) for x in (q, k, v))
    b32 = beta.float().permute(0, 2, 1)
    g32 = None if g is None else g.float().permute(0, 2, 1)
    bounds = (
        [(b, 0, T) for b in range(B)]
        if cu_seqlens is None
        else [(0, int(cu_seqlens[i]), int(cu_seqlens[i + 1])) for i in range(len(cu_seqlens) - 1)]
    )
    pieces = [[] for _ in range(B)]
    states = []
    for n, (b, lo, hi) in enumerate(bounds):
        S = initial_state[n].float() if initial_state is not None else q32.new_zeros(H, K, V)
        for a in range(lo, hi, CHUNK):
            z = min(a + CHUNK, hi)
            o, S = _chunk(
                q32[b, :, a:z],
                k32[b, :, a:z],
                v32[b, :, a:z],
                b32[b, :, a:z],
                None if g32 is None else g32[b, :, a:z],
                S,
                scale,
            )
            pieces[b].append(o)
        states.append(S)
    o = torch.stack([torch.cat(p, 1) if p else v32.new_zeros(H, 0, V) for p in pieces]).permute(
        0, 2, 1, 3
    )
    return o.to(q.dtype), (torch.stack(states) if output_final_state else None)
