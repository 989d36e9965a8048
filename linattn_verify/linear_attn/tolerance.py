# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Condition-aware error bounds for linear attention (docs/error-model.md §2-§5).

Every output element is a sum of product terms τ. A kernel computes Σ τ(1 + θ_τ) with
|θ_τ| <= U_τ, where U_τ counts the roundings on τ's path (times the unit roundoff) plus the
relative errors of its factors (decay weight, casts, tf32 operands). Hence (Higham §3.1, §3.4)

    |x̂ - x| <= Σ_τ U_τ |τ| + (errors of φ, carried as absolute errors of the features)  =: B(x)

For the numerator of row t the terms are τ_tjmi = s φ(q_tm) φ(k_jm) w_tj v_ji (j <= t), plus the
initial-state terms s φ(q_tm) w_t0 S0_mi, which we index as a virtual key j = 0. U_τ depends only
on (t, j), so with the T x (T+1) matrix U and the weights W the bound is a pair of float64 GEMMs:

    B^N = |s| ((U ⊙ W ⊙ |Q̃||K̃|^T + W ⊙ E^φ) |V| + (U_0 ⊙ w_0) ⊙ |Q̃||S_0| + w_0 ⊙ Δφ(Q)|S_0|)

with E^φ = Δφ(Q)|K̃|^T + |Q̃|Δφ(K)^T and Δφ the absolute error of a feature. The magnitude M is the
same expression with U replaced by 1 and no E^φ.

**Rounding counts** c(t, j) in units of u_acc, per form (docs/error-model.md §2.4; dec = 1 with
decay):

    parallel   K + (t + 1) + dec                 (a K-dot, then a row of t + 1 terms)
    chunk      K + C + (1+dec)(n(t) - n(j)) + 1 + 2 dec   (n = chunk index, n(0) = -1)
    recurrent  K + 2 + (1+dec)(t - j)
    unknown    the sum of the three form-specific parts (an upper bound of each)

plus 2 for the scale (its rounding to fp32 and the multiply). The denominator adds 1 for eps.
Final-state terms φ(k_jm) v_ji w_Tj carry no K-dot and no scale.

**Decay weights** (docs/error-model.md §4). With ε_exp(x) = (4 + 2.4|x|) u (``ex2.approx``) and
D = G_t - G_j:

    per_step     (t - j) 4u + 2.4u|D|                      (a product of exp(g_s))
    chunk_local  pieces of (j, t] cut at block boundaries (block = C): each piece an exp of a
    / global     difference of block-local cumsums, so n_p (4u + u) + 3.4u|D| + L_b u Σ|local G|
                 where the cumsum error of a same-sign sum of at most L_b terms is L_b u |G_loc|
                 (block = the whole sequence for ``global``).

**Normalized output** (§2.3): o = N / Z. Forward bound (valid where B^Z < |Z|/2; other elements
are *unverifiable* and judged by the residual alone):

    B^o = (B^N + |o| B^Z) / (|Z| - B^Z) + (u_div + u_out)|o|
    η   = |N - ô Z| / (B^N + |ô| B^Z + (u_div + u_out)|ô||Z|)

Rows whose every term is exactly zero (M^Z = 0, the 0/0 row of
`linattn_verify.linear_attn.semantics`) have an exact result 0 and bound 0.

**Gradients** (§5). With δ_t = do_t·o_t, ζ_t = 1/|Z_t| (1 unnormalized) and
dP_tj = (do_t·v_j - δ_t) ζ_t, the magnitude of dP is R_tj = (|do_t|·|v_j| + |do_t|·|o_t|) ζ_t and

    dq̃_t = s Σ_j w_tj dP_tj k̃_j     dk̃_j = s Σ_t w_tj dP_tj q̃_t + w_Tj (dS_T v_j + dz_T)
    dv_j = s Σ_t w_tj A_tj ζ_t do_t + w_Tj dS_T^T k̃_j
    dG_t = q̃_t·dq̃_t - k̃_t·dk̃_t (+ ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ at t = T),  dg_s = Σ_{t>=s} dG_t

