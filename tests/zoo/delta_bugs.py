# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule bug zoo: fp32 torch delta-rule kernels that each break one thing.

Every kernel here is one of three code paths of the fp32 references
(`linattn_verify.delta.reference_kernels`), copied with ``bug`` hooks:

* `recurrent_one`: the token recurrence (twin ``zoo-twin/delta-recurrent``);
* `chunk_one`: the WY / UT chunk form, C = 16 unless ``chunk_size=`` says otherwise (twin
  ``zoo-twin/delta-chunk``; like ``torch/delta.chunk`` it declares and accepts
  `REFERENCE_CHUNK_SIZES`, so the catalogue's ``chunk_size_invariant`` applies to it);
* `function_one`: the token recurrence whose write step is a `torch.autograd.Function` with a
  hand-written backward, as fused kernels have (twin ``zoo-twin/delta-function``).

With ``bug=None`` the first two compute exactly what ``torch/delta.recurrent`` and
``torch/delta.chunk`` compute (bit for bit: ``tests/delta/test_reference_kernels.py`` checks
it), so a broken kernel differs from its twin by its bug alone; it keeps the twin's capabilities
and recipe. The sequence slicing (`sequence_one`, with the in-kernel L2 norm and the initial
state's row) is shared by all three and carries the bugs of the conventions and of varlen.

`DELTA_ZOO` lists each broken kernel (``zoo/delta_<bug>``) with its bug class (the classes of
the delta-rule issue: precision, decay, WY system, beta, state, causality, gradients,
conventions) and what it does; `DELTA_TWINS` the correct twins; `DELTA_TWIN_OF` the twin of each
broken kernel by name. Load it by path (`linattn_verify.core.loading.import_file`), as `bugs.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from linattn_verify.core.loading import import_file
from linattn_verify.core.memory import contiguous_cotangent
from linattn_verify.delta.kernel import DeltaKernel
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import (
    DeltaSequence,
    forward_substitution_inverse,
)
from linattn_verify.delta.reference_kernels import (
    DEFAULT_CHUNK_SIZE,
    chunk_terms,
    delta_reference_kernels,
    float32_problem,
)
from linattn_verify.errors import InvalidArgument

RECURRENT_REFERENCE, CHUNK_REFERENCE = delta_reference_kernels()
_MEMORY = import_file(Path(__file__).with_name("memory_bugs.py"), "_linattn_zoo_memory_bugs")
C = DEFAULT_CHUNK_SIZE
SequenceResult = tuple[torch.Tensor, torch.Tensor]
OneSequence = Callable[..., SequenceResult]
"""``one(seq, scale, bug, **options)``: one fp32 sequence; `chunk_one` takes ``chunk_size=``."""


# The shared sequence slicing: the L2 norm and the initial state's row.


def l2norm_one(x: torch.Tensor, bug: str | None) -> torch.Tensor:
    """x / sqrt(Σ x² + eps); ``"l2norm_eps_outside_sqrt"``: x / (sqrt(Σ x²) + eps)."""
    if bug == "l2norm_eps_outside_sqrt":
        return x / (torch.sqrt((x * x).sum(-1, keepdim=True)) + L2NORM_EPS)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def sequence_one(
    p: DeltaProblem, n: int, b: int, start: int, end: int, bug: str | None
) -> DeltaSequence:
    """Slice sequence ``n`` (row ``b``, tokens ``start:end``) out of an fp32 problem.

    ``"initial_state_by_batch_row"`` reads S_0 at the batch row b instead of the sequence n:
    right without ``cu_seqlens`` (n == b), while packed every sequence starts from S_0[0].
    """
    q = p.q[b, start:end].transpose(0, 1)  # [H, L, K]
    k = p.k[b, start:end].transpose(0, 1)
    if p.l2norm_qk:
        q, k = l2norm_one(q, bug), l2norm_one(k, bug)
    v = p.v[b, start:end].transpose(0, 1)  # [H, L, V]
    beta = p.beta[b, start:end].transpose(0, 1)  # [H, L]
    g = None if p.g is None else p.g[b, start:end].transpose(0, 1)
    H, _, K = q.shape
    row = b if bug == "initial_state_by_batch_row" else n
    S0 = q.new_zeros(H, K, v.shape[-1]) if p.initial_state is None else p.initial_state[row]
    return DeltaSequence(q=q, k=k, v=v, beta=beta, g=g, S0=S0)


def _decay(decay: torch.Tensor | None, t: int) -> torch.Tensor | None:
    if decay is None:
        return None
    return decay[:, t, :, None] if decay.ndim == 3 else decay[:, t, None, None]


# The token recurrence.


def recurrent_one(seq: DeltaSequence, scale: float, bug: str | None) -> SequenceResult:
    """The token recurrence on one fp32 sequence, with an optional bug.

    Correct (``bug=None``) it is ``torch/delta.recurrent``. The bugs:

    * ``"state_bf16"``: S is rounded to bf16 after every token (an fp32 kernel whose state
      register / scratch buffer is bf16);
    * ``"undecayed_prediction"``: the prediction reads S_{t-1}, not S'_t = diag(e^g) S_{t-1};
    * ``"beta_value_only"``: u = beta v - S'^T k (beta scales the value, not the error);
    * ``"scale_on_k"``: the keys are scaled by s instead of the queries.
    """
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    k_all = scale * seq.k if bug == "scale_on_k" else seq.k
    sq = seq.q if bug == "scale_on_k" else scale * seq.q
    decay = None if seq.g is None else torch.exp(seq.g)  # [H, L] or [H, L, K]
    outputs = []
    for t in range(L):
        previous = S
        d = _decay(decay, t)
        if d is not None:
            S = d * S
        k_t = k_all[:, t, :, None]  # [H, K, 1]
        read = previous if bug == "undecayed_prediction" else S
        prediction = (read * k_t).sum(1)  # [H, V]
        if bug == "beta_value_only":
            u = seq.beta[:, t, None] * seq.v[:, t] - prediction
        else:
            u = seq.beta[:, t, None] * (seq.v[:, t] - prediction)  # [H, V]
        S = S + k_t * u[:, None, :]
        if bug == "state_bf16":
            S = S.to(torch.bfloat16).to(torch.float32)
        outputs.append((sq[:, t, :, None] * S).sum(1))  # [H, V]
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.stack(outputs, dim=0), S


# The recurrence with a hand-written backward of the write step.


class _DeltaWrite(torch.autograd.Function):
    """S = S' + k (beta (v - S'^T k))^T for every head, with a hand-written backward.

    S' ``[H, K, V]``, k ``[H, K]``, v ``[H, V]``, beta ``[H]``. With e = v - S'^T k, u = beta e
    and the cotangent dS: du = dS^T k, dk = dS u - S' de, dbeta = du·e, de = beta du, dv = de,
    dS' = dS - k de^T. ``drop_prediction`` forms dbeta = du·v: the bug.
    """

    @staticmethod
    def forward(
        ctx: Any,
        S: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        drop_prediction: bool,
    ) -> torch.Tensor:
        u = beta[:, None] * (v - (S * k[:, :, None]).sum(1))  # [H, V]
        ctx.save_for_backward(S, k, v, beta)
        ctx.drop_prediction = drop_prediction
        return S + k[:, :, None] * u[:, None, :]

    @staticmethod
    def backward(ctx: Any, dS: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        S, k, v, beta = ctx.saved_tensors
        e = v - (S * k[:, :, None]).sum(1)  # [H, V]
        u = beta[:, None] * e
        du = (dS * k[:, :, None]).sum(1)  # [H, V]
        # The bug: dbeta through the value only, dropping -du·(S'^T k).
        dbeta = (du * (v if ctx.drop_prediction else e)).sum(-1)  # [H]
        de = beta[:, None] * du
        dk = (dS * u[:, None, :]).sum(2) - (S * de[:, None, :]).sum(2)  # [H, K]
        dSp = dS - k[:, :, None] * de[:, None, :]
        return dSp, dk, de, dbeta, None


def function_one(seq: DeltaSequence, scale: float, bug: str | None) -> SequenceResult:
    """The token recurrence with the write step as `_DeltaWrite`, with an optional bug.

    The forward is ``torch/delta.recurrent``'s. The bug ``"dbeta_without_prediction"``: the
    backward forms dbeta_t = du_t·v_t instead of du_t·(v_t - S'^T k_t).
    """
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    sq = scale * seq.q
    decay = None if seq.g is None else torch.exp(seq.g)
    drop = bug == "dbeta_without_prediction"
    outputs = []
    for t in range(L):
        d = _decay(decay, t)
        if d is not None:
            S = d * S
        S = _DeltaWrite.apply(S, seq.k[:, t], seq.v[:, t], seq.beta[:, t], drop)
        outputs.append((sq[:, t, :, None] * S).sum(1))  # [H, V]
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.stack(outputs, dim=0), S


# The WY / UT chunk form.


def _factored_terms(
    q: torch.Tensor, k: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`chunk_terms` with every weight factored: exp(G_i) / exp(G_j), exp(G_c) / exp(G)."""
    c = q.shape[1]
    vector = g.ndim == 3
    G = g.cumsum(-2 if vector else -1)
    eG = torch.exp(G) if vector else torch.exp(G)[..., None]  # [H, c, K] or [H, c, 1]
    strict = torch.ones(c, c, dtype=q.dtype, device=q.device).tril(-1)[..., None]
    inclusive = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()[..., None]
    ratio = eG[:, :, None, :] / eG[:, None, :, :]  # [H, c, c, K or 1]
    Akk = (k[:, :, None, :] * k[:, None, :, :] * ratio * strict).sum(-1)
    Aqk = (q[:, :, None, :] * k[:, None, :, :] * ratio * inclusive).sum(-1)
    k_out = k * (eG[:, -1:] / eG)
    return Akk, Aqk, k * eG, q * eG, k_out, eG[:, -1][..., None]  # decay [H, 1 or K, 1]


def _unmasked_qk(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
    """Σ_m Q_im K_jm exp(G_im - G_jm) for every pair of the chunk: no causal mask."""
    if g is None:
        return q @ k.transpose(-1, -2)
    if g.ndim == 2:
        G = g.cumsum(-1)
        return (q @ k.transpose(-1, -2)) * torch.exp(G[..., :, None] - G[..., None, :])
    G = g.cumsum(-2)
    weight = torch.exp(G[:, :, None, :] - G[:, None, :, :])
    return (q[:, :, None, :] * k[:, None, :, :] * weight).sum(-1)


def chunk_one(
    seq: DeltaSequence, scale: float, bug: str | None, *, chunk_size: int = C
) -> SequenceResult:
    """The WY / UT chunk form (C = ``chunk_size``) on one fp32 sequence, with an optional bug.

    Correct (``bug=None``) it is ``torch/delta.chunk`` with the same ``chunk_size``. The bugs:

    * ``"inverse_fp16"``: T = L^-1 is stored in fp16 before W and U read it;
    * ``"factored_gate"``: every weight as exp(G_i) / exp(G_j) (0/0 = NaN once exp(G)
      underflows in fp32, G < -104; subnormal before that);
    * ``"w_undecayed"``: W = T diag(beta) K: the prediction from the state entering the chunk
      forgets the decay e^{G_i} accumulated inside the chunk;
    * ``"beta_wrong_side"``: L = I + strict_tril(Akk diag(beta)): beta_j of the column instead
      of beta_i of the row;
    * ``"inclusive_tril"``: L = I + tril(diag(beta) Akk) with the diagonal beta_i ||k_i||²
      (mask tril(0), not tril(-1)), solved by a general triangular solve that honours it;
    * ``"full_qk_mask"``: O reads the whole chunk's Vn (Q K^T unmasked, the weights of j > i
      included): later tokens leak into earlier outputs;
    * ``"final_state_before_tail"``: the final state is the one entering a partial last chunk
      (the tail's output is right, its state update is not returned);
    * ``"carried_state_undecayed"``: the state handed from one chunk to the next is not
      multiplied by the chunk's total decay e^{G_c} (the state leaving the last chunk is: right
      within one chunk, and without a gate).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidArgument(f"Got chunk_size={chunk_size!r}, but chunk_size must be an int >= 1.")
    H, L, _ = seq.q.shape
    S = seq.S0  # [H, K, V]
    returned: torch.Tensor | None = None
    outputs = []
    for start in range(0, L, chunk_size):
        end = min(start + chunk_size, L)
        c = end - start
        q, k, v = seq.q[:, start:end], seq.k[:, start:end], seq.v[:, start:end]
        beta = seq.beta[:, start:end, None]  # [H, c, 1]
        g = None if seq.g is None else seq.g[:, start:end]
        if bug == "factored_gate" and g is not None:
            Akk, Aqk, k_in, q_in, k_out, decay = _factored_terms(q, k, g)
        else:
            Akk, Aqk, k_in, q_in, k_out, decay = chunk_terms(q, k, g)
        if bug == "full_qk_mask":
            Aqk = _unmasked_qk(q, k, g)
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        if bug == "beta_wrong_side":
            T = forward_substitution_inverse(eye + Akk * beta.transpose(-1, -2))
        elif bug == "inclusive_tril":
            diagonal = torch.diag_embed((k * k).sum(-1))  # the weight exp(G_i - G_i) = 1
            T = torch.linalg.solve_triangular(eye + beta * (Akk + diagonal), eye, upper=False)
        else:
            T = forward_substitution_inverse(eye + beta * Akk)  # [H, c, c]
        if bug == "inverse_fp16":
            T = T.to(torch.float16).to(torch.float32)
        W = T @ (beta * (k if bug == "w_undecayed" else k_in))  # [H, c, K]
        U = T @ (beta * v)  # [H, c, V]
        Vn = U - W @ S  # [H, c, V]
        outputs.append(scale * (q_in @ S + Aqk @ Vn))  # [H, c, V]
        if bug == "final_state_before_tail" and c < chunk_size:
            returned = S
        # The bug's kernel keeps its own loop's state undecayed from the first boundary on.
        undecayed = bug == "carried_state_undecayed" and end < L
        kept = S if decay is None or undecayed else decay * S
        S = kept + k_out.transpose(-1, -2) @ Vn
    if not outputs:
        return seq.v.new_zeros(0, H, seq.v.shape[-1]), S
    return torch.cat(outputs, dim=1).transpose(0, 1), S if returned is None else returned


# Kernels in the calling convention.


def truncated_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Return ``x`` stored in ``dtype`` rounding toward zero (as the interpreter stores bf16).

    Where round-to-nearest moved away from zero, step one ulp back toward it. The step is added
    as a constant to ``x.to(dtype)``, so the backward is that of the correct store.
    """
    nearest = x.to(dtype)
    with torch.no_grad():
        away = nearest.to(x.dtype).abs() > x.abs()
        toward = torch.where(away, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)
    # toward - nearest is one ulp or 0: exact, and so is nearest + (toward - nearest).
    return nearest + (toward - nearest.detach())


def _convention(one: OneSequence, bug: str | None) -> Callable[..., Any]:
    """Wrap ``one(seq, scale, bug)`` in the family's calling convention (as the references).

    ``"output_truncated"`` stores o in a 16-bit input dtype rounding toward zero
    (`truncated_to`) instead of to nearest.

    Further keywords (``chunk_size=``) go to ``one``: `chunk_one` takes it, as
    ``torch/delta.chunk`` does; the recurrent paths, which declare no chunk sizes, raise
    `TypeError` for it, as the references would.
    """

    def kernel(
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
        **options: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        p, dtype = float32_problem(
            q,
            k,
            v,
            g,
            beta,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
        outputs, states = [], []
        for n, b, start, end in p.sequences():
            o, S = one(sequence_one(p, n, b, start, end, bug), p.scale, bug, **options)
            outputs.append(o)
            states.append(S)
        o = torch.cat(outputs, dim=0).reshape(*p.q.shape[:3], p.v.shape[-1])
        o = truncated_to(o, dtype) if bug == "output_truncated" else o.to(dtype)
        S = torch.stack(states, dim=0) if p.output_final_state else None
        # As the references: the backward gets its cotangents contiguous (layout-exact).
        return contiguous_cotangent(o), contiguous_cotangent(S)

    kernel.__name__ = f"delta_{bug or getattr(one, '__name__', 'chunk_one')}"
    kernel.__qualname__ = kernel.__name__
    return kernel


def _twin(name: str, one: OneSequence, reference: DeltaKernel) -> DeltaKernel:
    """The correct twin: ``one`` with no bug, ``reference``'s capabilities and recipe."""
    return replace(reference, name=f"zoo-twin/{name}", fn=_convention(one, None))


RECURRENT_TWIN = _twin("delta-recurrent", recurrent_one, RECURRENT_REFERENCE)
CHUNK_TWIN = _twin("delta-chunk", chunk_one, CHUNK_REFERENCE)
FUNCTION_TWIN = _twin("delta-function", function_one, RECURRENT_REFERENCE)
DELTA_TWINS: list[DeltaKernel] = [RECURRENT_TWIN, CHUNK_TWIN, FUNCTION_TWIN]
"""The correct twins, each once."""

_ONE: dict[str, OneSequence] = {
    RECURRENT_TWIN.name: recurrent_one,
    CHUNK_TWIN.name: chunk_one,
    FUNCTION_TWIN.name: function_one,
}

DELTA_TWIN_OF: dict[str, DeltaKernel] = {}
"""The correct twin of each broken kernel, by the broken kernel's name."""


def _broken(bug: str, twin: DeltaKernel) -> DeltaKernel:
    """``twin``'s code path with ``bug``, named ``zoo/delta_<bug>`` (same capabilities, recipe)."""
    kernel = replace(twin, name=f"zoo/delta_{bug}", fn=_convention(_ONE[twin.name], bug))
    DELTA_TWIN_OF[kernel.name] = twin
    return kernel


def _wrapping(name: str, fn: Callable[..., Any], twin: DeltaKernel) -> DeltaKernel:
    """A broken kernel that wraps ``twin``'s function (a bug in how it meets memory)."""
    kernel = replace(twin, name=f"zoo/delta_{name}", fn=fn)
    DELTA_TWIN_OF[kernel.name] = twin
    return kernel


CHUNK64_TWIN = replace(
    CHUNK_REFERENCE,
    name="zoo-twin/delta-chunk64",
    fn=_convention(functools.partial(chunk_one, chunk_size=64), None),
    recipe=replace(CHUNK_REFERENCE.recipe, chunk_size=64),  # type: ignore[type-var]
    capabilities=replace(CHUNK_REFERENCE.capabilities, chunk_sizes=()),
)
"""The chunk form with chunks of 64 (FLA's default) and no chunk_size= option: cases of the
zoo's small search (T <= 40) never cross a chunk boundary."""

DELTA_SIZE_ZOO: list[tuple[DeltaKernel, str, str]] = [
    (
        replace(
            CHUNK64_TWIN,
            name="zoo/delta_carried_state_undecayed",
            fn=_convention(functools.partial(chunk_one, chunk_size=64), "carried_state_undecayed"),
        ),
        "decay",
        "A chunk-64 kernel hands the state to the next chunk without the chunk's total decay "
        "e^{G_c}: right for T <= 64 (one chunk) and without a gate, wrong past the first chunk "
        "of a gated sequence. Only the size reach of `check` draws such T.",
    ),
]
"""Broken kernels wrong only past T = 64, with their twin `CHUNK64_TWIN`: caught by `check`'s
size reach (tests/cli/test_check_delta.py), never by the zoo's small in-process search."""

DELTA_ZOO: list[tuple[DeltaKernel, str, str]] = [
    (
        _broken("state_bf16", RECURRENT_TWIN),
        "precision",
        "An fp32 recurrent kernel keeps S in bf16 between tokens (a bf16 state buffer or "
        "register, fla #36): every token's state is rounded to 8 bits, an error of about 2^-9 "
        "relative per step that the fp32 recipe (no state rounding) does not allow.",
    ),
    (
        _broken("output_truncated", CHUNK_TWIN),
        "precision",
        "A 16-bit o is stored from its fp32 accumulator rounding toward zero instead of to "
        "nearest (the Triton interpreter's bf16 store; a hand-written cvt.rz): every output "
        "whose exact value lies between two 16-bit numbers and nearer the outer one is one ulp "
        "short. Within every tolerance bound (r < 2); fp32 inputs are unaffected.",
    ),
    (
        _broken("inverse_fp16", CHUNK_TWIN),
        "precision",
        "The chunk kernel stores the triangular inverse T = L^-1 in fp16 before W = T diag(beta)"
        " K and U = T diag(beta) V read it (a solve_tril output buffer in the input dtype of a "
        "half-precision build), while the recipe declares T in fp32: a relative error of 2^-11 "
        "in T, magnified by |T||L||T| for nearly parallel keys.",
    ),
    (
        _broken("undecayed_prediction", RECURRENT_TWIN),
        "decay",
        "The error term reads the undecayed state: u_t = beta_t (v_t - S_{t-1}^T k_t) while "
        "S_t = S'_t + k_t u_t^T, the other ordering of decay and correction (the one FLA issue "
        "#885 asked about). Identical without a gate; wrong for every gate < 0.",
    ),
    (
        _broken("factored_gate", CHUNK_TWIN),
        "decay",
        "The chunk kernel forms every weight exp(G_i - G_j) as exp(G_i) / exp(G_j) (and "
        "exp(G_c - G_j) likewise): exact for mild gates, but once the cumulative gate of a chunk "
        "passes -104 both factors underflow in fp32 and 0/0 = NaN (subnormal digits before).",
    ),
    (
        _broken("w_undecayed", CHUNK_TWIN),
        "decay",
        "W = T diag(beta) K instead of T diag(beta) (K ⊙ e^G): the prediction of token i from the "
        "state entering its chunk forgets the decay accumulated inside the chunk. Right without "
        "a gate or from a zero state, wrong for a gated chunk entered with S != 0.",
    ),
    (
        _broken("beta_wrong_side", CHUNK_TWIN),
        "wy system",
        "The triangular system is built as L = I + strict_tril(Akk diag(beta)), scaling column j "
        "by beta_j instead of row i by beta_i: right for a constant beta (every test with "
        "beta = 1 or a broadcast beta passes), wrong once beta varies along the chunk.",
    ),
    (
        _broken("inclusive_tril", CHUNK_TWIN),
        "wy system",
        "The system matrix is masked with tril() instead of tril(-1), so its diagonal is "
        "1 + beta_i ||k_i||^2, and a general lower-triangular solve honours it: every corrected "
        "value Vn is divided by 1 + beta ||k||^2 (roughly halved for unit keys and beta = 1).",
    ),
    (
        _broken("beta_value_only", RECURRENT_TWIN),
        "beta",
        "beta multiplies the value only: u_t = beta_t v_t - S'^T k_t instead of "
        "beta_t (v_t - S'^T k_t), so the old association along k_t is erased in full whatever "
        "beta_t is. Right for beta = 1 (the only value some tests use), wrong for any other beta.",
    ),
    (
        _broken("initial_state_by_batch_row", RECURRENT_TWIN),
        "state",
        "The initial state is read at the batch row b instead of the sequence index n: right "
        "without cu_seqlens (n == b), but with packed sequences (B == 1) every sequence after "
        "the first starts from sequence 0's S_0 (a varlen kernel's h0 pointer offset by i_b).",
    ),
    (
        _broken("final_state_before_tail", CHUNK_TWIN),
        "state",
        "The final state returned is the one entering a partial last chunk: its outputs are "
        "right, but the tail's update is never written back (a separate tail path that stores "
        "S_T before it). Right when T is a multiple of C or no final state is asked for.",
    ),
    (
        _broken("full_qk_mask", CHUNK_TWIN),
        "causality",
        "The chunk's output term reads the whole chunk's corrected values: O = s[(Q ⊙ e^G) S + "
        "(Q K^T ⊙ W) Vn] with the inclusive causal mask left off, so the tokens after i in its "
        "chunk leak into o_i (the last token of each chunk is right, the others are not).",
    ),
    (
        _broken("dbeta_without_prediction", FUNCTION_TWIN),
        "gradients",
        "A custom autograd.Function for the write step whose backward forms dbeta_t = "
        "du_t . v_t instead of du_t . (v_t - S'^T k_t): the contribution of beta through the "
        "prediction term is dropped. The forward and every other gradient are right.",
    ),
    (
        _broken("scale_on_k", RECURRENT_TWIN),
        "conventions",
        "The scale multiplies k instead of q. For plain linear attention the two are the same "
        "(o is bilinear in q and k), but here k also enters the prediction S'^T k and the write "
        "k u^T, so the state itself changes: wrong for every scale != 1.",
    ),
    (
        _broken("l2norm_eps_outside_sqrt", RECURRENT_TWIN),
        "conventions",
        "The in-kernel L2 norm is x / (||x|| + eps) instead of x / sqrt(||x||^2 + eps): equal "
        "to within 5e-7 relative for ||x|| ~ 1, but for small rows (||x||^2 ~ eps) the "
        "normalised norm is near 1 instead of near 1/sqrt(2).",
    ),
    (
        _wrapping(
            "last_dim_stride_ignored",
            _MEMORY.last_dim_stride_ignored(RECURRENT_TWIN.fn),
            RECURRENT_TWIN,
        ),
        "conventions",
        "The kernel walks the last dim of q, k, v, g and beta with ptr++, never reading its "
        "stride: right for contiguous, transposed and sliced inputs (last stride 1), wrong for a "
        "tensor whose last dim is strided (every other feature of a packed projection).",
    ),
    (
        _wrapping(
            "dense_cotangent_assumed",
            _MEMORY.dense_cotangent_assumed(RECURRENT_TWIN.fn),
            RECURRENT_TWIN,
        ),
        "gradients",
        "The backward reads do and dS_T as dense contiguous tensors: right for the dense "
        "cotangent tests hand it, wrong for o.sum().backward() (an expanded cotangent, every "
        "stride 0) and for a loss on a permuted output (a transposed one).",
    ),
]
"""Each broken kernel with its bug class and what it does (`DELTA_TWIN_OF` has its twin)."""


__all__ = ["CHUNK64_TWIN", "DELTA_SIZE_ZOO", "DELTA_TWINS", "DELTA_TWIN_OF", "DELTA_ZOO"]
