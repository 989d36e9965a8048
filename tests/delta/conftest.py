# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Shared fixtures of the delta-rule tests: a problem factory and the first-order error bounds.

The bounds (``bounds`` fixture) are what the agreement tests allow; they are derived here, once.
Notation: u the unit roundoff of the arithmetic, γ_n = n u / (1 - n u), |x| elementwise, and
every magnitude evaluated on the float64 intermediates (first order: the O(u²) terms dropped).

Recurrent form, token t, per value column j (vectors over the K key dimensions):
    S' = d ⊙ S (d = exp(g_t), |δ| <= 3u|S'|: exp within 2u, one multiply), the dot
    p = S'^T k (γ_K Σ|S'||k|), e = v - p, w = β e, S = S' + k w^T. Collecting the first-order
    terms, with a = |k|^T |S'|:
        |δS_t| <= γ_{K+5} (|S'| + |S_t|) + (γ_{K+5} + ε_k) β |k| (|v| + 2a)
    where ε_k = γ_{K+3} bounds the relative error of each L2-normalised component (Σx² within
    γ_K, + eps, sqrt and division one rounding each; the sqrt halves the error under it) and is
    0 without ``l2norm_qk``; a perturbation θ of k changes the step by β|θ||k|(|e| + a).
    Per column, the 2-norm error E_t of S_t obeys E_t <= ρ_t E_{t-1} + ||δS_t||_2 with
    ρ_t = max(1, |1 - β_t ||k_t||²|) max_m d_tm >= ||A_t||_2, and
        |δo_t| <= s (||q_t|| E_t + (γ_{K+1} + ε_q) |q_t|^T |S_t|).

Chunked form, chunk of c tokens, cumulative gates G (|G| grows along the chunk; the computed
G_i carries an absolute error <= γ_c |G_i|, so each weight exp(G_i - G_j), exp(G_i), exp(G_c)
has relative error <= ε_w = 2 γ_{c+1} max|G| + 2u). With L_abs = β_i Σ_m |k_im||k_jm| w_ijm
(strict), T = L^{-1} and M = |T| (I + L_abs) |T| (>= |T|): the computed L has
|δL| <= η_L L_abs, η_L = γ_{K+2} + ε_w + 2ε_k; the computed inverse (forward substitution,
Higham Thm 8.5 for the rows of L T = I) |δT| <= γ_c |T||L||T| + |T||δL||T| <= (γ_c + η_L) M;
so with R1 = β |k| e^G and R2 = β |v| and η = 2γ_c + η_L + ε_w + ε_k + 2u
    |δVn| <= η M (R2 + R1 |S|) + γ_{K+1} (|U| + |W||S|)
    |δS_c| <= (2u + ε_w) e^{G_c} |S| + (γ_{c+1} + ε_w + ε_k) |K~|^T |Vn| + |K~|^T |δVn|
    |δO_i| <= s [(γ_{K+c+2} + ε_w + ε_q + ε_k)(|Q e^G||S| + P_abs |Vn|) + P_abs |δVn|
                 + ||q_i|| Π_{t<=i} ρ_t E]
with K~ = K ⊙ e^{G_c - G}, P_abs = Σ_m |q_im||k_jm| w_ijm (j <= i), and E, the incoming state
error, carried to the next chunk as Π ρ_t E + ||δS_c||_2 (exact chunk transition Φ = Π A_t).

An oracle is bounded by the recurrent formula with its own u: the dd operations are within 8u²
relative and dd_exp within 2^-100 = 64u², so u_dd = 64·2^-106 covers every step; mpmath at dps
digits has u = 10^(1-dps). Each result rounded once to float64 adds u|x|.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from linattn_verify.delta import DeltaProblem, validate_delta
from linattn_verify.delta.reference import (
    forward_substitution_inverse,
    pair_weights,
    sequence_inputs,
)

U64 = 2.0**-53
U_DD = 64 * 2.0**-106
U_MP50 = 10.0**-49


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


@dataclass(frozen=True)
class Bound:
    """Elementwise bounds on |computed - exact|: o ``[B, T, H, V]``, S_T ``[N, H, K, V]``."""

    o: torch.Tensor
    state: torch.Tensor


def _assemble(p: DeltaProblem, per_seq: Callable[[Any], tuple[torch.Tensor, torch.Tensor]]):
    outs, states = [], []
    for n, b, start, end in p.sequences():
        o, E = per_seq(sequence_inputs(p, n, b, start, end))
        outs.append(o.transpose(0, 1))  # [L, H, V]
        states.append(E)
    o = torch.cat(outs, 0).reshape(*p.q.shape[:3], p.v.shape[-1])
    return Bound(o=o, state=torch.stack(states, 0))


def recurrent_bound(problem: DeltaProblem, u: float = U64) -> Bound:
    p = problem.to(torch.float64)
    K = p.shape[3]
    eps_qk = gamma(K + 3, u) if p.l2norm_qk else 0.0
    gK5 = gamma(K + 5, u)

    def per_seq(seq):
        S = seq.S0
        H, L, _ = seq.q.shape
        E = torch.zeros(H, S.shape[-1], dtype=torch.float64)
        obound = []
        for t in range(L):
            if seq.g is None:
                d = torch.ones(H, K, 1, dtype=torch.float64)
            else:
                g = seq.g[:, t]
                d = torch.exp(g)[:, :, None] if g.ndim == 2 else torch.exp(g)[:, None, None]
                d = d.expand(H, K, 1)
            k, beta = seq.k[:, t, :, None], seq.beta[:, t, None, None]
            Sp = d * S
            S = Sp + k * (beta[:, :, 0] * (seq.v[:, t] - (Sp * k).sum(1)))[:, None, :]
            a = (k.abs() * Sp.abs()).sum(1, keepdim=True)
            comp = gK5 * (Sp.abs() + S.abs()) + (gK5 + eps_qk) * beta * k.abs() * (
                seq.v[:, t, None, :].abs() + 2 * a
            )
            rho = (1 - beta[:, 0, 0] * (k[:, :, 0] ** 2).sum(1)).abs().clamp(min=1)
            rho = rho * d[:, :, 0].max(1).values
            E = rho[:, None] * E + comp.norm(dim=1)
            q = seq.q[:, t]
            qS = (q.abs()[:, :, None] * S.abs()).sum(1)
            obound.append(p.scale * (q.norm(dim=1)[:, None] * E + (gamma(K + 1, u) + eps_qk) * qS))
        o = torch.stack(obound, 1) if obound else torch.zeros(H, 0, S.shape[-1])
        return o, E[:, None, :].expand(S.shape)

    return _assemble(p, per_seq)


def chunked_bound(problem: DeltaProblem, chunk_size: int, u: float = U64) -> Bound:
    p = problem.to(torch.float64)
    K = p.shape[3]
    eps = gamma(K + 3, u) if p.l2norm_qk else 0.0

    def per_seq(seq):
        S = seq.S0
        H, L, _ = seq.q.shape
        E = torch.zeros(H, S.shape[-1], dtype=torch.float64)
        obound = []
        for start in range(0, L, chunk_size):
            end = min(start + chunk_size, L)
            c = end - start
            q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
            beta = seq.beta[:, start:end]
            if seq.g is None:
                G = torch.zeros(H, c, K, dtype=torch.float64)
            elif seq.g.ndim == 2:
                G = seq.g[:, start:end].cumsum(-1)[..., None].expand(H, c, K)
            else:
                G = seq.g[:, start:end].cumsum(-2)
            eps_w = 2 * gamma(c + 1, u) * float(G.abs().max()) + 2 * u
            w_strict = pair_weights(G, strict=True, vector=True)  # [H, c, c, K]
            w_incl = pair_weights(G, strict=False, vector=True)
            kk = k[:, :, None, :] * k[:, None, :, :]
            Lmat = torch.eye(c, dtype=torch.float64) + beta[..., None] * (kk * w_strict).sum(-1)
            L_abs = beta[..., None] * (kk.abs() * w_strict).sum(-1)
            T = forward_substitution_inverse(Lmat)
            M = T.abs() @ (torch.eye(c, dtype=torch.float64) + L_abs) @ T.abs()
            eG, eGc = torch.exp(G), torch.exp(G[:, -1, :])  # [H, c, K], [H, K]
            W = T @ (beta[..., None] * k * eG)
            U = T @ (beta[..., None] * v)
            Vn = U - W @ S
            R1 = beta[..., None] * k.abs() * eG
            R2 = beta[..., None] * v.abs()
            eta_L = gamma(K + 2, u) + eps_w + 2 * eps
            eta = 2 * gamma(c, u) + eta_L + eps_w + eps + 2 * u
            dVn = eta * M @ (R2 + R1 @ S.abs()) + gamma(K + 1, u) * (U.abs() + W.abs() @ S.abs())
            Kt = (k * torch.exp(G[:, -1:, :] - G)).abs()  # [H, c, K]
            dS = (
                (2 * u + eps_w) * eGc[..., None] * S.abs()
                + (gamma(c + 1, u) + eps_w + eps) * Kt.transpose(-1, -2) @ Vn.abs()
                + Kt.transpose(-1, -2) @ dVn
            )
            P_abs = (q.abs()[:, :, None, :] * k.abs()[:, None, :, :] * w_incl).sum(-1)
            rho = (1 - beta * (k**2).sum(-1)).abs().clamp(min=1) * eG.new_ones(H, c)
            if seq.g is not None:
                g = seq.g[:, start:end]
                rho = rho * torch.exp(g if g.ndim == 2 else g.max(-1).values)
            prefix = rho.cumprod(-1)  # [H, c]
            magnitude = (q * eG).abs() @ S.abs() + P_abs @ Vn.abs()
            dO = p.scale * (
                (gamma(K + c + 2, u) + eps_w + 2 * eps) * magnitude
                + P_abs @ dVn
                + q.norm(dim=-1)[..., None] * prefix[..., None] * E[:, None, :]
            )
            obound.append(dO)
            S = eGc[..., None] * S + (k * torch.exp(G[:, -1:, :] - G)).transpose(-1, -2) @ Vn
            E = prefix[:, -1, None] * E + dS.norm(dim=1)
        o = torch.cat(obound, 1) if obound else torch.zeros(H, 0, S.shape[-1])
        return o, E[:, None, :].expand(S.shape)

    return _assemble(p, per_seq)


class Bounds:
    """The bound functions, handed to tests by the ``bounds`` fixture."""

    U64 = U64
    U_DD = U_DD
    U_MP50 = U_MP50
    recurrent = staticmethod(recurrent_bound)
    chunked = staticmethod(chunked_bound)

    @staticmethod
    def max_relative(a: torch.Tensor, b: torch.Tensor) -> float:
        """max |a - b| / max |b| (0 for empty tensors): the agreement figure reported."""
        if a.numel() == 0:
            return 0.0
        scale = float(b.abs().max())
        return float((a - b).abs().max()) / (scale or 1.0)

    @staticmethod
    def assert_within(actual, expected, allowed, what):
        __tracebackhide__ = True
        diff = (actual - expected).abs()
        bad = diff > allowed
        if bool(bad.any()):
            i = int((diff - allowed).argmax())
            idx = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), diff.shape))
            raise AssertionError(
                f"{what}: {int(bad.sum())} / {diff.numel()} elements outside the bound; worst at "
                f"{idx}: |diff|={float(diff.flatten()[i]):.3e} > allowed "
                f"{float(allowed.flatten()[i]):.3e} (value {float(expected.flatten()[i]):.3e})"
            )


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Run these tests on one intra-op thread, restoring the count after each test.

    Their tensors are tiny; with the cores shared, torch's spinning worker threads made them
    40x slower (a bound evaluation took 330 ms instead of 8 ms).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def bounds() -> type[Bounds]:
    return Bounds


