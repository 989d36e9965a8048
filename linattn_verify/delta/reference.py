# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Float64 reference forms of the delta rule: token-recurrent and chunked (WY / UT).

Both evaluate `linattn_verify.delta.problem` in float64 with plain torch operations, one
sequence at a time with every head at once, and are differentiable through autograd in every
input (q, k, v, beta, g, initial_state): they are the gradient reference.

The chunked form (derivation in ``linattn_verify/delta/README.md``), per chunk of c tokens with
chunk-local cumulative gates G_i = Σ_{s<=i} g_s (``[c]`` or ``[c, K]``, so every G_i <= 0) and
the state S entering the chunk:

    L   = I + strict_tril(B ⊙ Σ_m K_im K_jm exp(G_im - G_jm))     B_ij = beta_i
    T   = L^{-1}                                                   (forward substitution)
    W   = T diag(beta) (K ⊙ exp(G)),    U = T diag(beta) V
    Vn  = U - W S                                                  (the corrected values)
    O   = s [(Q ⊙ exp(G)) S + tril(Σ_m Q_im K_jm exp(G_im - G_jm)) Vn]
    S  <- exp(G_c) ⊙ S + (K ⊙ exp(G_c - G))^T Vn

The pair weights exp(G_i - G_j) are formed only for j <= i, from the difference of the
exponents (never exp(G_i) / exp(G_j)), so every exponent is <= 0; a vector gate keeps its
per-dimension weight inside the K-sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from linattn_verify.delta.problem import DeltaProblem, l2norm
from linattn_verify.delta.value_gate import fold, judged
from linattn_verify.errors import InvalidArgument

SequenceResult = tuple[torch.Tensor, torch.Tensor]
ResultT = TypeVar("ResultT")
"""o ``[L, H, V]`` and S_T ``[H, K, V]`` of one sequence."""