Each gradient term's relative error is u_acc (c_fwd + c_rev + V + 8) + ε_w + casts + tf32 +
e_Z(t), where c_rev counts the reverse accumulation (over t for fixed j; T - j + 1 + dec for the
parallel form) and e_Z = B^Z/|Z| the relative error of the kernel's denominator; the error of the
kernel's own ô used in δ_t contributes |do_t|·B^o_t ζ_t absolutely. The dg magnitude is the larger
row-sum-plus-column-sum one (the q·dq - k·dk algorithm), and its reverse cumsum adds (T - s + 1)
roundings. Gradient elements that depend on an unverifiable denominator are unverifiable.

**Undefined elements** (docs/error-model.md §3). Where the exact denominator Z_t is exactly 0 the
exact o_t is undefined, and so is every gradient element that depends on row t (`depends_on_rows`:
dq_t; dk_j, dv_j, dg_j for j <= t; dS_0, dz_0 of the sequence; per head). Each `TensorBound`
marks them (``undefined``) and carries the kernel's declared convention for them
(``zero_denominator``); the bounds themselves are those of the ``"zero"`` convention (o_t = 0,
its rows contributing nothing to the gradients) whatever the declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import torch

from linattn_verify.core.bound import Residual, TensorBound, ZeroDenominator
from linattn_verify.core.judging import bound_on, judging_device
from linattn_verify.core.placement import moved_to
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn._bounds.dependence import depends_on_rows
from linattn_verify.linear_attn._bounds.forward import ForwardPieces, forward_sequence
from linattn_verify.linear_attn._bounds.gradients import Cotangents, backward_sequence
from linattn_verify.linear_attn._bounds.terms import (
    DENSE_TOKENS,
    DENSE_VECTOR_TOKENS,
    SequenceTerms,
)
from linattn_verify.linear_attn._bounds.units import Units
from linattn_verify.linear_attn._bounds.vector_gradients import vector_backward_sequence
from linattn_verify.linear_attn.recipe import PrecisionRecipe, dtype_name
from linattn_verify.linear_attn.semantics import Problem

ORACLE_CHUNK = 64
"""Chunk size of the float64 chunked oracle the gradients use beyond `DENSE_TOKENS` tokens."""


@dataclass(frozen=True)
class ForwardBounds:
    """Bounds for the forward outputs; ``o``/``final_state``/``final_key_sum`` are the B tensors."""

    o: torch.Tensor
    final_state: torch.Tensor | None
    final_key_sum: torch.Tensor | None
    tensors: dict[str, TensorBound] = field(default_factory=dict)
    # The per-sequence terms `backward_bounds` builds on (so it need not recompute them).
    pieces: list[ForwardPieces] = field(default_factory=list, repr=False)


def _empty_like_rows(p: Problem, last: int) -> torch.Tensor:
    B, T, H = p.q.shape[:3]
    return torch.zeros(B, T, H, last, dtype=torch.float64, device=p.q.device)


def _assemble(p: Problem, pieces: list[torch.Tensor], last: int) -> torch.Tensor:
    """Stack per-sequence [H, L, X] pieces back into [B, T, H, X]."""
    if not pieces:
        return _empty_like_rows(p, last)
    rows = torch.cat([x.transpose(0, 1) for x in pieces], dim=0)
    return rows.reshape(*p.q.shape[:3], last)


def _prepare(problem: Problem, recipe: PrecisionRecipe) -> tuple[Problem, Units]:
    if not isinstance(problem, Problem):
        raise InvalidArgument(
            f"Expected problem to be a linattn_verify.linear_attn.semantics.Problem but got "
            f"{type(problem).__name__}; build one with validate_problem(...)."
        )
    if not isinstance(recipe, PrecisionRecipe):
        raise InvalidArgument(
            f"Expected recipe to be a PrecisionRecipe but got {type(recipe).__name__}."
        )
    judge = judging_device(problem.q.device)
    p = as_kernel_sees(problem, recipe).to(torch.float64, judge)
    return p, Units.of(recipe, problem.q.dtype)


