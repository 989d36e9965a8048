"""Gated DeltaNet / KDA token recurrence with a hand-derived backward (torch.autograd.Function).

What is different: the backward is written out, not taken from autograd, and it recomputes the
states from *checkpoints*: the forward keeps the state only every 64 tokens, the backward replays
each 64-token segment forward (storing its states) and then walks it in reverse with the adjoint
Lam = dLoss/dS_t:

    Lam += s q_t do_t^T;  dq_t = s S_t do_t;  du = Lam^T k_t
    dv_t = beta_t du;  dbeta_t = e_t . du;  dk_t = Lam u_t - beta_t S'_t du
    Lam' = Lam - beta_t k_t du^T;  dg_t = rowsum(S'_t * Lam')  (summed over K for a scalar gate)
    Lam  = diag(e^{g_t}) Lam'

and the L2 norm's chain rule dx = (dy - y (y . dy)) / sqrt(sum x^2 + eps) by hand. Everything in
fp32, gradients rounded once to each input's dtype. Gates none / scalar / vector. The signature
has no ``cu_seqlens`` (one sequence per batch row).
"""

from __future__ import annotations

import torch

SEGMENT = 64


def _norm(x):
    r = torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    return x / r, r


def _step(S, a, k, v, beta):
    """One token: returns S', e, u, S_new. Shapes [B, H, K, V], [B, H, K] or None, ..."""
    Sp = S if a is None else a[..., None] * S
    e = v - torch.einsum("bhk,bhkv->bhv", k, Sp)
    u = beta[..., None] * e
    return Sp, e, u, Sp + k[..., None] * u[..., None, :]


class _GatedDelta(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, S0, scale, l2):
        B, T, H, K = q.shape
        V = v.shape[-1]
        qf, kf, vf, bf = q.float(), k.float(), v.float(), beta.float()
        rq = rk = None
        if l2:
            qf, rq = _norm(qf)
            kf, rk = _norm(kf)
        a = None
        if g is not None:
            gf = g.float()
            a = torch.exp(gf if gf.dim() == 4 else gf[..., None].expand(B, T, H, K))
        S = qf.new_zeros(B, H, K, V) if S0 is None else S0.float().clone()
        checkpoints = []
        o = qf.new_zeros(B, T, H, V)
        for t in range(T):
            if t % SEGMENT == 0:
                checkpoints.append(S)
            _, _, _, S = _step(S, None if a is None else a[:, t], kf[:, t], vf[:, t], bf[:, t])
            o[:, t] = scale * torch.einsum("bhk,bhkv->bhv", qf[:, t], S)
        ctx.save_for_backward(q, k, v, g, beta, S0, qf, kf, vf, bf, a, rq, rk, *checkpoints)
        ctx.scale, ctx.l2, ctx.n_ckpt = scale, l2, len(checkpoints)
        return o.to(q.dtype), S

    @staticmethod
    def backward(ctx, do, dST):
        q, k, v, g, beta, S0, qf, kf, vf, bf, a, rq, rk, *ckpts = ctx.saved_tensors
        scale = ctx.scale
        B, T, H, K = q.shape
        V = v.shape[-1]
        do = qf.new_zeros(B, T, H, V) if do is None else do.float()
        Lam = qf.new_zeros(B, H, K, V) if dST is None else dST.float().clone()
        dqn = qf.new_zeros(B, T, H, K)
        dkn = qf.new_zeros(B, T, H, K)
        dv = qf.new_zeros(B, T, H, V)
        db = qf.new_zeros(B, T, H)
        da = None if a is None else qf.new_zeros(B, T, H, K)
        for seg in reversed(range(len(ckpts))):
            lo, hi = seg * SEGMENT, min(T, (seg + 1) * SEGMENT)
            states = [ckpts[seg]]
            for t in range(lo, hi - 1):
                states.append(
                    _step(states[-1], None if a is None else a[:, t], kf[:, t], vf[:, t], bf[:, t])[
                        3
                    ]
                )
            for t in reversed(range(lo, hi)):
                at = None if a is None else a[:, t]
                kt, bt = kf[:, t], bf[:, t]
                Sp, e, u, S = _step(states[t - lo], at, kt, vf[:, t], bt)
                Lam = Lam + scale * qf[:, t, ..., None] * do[:, t, :, None, :]
                dqn[:, t] = scale * torch.einsum("bhkv,bhv->bhk", S, do[:, t])
                du = torch.einsum("bhkv,bhk->bhv", Lam, kt)
                dv[:, t] = bt[..., None] * du
                db[:, t] = (e * du).sum(-1)
                bdu = bt[..., None] * du
                dkn[:, t] = torch.einsum("bhkv,bhv->bhk", Lam, u) - torch.einsum(
                    "bhkv,bhv->bhk", Sp, bdu
                )
                Lam = Lam - kt[..., None] * bdu[..., None, :]
                if at is not None:
                    da[:, t] = (Sp * Lam).sum(-1)  # = a * d(S')/da ... i.e. dg_t
                    Lam = at[..., None] * Lam
        if ctx.l2:
            qn, kn = qf, kf
            dq = (dqn - qn * (qn * dqn).sum(-1, keepdim=True)) / rq
            dk = (dkn - kn * (kn * dkn).sum(-1, keepdim=True)) / rk
        else:
            dq, dk = dqn, dkn
        dg = None
        if g is not None and ctx.needs_input_grad[3]:
            dg = da if g.dim() == 4 else da.sum(-1)
            dg = dg.to(g.dtype)
        dS0 = None if S0 is None else Lam.to(S0.dtype)
        return (
            dq.to(q.dtype),
            dk.to(k.dtype),
            dv.to(v.dtype),
            dg,
            db.to(beta.dtype),
            dS0,
            None,
            None,
        )


def fused_recurrent_gated_delta_rule(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
):
    if scale is None:
        scale = q.shape[-1] ** -0.5
    o, S = _GatedDelta.apply(
        q, k, v, g, beta, initial_state, float(scale), bool(use_qk_l2norm_in_kernel)
    )
    return o, (S if output_final_state else None)