@dataclass(frozen=True)
class DeltaSequence:
    """One sequence's float64 inputs, heads first, with q and k normalised if asked.

    Attributes:
        q: Queries ``[H, L, K]``, L2-normalised when the problem says so, *not* scaled.
        k: Keys ``[H, L, K]``, L2-normalised when the problem says so.
        v: Values ``[H, L, V]``.
        beta: ``[H, L]``.
        g: ``[H, L]``, ``[H, L, K]`` or `None`.
        S0: The initial state ``[H, K, V]`` (zeros when the problem has none).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    beta: torch.Tensor
    g: torch.Tensor | None
    S0: torch.Tensor


def require_delta_problem(problem: object) -> None:
    """Raise `InvalidArgument` unless ``problem`` is a `DeltaProblem`."""
    if not isinstance(problem, DeltaProblem):
        raise InvalidArgument(
            "Expected problem to be a linattn_verify.delta.DeltaProblem but got "
            f"{type(problem).__name__}; build one with validate_delta(...)."
        )


def sequence_inputs(problem: DeltaProblem, n: int, b: int, start: int, end: int) -> DeltaSequence:
    """Slice sequence ``n`` (row ``b``, tokens ``start:end``) out of a float64 ``problem``."""
    q = problem.q[b, start:end].transpose(0, 1)  # [H, L, K]
    k = problem.k[b, start:end].transpose(0, 1)
    if problem.l2norm_qk:
        q, k = l2norm(q), l2norm(k)
    v = problem.v[b, start:end].transpose(0, 1)  # [H, L, V]
    beta = problem.beta[b, start:end].transpose(0, 1)  # [H, L]
    g = None if problem.g is None else problem.g[b, start:end].transpose(0, 1)
    H, _, K = q.shape
    V = v.shape[-1]
    S0 = q.new_zeros(H, K, V) if problem.initial_state is None else problem.initial_state[n]
    return DeltaSequence(q=q, k=k, v=v, beta=beta, g=g, S0=S0)


Span = tuple[int, int, int, int]
"""A sequence of a problem: ``(n, b, start, end)``, as `DeltaProblem.sequences` yields it."""


GROUP_ELEMENTS = {"cpu": 2**21, "cuda": 2**26}
"""The most float64 elements one stacked per-head intermediate of a group may hold, by device
type. On the CPU the chunk form's gradient bound is compute-bound and a group past about 16 MB
per intermediate runs slower (measured: 8 sequences of H = 2, C = K = 64 at once took 2.2x as
long as one at a time, 4 at once as long); the recurrent form's token loop is overhead-bound
and gains (2.4x for 8 sequences). On a GPU every step is a kernel launch, so larger groups
pay."""


def group_size(problem: DeltaProblem, per_head: int) -> int:
    """How many sequences `sequence_groups` stacks at most.

    ``per_head`` is the size of the largest intermediate per head: C² K for the chunk form,
    K V for the recurrent one.
    """
    budget = GROUP_ELEMENTS.get(problem.q.device.type, GROUP_ELEMENTS["cpu"])
    return max(1, budget // (problem.q.shape[2] * max(per_head, 1)))


def sequence_groups(
    problem: DeltaProblem, *, most: int | None = None
) -> list[tuple[list[Span], DeltaSequence]]:
    """The sequences of a float64 ``problem``, those of one length stacked head-wise.

    A group of G sequences of H heads is one `DeltaSequence` of G·H "heads" (sequence-major):
    every per-sequence computation of this family works head by head, so it runs on the group
    at once, with a Python loop over the group's tokens or chunks instead of each sequence's.
    A dense batch is one group; a varlen batch is one group per distinct length; a group is
    cut into groups of at most ``most`` sequences (`group_size`). Default: no limit.
    """
    by_length: dict[int, list[Span]] = {}
    for span in problem.sequences():
        by_length.setdefault(span[3] - span[2], []).append(span)
    groups = []
    cut = [
        same[i : i + (most or len(same))]
        for same in by_length.values()
        for i in range(0, len(same), most or len(same))
    ]
    for spans in cut:
        parts = [sequence_inputs(problem, *span) for span in spans]
        if len(parts) == 1:  # no copy: at T = 65,536 one is 200 MB
            groups.append((spans, parts[0]))
            continue
        stacked = DeltaSequence(
            q=torch.cat([x.q for x in parts]),
            k=torch.cat([x.k for x in parts]),
            v=torch.cat([x.v for x in parts]),
            beta=torch.cat([x.beta for x in parts]),
            g=None if parts[0].g is None else torch.cat([x.g for x in parts if x.g is not None]),
            S0=torch.cat([x.S0 for x in parts]),
        )
        groups.append((spans, stacked))
    return groups


def per_sequence(
    groups: list[tuple[list[Span], ResultT]], split: Callable[[ResultT, int], list[ResultT]]
) -> list[ResultT]:
    """Each group's result split into its sequences', in `DeltaProblem.sequences` order.

    ``split(result, how_many)`` cuts one group's result into ``how_many`` sequences' results.
    """
    by_state_row: dict[int, ResultT] = {}
    for spans, result in groups:
        for span, one in zip(spans, split(result, len(spans)), strict=True):
            by_state_row[span[0]] = one
    return [by_state_row[n] for n in sorted(by_state_row)]


def assemble(
    problem: DeltaProblem,
    one_sequence: Callable[[DeltaSequence], SequenceResult],
    *,
    most: int | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``one_sequence`` on every sequence of a float64 problem and assemble ``(o, S_T)``.

    Sequences of one length run together, ``most`` at a time (`sequence_groups`).
    """
    H = problem.q.shape[2]

    def split(result: SequenceResult, _: int) -> list[SequenceResult]:
        o, S = result  # o is [L, G·H, V] (tokens first), S_L [G·H, K, V]
        return list(zip(torch.split(o, H, dim=1), torch.split(S, H), strict=True))

    groups = [(spans, one_sequence(seq)) for spans, seq in sequence_groups(problem, most=most)]
    outputs, states = [], []
    for o, S in per_sequence(groups, split):
        outputs.append(o)
        states.append(S)
    # Sequences tile the (B, T) axes in order, so concatenating their rows restores [B, T, H, V].
    o = torch.cat(outputs, dim=0).reshape(*problem.q.shape[:3], problem.v.shape[-1])
    return o, (torch.stack(states, dim=0) if problem.output_final_state else None)