def as_kernel_sees(problem: Problem, recipe: PrecisionRecipe) -> Problem:
    """Return ``problem`` with eps as the kernel adds it: rounded to the recipe's ``eps_dtype``.

    The one place eps is rounded: the bounds (and so every comparison) judge this problem.
    """
    return replace(problem, eps=recipe.effective_eps(problem.eps))


def forward_bounds(
    problem: Problem,
    recipe: PrecisionRecipe,
    *,
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
    scan_block: int | None = None,
) -> ForwardBounds:
    """Compute the exact forward result and its error bounds for a kernel following ``recipe``.

    A vector gate (g ``[B, T, H, K]``) is covered (docs/error-model.md §2.7). Time and memory
    are O(T) per sequence past `DENSE_TOKENS` tokens (`DENSE_VECTOR_TOKENS` under a vector gate),
    O(T²) (O(T²K)) up to there: docs/error-model.md §6.5.

    Args:
        problem: The problem exactly as the kernel received it (any dtype: it is converted
            exactly to float64; its dtype sets the output rounding and the cast unit).
        recipe: The kernel's precision recipe.
        zero_denominator: The kernel's declared value where the exact denominator is 0, carried
            by every `TensorBound` (the bounds do not depend on it). Default: `"zero"`.
        causal_exact: The kernel promises bit-exact causality. Otherwise (`False`) the rounding
            of every token of a block its form touches reaches each output: decay weights may
            come from a reference point anywhere in the block (docs/error-model.md §4.1).
            Default: `True`.
        scan_block: Tokens per block of the O(T) evaluation of the pair sums
            (`linattn_verify.linear_attn._bounds.pairwise`; rounded up to a multiple of the
            recipe's chunk size), or `None`: dense [L, L+1] pair matrices up to
            `DENSE_TOKENS` tokens per sequence (`DENSE_VECTOR_TOKENS` under a vector gate), the
            scan with `SCAN_TOKENS` beyond. The
            gradient bounds built on the result evaluate the same way. Default: `None`.

    Returns:
        `ForwardBounds`: the absolute bound tensors (``o`` ``[B, T, H, V]``, ``final_state``
        ``[N, H, K, V]``, ``final_key_sum`` ``[N, H, K]``), and in ``tensors`` the full
        `TensorBound` of each (reference values, magnitudes, counts, residual pieces).
    """
    p, units = _prepare(problem, recipe)
    per_seq: list[dict[str, torch.Tensor]] = []
    pieces: list[ForwardPieces] = []
    for n, b, start, end in p.sequences():
        seq = SequenceTerms(
            p, recipe, units, n, b, start, end, causal_exact=causal_exact, scan_block=scan_block
        )
        values, piece = forward_sequence(seq, p)
        per_seq.append(values)
        pieces.append(piece)
    V = p.v.shape[-1]

    def rows(key: str, last: int) -> torch.Tensor:
        return _assemble(p, [d[key] for d in per_seq], last)

    def states(key: str) -> torch.Tensor:
        return torch.stack([d[key] for d in per_seq], dim=0)

    o_ref, B_o = rows("o", V), rows("B_o", V)
    verifiable = torch.isfinite(B_o)
    count_o = rows("count_o", 1)
    tensors: dict[str, TensorBound] = {}
    residual = None
    eps_influence = None
    undefined = None
    if p.normalize:
        residual = Residual(
            numerator=rows("N", V),
            denominator=rows("Z", 1),
            numerator_bound=rows("B_N", V),
            denominator_bound=rows("B_Z", 1),
            rounding=units.div + units.out,
            absolute=units.out_abs,
            numerator_magnitude=rows("M_N", V),
            denominator_magnitude=rows("M_Z", 1),
        )
        eps_influence = rows("eps_influence", 1)[..., 0]
        undefined = (residual.denominator == 0).expand_as(o_ref)
    tensors["o"] = TensorBound(
        name="o",
        reference=o_ref,
        bound=B_o,
        magnitude=rows("M_o", V),
        count=count_o.expand_as(o_ref),
        unit=units.acc,
        verifiable=verifiable,
        eps_influence=eps_influence,
        residual=residual,
        undefined=undefined,
        zero_denominator=zero_denominator,
    )
    final_state = final_key_sum = None
    if p.output_final_state:
        count_S = states("count_S").max()
        S_ref, B_S, M_S = states("S_T"), states("B_S"), states("M_S")
        tensors["final_state"] = TensorBound(
            name="final_state",
            reference=S_ref,
            bound=B_S,
            magnitude=M_S,
            count=count_S.expand_as(S_ref),
            unit=units.acc,
            verifiable=torch.isfinite(B_S),
            zero_denominator=zero_denominator,
        )
        final_state = B_S
        if p.normalize:
            z_ref, B_z, M_z = states("z_T"), states("B_z"), states("M_z")
            tensors["final_key_sum"] = TensorBound(
                name="final_key_sum",
                reference=z_ref,
                bound=B_z,
                magnitude=M_z,
                count=count_S.expand_as(z_ref),
                unit=units.acc,
                verifiable=torch.isfinite(B_z),
                zero_denominator=zero_denominator,
            )
            final_key_sum = B_z
    home = problem.q.device

    def back(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(home)

    # The pieces stay on the judging device, where `backward_bounds` builds on them.
    return ForwardBounds(
        o=B_o.to(home),
        final_state=back(final_state),
        final_key_sum=back(final_key_sum),
        tensors={name: bound_on(b, home) for name, b in tensors.items()},
        pieces=pieces,
    )


def _charge_packed_scan(p: Problem, per_seq: list[dict[str, torch.Tensor]], u_acc: float) -> None:
    """Dg of a kernel whose global scan may run over the whole packed row (in place).

    Its cumulative sums of a sequence start from the earlier sequences' total, so each later
    sequence's dG terms cancel through the earlier sequences' gates in rounding only: dg of a
    token also holds the rounding of every later sequence's dG (docs/error-model.md §4.1).
    """
    if p.g is None or p.cu_seqlens is None or not per_seq:
        return
    row_length = p.q.shape[1]
    later = torch.zeros_like(per_seq[-1]["M_g"][:, 0])  # [H] or [H, K]
    for values in reversed(per_seq):
        M_g = values["M_g"]
        if M_g.shape[1]:
            values["M_g"] = M_g + later[:, None]
            values["B_g"] = values["B_g"] + u_acc * row_length * later[:, None]
            later = later + M_g[:, 0]


def charge_returned_state(
    bounds: Mapping[str, TensorBound], final_state_dtype: str, dtype: torch.dtype
) -> dict[str, TensorBound]:
    """``bounds`` with the rounding of a state returned in the input dtype charged.

    A kernel that returns its state in the input dtype (``final_state_dtype="input"``: FLA's
    normalized ``linear_attn`` returns z_T so) rounds each element once more: u_in (|S| + B)
    plus half the format's smallest subnormal (docs/error-model.md §2.2). Every tensor but the
    returned states (``final_state``, ``final_key_sum``) is returned as it is.
    """
    charged = dict(bounds)
    name = dtype_name(dtype)
    if final_state_dtype != "input" or name in ("float32", "float64"):
        return charged
    info = torch.finfo(dtype)
    unit, tiny = UNIT_ROUNDOFF[name], info.smallest_normal * info.eps / 2
    for key in ("final_state", "final_key_sum"):
        tb = charged.get(key)
        if tb is not None:
            charged[key] = replace(
                tb, bound=tb.bound + unit * (tb.reference.abs() + tb.bound) + tiny
            )
    return charged


GRADIENT_NAMES = ("q", "k", "v", "g", "initial_state", "initial_key_sum")
"""Keys of the gradient dictionaries: d/dq, d/dk, d/dv, d/dg, d/dS_0, d/dz_0."""


def _split_final_cotangent(
    d_final_state: object, p: Problem
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if d_final_state is None:
        return None, None
    N, H, K, V = p.num_sequences, p.q.shape[2], p.feature_dim, p.v.shape[-1]
    if p.normalize:
        if not (isinstance(d_final_state, tuple | list) and len(d_final_state) == 2):
            raise InvalidArgument(
                "Expected d_final_state to be a pair (dS_T [N, H, K, V], dz_T [N, H, K]) for a "
                f"normalized problem but got {type(d_final_state).__name__}."
            )
        dS, dz = d_final_state
    else:
        dS, dz = d_final_state, None
    for name, t, shape in (("d_final_state", dS, (N, H, K, V)), ("d_final_key_sum", dz, (N, H, K))):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != shape):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise InvalidArgument(f"Expected {name} of shape {shape} but got {got}.")
    return (
        None if dS is None else dS.to(torch.float64),
        None if dz is None else dz.to(torch.float64),
    )


def cotangent_loss(
    o: torch.Tensor, final_state: object, do: torch.Tensor, d_final_state: object = None
) -> torch.Tensor:
    """Return <o, do> + <S_T, dS_T> + <z_T, dz_T> in float32 or better (missing parts are 0).

    Its gradient is the vector-Jacobian product the backward bounds describe. ``final_state`` and
    ``d_final_state`` are `None`, S_T / dS_T, or the pairs (S_T, z_T) / (dS_T, dz_T).
    """
    dtype = torch.promote_types(o.dtype, torch.float32)
    loss = (o.to(dtype) * do.to(dtype)).sum()
    finals = final_state if isinstance(final_state, tuple | list) else (final_state,)
    cotangents = d_final_state if isinstance(d_final_state, tuple | list) else (d_final_state,)
    for x, d in zip(finals, cotangents, strict=False):
        if isinstance(x, torch.Tensor) and isinstance(d, torch.Tensor):
            loss = loss + (x.to(dtype) * d.to(device=x.device, dtype=dtype)).sum()
    return loss


def reference_gradients(
    problem: Problem, do: torch.Tensor, d_final_state: object = None
) -> dict[str, torch.Tensor]:
    """Return the exact (float64) gradients of <o, do> + <S_T, dS_T> + <z_T, dz_T>.

    Computed by torch autograd through the float64 parallel reference, or for sequences longer
    than `DENSE_TOKENS` (`DENSE_VECTOR_TOKENS` under a vector gate) the chunked one (O(T·C) time,
    O(T) memory: each chunk is recomputed in the backward; docs/error-model.md §6.5).
    Keys are those of `GRADIENT_NAMES` whose input exists (``g`` only with decay,
    ``initial_state`` only when one was given).
    """
    from linattn_verify.linear_attn.oracles.chunk import chunk_reference
    from linattn_verify.linear_attn.oracles.parallel import parallel_reference

    p = problem.to(torch.float64)
    _split_final_cotangent(d_final_state, p)  # validates the cotangent's layout
    p, leaves = replace(p, output_final_state=True).with_grad_leaves()
    longest = max((end - start for _, _, start, end in p.sequences()), default=0)
    with torch.enable_grad():
        if longest <= (DENSE_VECTOR_TOKENS if p.vector_gate else DENSE_TOKENS):
            o, final = parallel_reference(p)
        else:
            o, final = chunk_reference(p, chunk_size=ORACLE_CHUNK)
        loss = cotangent_loss(o, final, do, d_final_state)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        name: (torch.zeros_like(leaf) if grad is None else grad)
        for (name, leaf), grad in zip(leaves.items(), grads, strict=True)
    }


