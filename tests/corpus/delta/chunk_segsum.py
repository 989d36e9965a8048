"""Gated DeltaNet chunk form (C = 32) with Mamba-2 style segment sums and a right-sided solve.

What is different: the decay between tokens j < i of a chunk is exp of the *segment sum*
sum_{j<s<=i} g_s, obtained as a cumulative sum of a masked [C, C] matrix of gates, not as a
difference of two cumulative sums (no cancellation: every term has the same sign). The decay of
key j to the chunk's end is the segment sum's last row. The triangular system is solved from the
right: X^T = R^T L^-T by ``solve_triangular(L^T, R^T, upper=True, left=False)``. The signature
has no ``scale``: the kernel always applies K^-1/2. Gates none / scalar; packed sequences;
states; the in-kernel L2 norm. Autograd backward.
"""

from __future__ import annotations

import torch

CHUNK = 32


def _segsum(g: torch.Tensor) -> torch.Tensor:
    """g [H, c] -> [H, c, c] with [i, j] = sum_{j<s<=i} g_s (j <= i) and -inf above."""
    c = g.shape[-1]
    below = torch.ones(c, c, dtype=torch.bool, device=g.device).tril(-1)  # s > j
    Z = g[:, :, None].expand(*g.shape, c).masked_fill(~below, 0.0)  # Z[s, j] = g_s if s > j
    seg = Z.cumsum(-2)  # seg[i, j] = sum_{s<=i, s>j} g_s
    upper = torch.ones(c, c, dtype=torch.bool, device=g.device).triu(1)
    return seg.masked_fill(upper, float("-inf"))


def gdn_chunk_segsum(
    q,
    k,
    v,
    g,
    beta,
    *,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
):
    B, T, H, K = q.shape
    V = v.shape[-1]
    f = torch.float32
    qf, kf, vf = (x.to(f).transpose(1, 2) for x in (q, k, v))
    bf = beta.to(f).transpose(1, 2)
    gf = torch.zeros_like(bf) if g is None else g.to(f).transpose(1, 2)
    if use_qk_l2norm_in_kernel:
        qf = qf / (qf.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
        kf = kf / (kf.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    qf = qf * K**-0.5
    if cu_seqlens is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        e = cu_seqlens.tolist()
        seqs = [(0, e[i], e[i + 1]) for i in range(len(e) - 1)]
    o_rows = [[] for _ in range(B)]
    finals = []
    for n, (b, lo, hi) in enumerate(seqs):
        S = qf.new_zeros(H, K, V) if initial_state is None else initial_state[n].to(f)
        for a in range(lo, hi, CHUNK):
            z = min(a + CHUNK, hi)
            c = z - a
            qc, kc, vc, bc, gc = (x[b, :, a:z] for x in (qf, kf, vf, bf, gf))
            seg = _segsum(gc)
            D = seg.exp()  # exp(sum_{j<s<=i} g_s), 0 above the diagonal
            G = gc.cumsum(-1)  # decay from the chunk's start to token i
            to_end = seg[:, -1, :].exp()  # exp(sum_{j<s<=c} g_s)
            eye = torch.eye(c, dtype=f, device=q.device)
            L = eye + (bc[..., None] * (kc @ kc.transpose(1, 2)) * D).tril(-1)
            R = torch.cat([bc[..., None] * vc, bc[..., None] * kc * G.exp()[..., None]], -1)
            Xt = torch.linalg.solve_triangular(
                L.transpose(1, 2), R.transpose(1, 2), upper=True, left=False, unitriangular=True
            )
            X = Xt.transpose(1, 2)
            Vn = X[..., :V] - X[..., V:] @ S
            o_rows[b].append((qc * G.exp()[..., None]) @ S + ((qc @ kc.transpose(1, 2)) * D) @ Vn)
            S = G[:, -1].exp()[:, None, None] * S + (kc * to_end[..., None]).transpose(1, 2) @ Vn
        finals.append(S)
    o = torch.stack([torch.cat(r, 1) if r else vf.new_zeros(H, 0, V) for r in o_rows])
    return o.transpose(1, 2).to(q.dtype), (torch.stack(finals) if output_final_state else None)