GATES = ("none", "scalar", "vector")
BETAS = ("zero", "one", "random", "near2")


def make_problem(
    *,
    gate: str = "scalar",
    beta: str = "random",
    l2norm: bool = False,
    B: int = 2,
    T: int = 21,
    H: int = 2,
    K: int = 4,
    V: int = 3,
    h0: bool = True,
    final: bool = True,
    cu_seqlens: list[int] | None = None,
    seed: int = 0,
) -> DeltaProblem:
    """Build a random valid problem; keys have norms in [0.3, 1] unless ``l2norm``."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def uniform(*shape):
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    q, k, v = rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, V)
    if not l2norm:
        k = k / k.norm(dim=-1, keepdim=True) * (0.3 + 0.7 * uniform(B, T, H, 1))
    betas = {
        "zero": torch.zeros(B, T, H, dtype=torch.float64),
        "one": torch.ones(B, T, H, dtype=torch.float64),
        "random": uniform(B, T, H),
        "near2": 2 - 2.0**-20 * (1 + uniform(B, T, H)),
    }
    g = {
        "none": None,
        "scalar": -0.5 * uniform(B, T, H),
        "vector": -uniform(B, T, H, K),
    }[gate]
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    return validate_delta(
        q,
        k,
        v,
        betas[beta],
        g,
        l2norm_qk=l2norm,
        initial_state=rand(N, H, K, V) if h0 else None,
        output_final_state=final,
        cu_seqlens=None if cu_seqlens is None else torch.tensor(cu_seqlens),
        allow_negative_eigenvalues=beta == "near2",
    )


@pytest.fixture
def problem_factory() -> Callable[..., DeltaProblem]:
    return make_problem