def backward_bounds(
    problem: Problem,
    recipe: PrecisionRecipe,
    *,
    do: torch.Tensor,
    d_final_state: object = None,
    forward: ForwardBounds | None = None,
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
) -> dict[str, TensorBound]:
    """Compute the exact gradients and their error bounds for a kernel following ``recipe``.

    Args:
        problem: The problem exactly as the kernel received it.
        recipe: The kernel's precision recipe.
        do: Cotangent of the output ``[B, T, H, V]``.
        d_final_state: Cotangent of the final state: `None`, dS_T ``[N, H, K, V]``, or for
            normalized problems the pair ``(dS_T, dz_T)`` (either may be `None`). Default: `None`.
        forward: ``forward_bounds(problem, recipe)`` when the caller has it already (its terms
            are reused, not recomputed). Default: `None`.
        zero_denominator: The kernel's declared value where the exact denominator is 0; the
            gradient elements that depend on such a row are marked ``undefined``
            (`depends_on_rows`) and carry it. Default: `"zero"`.
        causal_exact: As `forward_bounds`'s (used when ``forward`` is not given).
            Default: `True`.

    A vector gate (g ``[B, T, H, K]``) is covered (docs/error-model.md §5.1): dg is then
    ``[B, T, H, K]``. Time and memory are those of `forward_bounds`.

    Returns:
        A `TensorBound` per gradient, keyed by `GRADIENT_NAMES` (only the inputs that exist).

    Raises:
        InvalidArgument: for a ``do`` of the wrong shape.
    """
    if not isinstance(do, torch.Tensor) or tuple(do.shape) != tuple(problem.v.shape):
        got = tuple(do.shape) if isinstance(do, torch.Tensor) else type(do).__name__
        raise InvalidArgument(f"Expected do of shape {tuple(problem.v.shape)} but got {got}.")
    fb = forward or forward_bounds(problem, recipe, causal_exact=causal_exact)
    pieces = fb.pieces
    p, units = _prepare(problem, recipe)
    judge = p.q.device
    do, d_final_state = do.to(judge), moved_to(d_final_state, judge)
    o_residual = fb.tensors["o"].residual
    undefined = (
        {}
        if o_residual is None
        else depends_on_rows(
            p,
            o_residual.denominator[..., 0].to(judge) == 0,
            whole_sequence=zero_denominator != "zero",
        )
    )
    # p is the problem as the kernel sees it, in float64 on the judging device.
    refs = reference_gradients(p, do, d_final_state)
    K, V = p.q.shape[3], p.v.shape[-1]
    per_seq = _backward_pieces(p, pieces, do, d_final_state)
    if not causal_exact and recipe.decay_scan == "global":
        _charge_packed_scan(p, per_seq, units.acc)

    def rows(key: str, last: int | None) -> torch.Tensor:
        pieces_ = [d[key] if last is not None else d[key][..., None] for d in per_seq]
        x = _assemble(p, pieces_, last or 1)
        return x if last is not None else x[..., 0]

    def states(key: str) -> torch.Tensor:
        return torch.stack([d[key] for d in per_seq], dim=0)

    count = states("count").max()
    input_out = units.out
    result: dict[str, TensorBound] = {}
    # dg is [B, T, H] for a scalar gate and [B, T, H, K] for a vector one (per dimension).
    layout = {"q": K, "k": K, "v": V, "g": K if p.vector_gate else None}
    for name, ref in refs.items():
        if name in layout:
            last = layout[name]
            M, B = rows("M_" + name, last), rows("B_" + name, last)
            per_dimension = name == "g" and p.vector_gate  # bad_g is [H, L, K] then
            bad = rows("bad_" + name, last if per_dimension else None).bool()
            if last is not None and not per_dimension:
                bad = bad[..., None].expand_as(M)
            dtype = problem.g.dtype if name == "g" and problem.g is not None else problem.q.dtype
        else:
            key = "S0" if name == "initial_state" else "z0"
            M, B = states("M_" + key), states("B_" + key)
            bad = states("bad_S0")
            bad = bad.reshape(*bad.shape, *([1] * (M.ndim - bad.ndim))).expand_as(M)
            source = problem.initial_state if name == "initial_state" else problem.initial_key_sum
            dtype = source.dtype if source is not None else torch.float32
        out_unit = input_out if dtype == problem.q.dtype else Units.of(recipe, dtype).out
        out_units = Units.of(recipe, dtype)
        tiny = out_units.out_abs + units.underflow * count * (p.q.shape[1] + 1) * (K + V)
        B = B + out_unit * ref.abs() + tiny
        # Where the float64 reference itself left the float64 range (docs/error-model.md §6.3) it
        # certifies nothing: count the element as unverifiable rather than skip it silently. So
        # does a bound that is not finite: NaN from 1/|Z| = inf for a float64-subnormal
        # denominator times a zero term (a row the element barely depends on), inf from γ_n
        # with n u >= 1 (`core.rounding.gamma`).
        bad = bad | ~torch.isfinite(ref) | ~torch.isfinite(B)
        result[name] = TensorBound(
            name="d" + name,
            reference=ref,
            bound=torch.where(bad, torch.inf, B),
            magnitude=M,
            count=count.expand_as(ref),
            unit=units.acc,
            verifiable=~bad,
            undefined=_undefined_like(undefined.get(name), ref),
            zero_denominator=zero_denominator,
        )
    return {name: bound_on(b, problem.q.device) for name, b in result.items()}