@judged
def delta_recurrent(problem: DeltaProblem) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the problem token by token in float64, exactly as the recurrence is written.

    Per sequence and token: S' = diag(exp(g_t)) S, u = beta_t (v_t - S'^T k_t),
    S = S' + k_t u^T, o_t = (s q_t)^T S (the scale multiplies q first, as FLA does).

    Args:
        problem: A validated `DeltaProblem` (converted to float64; autograd flows through).

    Returns:
        ``(o, final_state)``: o ``[B, T, H, V]`` float64; S_T ``[N, H, K, V]`` float64, or
        `None` unless ``problem.output_final_state``.

    Raises:
        InvalidArgument: if ``problem`` is not a `DeltaProblem`.
    """
    require_delta_problem(problem)
    p = problem.to(torch.float64)
    K, V = p.q.shape[-1], p.v.shape[-1]
    most = group_size(p, K * V)
    return assemble(p, lambda seq: recurrent_sequence(seq, p.scale), most=most)


def recurrent_sequence(seq: DeltaSequence, scale: float) -> SequenceResult:
    """Return o ``[L, H, V]`` and S_L of one sequence, token by token, in its own dtype."""
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    # Unbound once, not indexed per token: autograd turns every index into a zero tensor of the
    # whole input's size (O(L²) for the gradient oracle); an unbind's gradient is one stack.
    qs, ks, vs, betas = (
        (scale * seq.q).unbind(1),
        seq.k.unbind(1),
        seq.v.unbind(1),
        seq.beta.unbind(1),
    )
    decays = None if seq.g is None else torch.exp(seq.g).unbind(1)  # [H] or [H, K] each
    outputs = []
    for t in range(L):
        if decays is not None:
            d = decays[t][..., None] if decays[t].ndim == 2 else decays[t][:, None, None]
            S = d * S
        k_t = ks[t][..., None]  # [H, K, 1]
        u = betas[t][:, None] * (vs[t] - (S * k_t).sum(1))  # [H, V]
        S = S + k_t * u[:, None, :]
        outputs.append((qs[t][..., None] * S).sum(1))  # [H, V]
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.stack(outputs, dim=0), S


def intermediate_range(problem: DeltaProblem, window: int) -> tuple[float, float]:
    """The smallest nonzero and the largest magnitude any intermediate of the problem can take.

    Over every sequence and head, in float64: the inputs as the kernel uses them (q, k after any
    L2 norm, v, beta, S_0, the per-token decays e^{g_t} and every decay e^{G_i - G_j} over at
    most ``window`` tokens), the states S'_t and S_t, the corrections beta_t (v_t - S'_t^T k_t)
    and the outputs S_t^T q_t (unscaled). The products a kernel forms are of two or three of
    these, so a product's magnitude lies between the cube of the first and the cube of the
    second (linearity's exactness test, docs/design.md "Exact properties").

    Args:
        problem: The problem (any dtype: it is evaluated in float64).
        window: The longest span of a decay product a kernel forms in one step (its chunk size;
            1 for a token-recurrent kernel).

    Returns:
        ``(smallest, largest)``; ``(inf, 0)`` when every intermediate is 0.
    """
    p = fold(problem).to(torch.float64)  # a value gate's columns, each on its own
    smallest, largest = math.inf, 0.0

    def see(x: torch.Tensor) -> None:
        nonlocal smallest, largest
        a = x.abs()
        nonzero = a[a > 0]
        if nonzero.numel():
            smallest = min(smallest, float(nonzero.min()))
            largest = max(largest, float(nonzero.max()))

    for n, b, start, end in p.sequences():
        seq = sequence_inputs(p, n, b, start, end)
        for x in (seq.q, seq.k, seq.v, seq.beta, seq.S0):
            see(x)
        H, L, K = seq.k.shape
        decays = None
        if seq.g is not None:
            g = seq.g if seq.g.ndim == 3 else seq.g[..., None].expand(H, L, K)
            decays = torch.exp(g)
            G = torch.cat([g.new_zeros(H, 1, K), g.cumsum(1)], 1)
            for span in range(1, min(window, L) + 1):
                see(torch.exp(G[:, span:] - G[:, :-span]))
        S = seq.S0
        for t in range(L):
            Sp = S if decays is None else decays[:, t, :, None] * S
            k = seq.k[:, t, :, None]
            correction = seq.beta[:, t, None, None] * (
                seq.v[:, t, None, :] - (k * Sp).sum(1, keepdim=True)
            )
            S = Sp + k * correction
            for x in (Sp, correction, S, (seq.q[:, t, :, None] * S).sum(1)):
                see(x)
    return smallest, largest


@judged
def delta_chunked(
    problem: DeltaProblem, chunk_size: int = 16
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Evaluate the problem in the chunked WY / UT form in float64 (module docstring).

    The last chunk of a sequence is shorter when its length is not a multiple of
    ``chunk_size``; nothing is padded.

    Args:
        problem: A validated `DeltaProblem` (converted to float64; autograd flows through).
        chunk_size: Tokens per chunk, an int >= 1. Default: `16`.

    Returns:
        ``(o, final_state)`` as `delta_recurrent` returns them.

    Raises:
        InvalidArgument: if ``problem`` is not a `DeltaProblem` or ``chunk_size`` is not an
            int >= 1.
    """
    require_delta_problem(problem)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidArgument(f"Got chunk_size={chunk_size!r}, but chunk_size must be an int >= 1.")
    p = problem.to(torch.float64)
    most = group_size(p, chunk_size**2 * p.q.shape[-1])
    return assemble(p, lambda seq: _chunked(seq, p.scale, chunk_size), most=most)


def forward_substitution_inverse(L: torch.Tensor) -> torch.Tensor:
    """Return T = L^{-1} for unit lower-triangular L ``[..., c, c]``, row by row.

    T_i = e_i - Σ_{j<i} L_ij T_j (row i of L T = I solved for T_i). Built out of place so
    autograd can differentiate it.
    """
    c = L.shape[-1]
    eye = torch.eye(c, dtype=L.dtype, device=L.device).expand(L.shape)
    rows: list[torch.Tensor] = []
    for i in range(c):
        row = eye[..., i, :]
        if i:
            previous = torch.stack(rows, dim=-2)  # [..., i, c]
            row = row - (L[..., i, :i, None] * previous).sum(-2)
        rows.append(row)
    return torch.stack(rows, dim=-2)


def pair_weights(G: torch.Tensor, *, strict: bool, vector: bool) -> torch.Tensor:
    """Return exp(G_i - G_j) for j < i (``strict``) or j <= i, else 0: ``[..., c, c(, K)]``.

    G is the chunk-local cumulative gate, ``[..., c]`` or with ``vector`` ``[..., c, K]``.
    Masked pairs get the exponent 0 before the exp, so no exponent is ever positive.
    """
    if vector:
        diff = G[..., :, None, :] - G[..., None, :, :]  # [..., c, c, K]
        c = G.shape[-2]
    else:
        diff = G[..., :, None] - G[..., None, :]  # [..., c, c]
        c = G.shape[-1]
    mask = torch.ones(c, c, dtype=torch.bool, device=G.device).tril(-1 if strict else 0)
    if vector:
        mask = mask[..., None]
    return torch.where(mask, torch.exp(torch.where(mask, diff, 0.0)), 0.0)


def pair_scores(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Σ_m a_im b_jm w_ijm ``[..., c, c]`` for the weights of `pair_weights`.

    w is ``[..., c, c, K]``, or ``[..., c, c, 1]`` under one decay for every key dimension (no
    gate, or a scalar gate): then the sum is a matrix product.
    """
    if w.shape[-1] == 1:
        return (a @ b.transpose(-1, -2)) * w[..., 0]
    return torch.einsum("...im,...jm,...ijm->...ij", a, b, w)


def _chunked(seq: DeltaSequence, scale: float, C: int) -> SequenceResult:
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    outputs = []
    for start in range(0, L, C):
        end = min(start + C, L)
        c = end - start
        q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
        beta = seq.beta[:, start:end]  # [H, c]
        state_decay: torch.Tensor | None
        if seq.g is None:
            kk = k @ k.transpose(-1, -2)  # [H, c, c]
            qk = q @ k.transpose(-1, -2)
            ones = torch.ones(c, c, dtype=kk.dtype, device=kk.device)
            Akk, Aqk = kk * ones.tril(-1), qk * ones.tril()
            k_in, q_in, k_out = k, q, k
            state_decay = None
        elif seq.g.ndim == 2:
            G = seq.g[:, start:end].cumsum(-1)  # [H, c]
            Akk = (k @ k.transpose(-1, -2)) * pair_weights(G, strict=True, vector=False)
            Aqk = (q @ k.transpose(-1, -2)) * pair_weights(G, strict=False, vector=False)
            k_in, q_in = k * torch.exp(G)[..., None], q * torch.exp(G)[..., None]
            k_out = k * torch.exp(G[:, -1:] - G)[..., None]
            state_decay = torch.exp(G[:, -1])[:, None, None]  # [H, 1, 1]
        else:
            # A vector gate: the weight of dimension m stays inside the K-sum.
            G = seq.g[:, start:end].cumsum(-2)  # [H, c, K]
            kk_m = k[:, :, None, :] * k[:, None, :, :]  # [H, c, c, K]
            qk_m = q[:, :, None, :] * k[:, None, :, :]
            Akk = (kk_m * pair_weights(G, strict=True, vector=True)).sum(-1)
            Aqk = (qk_m * pair_weights(G, strict=False, vector=True)).sum(-1)
            k_in, q_in = k * torch.exp(G), q * torch.exp(G)
            k_out = k * torch.exp(G[:, -1:, :] - G)
            state_decay = torch.exp(G[:, -1, :])[:, :, None]  # [H, K, 1]
        eye = torch.eye(c, dtype=k.dtype, device=k.device)
        Lmat = eye + beta[..., None] * Akk  # unit lower triangular [H, c, c]
        T = forward_substitution_inverse(Lmat)
        W = T @ (beta[..., None] * k_in)  # [H, c, K]
        U = T @ (beta[..., None] * v)  # [H, c, V]
        Vn = U - W @ S  # [H, c, V]
        outputs.append(scale * (q_in @ S + Aqk @ Vn))  # [H, c, V]
        decayed = S if state_decay is None else state_decay * S
        S = decayed + k_out.transpose(-1, -2) @ Vn
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.cat(outputs, dim=1).transpose(0, 1), S


__all__ = [
    "DeltaSequence",
    "assemble",
    "delta_chunked",
    "delta_recurrent",
    "forward_substitution_inverse",
    "intermediate_range",
    "pair_scores",
    "pair_weights",
    "recurrent_sequence",
    "require_delta_problem",
    "sequence_inputs",
]