def _backward_pieces(
    p: Problem, pieces: list[ForwardPieces], do: torch.Tensor, d_final_state: object
) -> list[dict[str, torch.Tensor]]:
    """The gradient terms of each sequence (`backward_sequence`), from its forward pieces."""
    dS, dz = _split_final_cotangent(d_final_state, p)
    do64 = do.to(torch.float64)
    H, F, V = p.q.shape[2], p.feature_dim, p.v.shape[-1]
    backward = vector_backward_sequence if p.vector_gate else backward_sequence
    per_seq = []
    for piece, (n, b, start, end) in zip(pieces, p.sequences(), strict=True):
        ct = Cotangents(
            do=do64[b, start:end].transpose(0, 1),
            dS=dS[n] if dS is not None else do64.new_zeros(H, F, V),
            dz=dz[n] if dz is not None else do64.new_zeros(H, F),
        )
        per_seq.append(backward(piece, ct, p.normalize))
    return per_seq


def overflow_elements(
    problem: Problem,
    recipe: PrecisionRecipe,
    *,
    causal_exact: bool = True,
    cotangents: tuple[torch.Tensor, object] | None = None,
) -> dict[str, torch.Tensor]:
    """Elements where the recipe's 16-bit arithmetic may overflow (docs/error-model.md §8.3).

    A kernel computing (``accumulation="input"``) or dividing (``division_dtype="input"``) in
    a 16-bit input dtype may return inf or NaN there though the exact value is finite
    (`linattn_verify.linear_attn._bounds.overflow`); the bounds mark them unverifiable. Keyed like
    `linattn_verify.linear_attn._bounds.dependence.depends_on_rows`'s masks with a ``d`` prefix,
    plus ``o``, ``final_state`` and ``final_key_sum``; the gradients only with ``cotangents`` (do,
    d_final_state): every gradient of an affected (sequence, head). Empty when the recipe
    cannot overflow so.
    """
    p, units = _prepare(problem, recipe)
    if units.overflow_arith == float("inf") and units.overflow_division == float("inf"):
        return {}
    fb = forward_bounds(problem, recipe, causal_exact=causal_exact)
    B, T, H, _, V = p.shape
    rows = _assemble(p, [piece.overflow[..., None].double() for piece in fb.pieces], 1)
    masks = {"o": (rows > 0).expand(B, T, H, V)}
    F, N = p.feature_dim, p.num_sequences
    end = torch.stack([piece.end_overflow for piece in fb.pieces], 0)  # [N, H]
    masks["final_state"] = end[..., None, None].expand(N, H, F, V)
    if p.normalize:
        masks["final_key_sum"] = end[..., None].expand(N, H, F)
    if cotangents is None:
        return masks
    per_seq = _backward_pieces(p, fb.pieces, cotangents[0], cotangents[1])
    marked = torch.zeros(B, T, H, dtype=torch.bool, device=rows.device)
    for values, (_, b, start, stop) in zip(per_seq, p.sequences(), strict=True):
        marked[b, start:stop] = values["overflow_heads"]
    spread = depends_on_rows(p, marked, whole_sequence=True)
    masks.update({"d" + name: mask for name, mask in spread.items()})
    return masks


def _undefined_like(mask: torch.Tensor | None, ref: torch.Tensor) -> torch.Tensor | None:
    """``mask`` broadcast to ``ref``'s shape: a vector gate's dg_j is undefined in every dim."""
    if mask is None or mask.shape == ref.shape:
        return mask
    return mask[..., None].expand_as(ref)


__all__ = [
    "GRADIENT_NAMES",
    "ForwardBounds",
    "Residual",
    "TensorBound",
    "as_kernel_sees",
    "backward_bounds",
    "charge_returned_state",
    "cotangent_loss",
    "forward_bounds",
    "overflow_elements",
    "reference_gradients",
]
