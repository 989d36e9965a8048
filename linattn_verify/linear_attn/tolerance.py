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

**Gradients** (docs/error-model.md §5, the formulas there). Each gradient term's relative error
is u_acc (c_fwd + c_rev + V + 8) + ε_w + casts + tf32 + e_Z(t), with c_rev the reverse
accumulation's count and e_Z = B^Z/|Z|; the kernel's own ô used in δ_t = do_t·o_t contributes
|do_t|·B^o_t ζ_t absolutely, and dg's reverse cumsum adds (T - s + 1) roundings. Gradient
elements that depend on an unverifiable denominator are unverifiable.

**Undefined elements** (docs/error-model.md §3). Where the exact denominator Z_t is exactly 0 the
exact o_t is undefined, and so is every gradient element that depends on row t (`depends_on_rows`:
dq_t; dk_j, dv_j, dg_j for j <= t; dS_0, dz_0 of the sequence; per head). Each `TensorBound`
marks them (``undefined``) and carries the kernel's declared convention for them
(``zero_denominator``); the bounds themselves are those of the ``"zero"`` convention (o_t = 0,
its rows contributing nothing to the gradients) whatever the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from linattn_verify.core.bound import Residual, TensorBound, ZeroDenominator
from linattn_verify.core.judging import bound_on, judging_device
from linattn_verify.core.placement import moved_to
from linattn_verify.core.reuse import reused
from linattn_verify.core.value_gate import unfold_bound, unfold_tensor
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn._bounds.assembly import (
    GRADIENT_NAMES,
    backward_pieces,
    charge_packed_scan,
    charge_returned_state,
    cotangent_loss,
    sink,
    split_final_cotangent,
    undefined_like,
)
from linattn_verify.linear_attn._bounds.dependence import depends_on_rows
from linattn_verify.linear_attn._bounds.forward import ForwardPieces, forward_sequence
from linattn_verify.linear_attn._bounds.heads import (
    Rows,
    States,
    head_groups,
    slice_cotangent,
    slice_heads,
)
from linattn_verify.linear_attn._bounds.terms import (
    SequenceTerms,
)
from linattn_verify.linear_attn._bounds.units import Units
from linattn_verify.linear_attn.exact_gradients import reference_gradients
from linattn_verify.linear_attn.kernel_view import as_kernel_sees
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import Problem
from linattn_verify.linear_attn.value_gate import fold


@dataclass(frozen=True)
class ForwardBounds:
    """Bounds for the forward outputs; ``o``/``final_state``/``final_key_sum`` are the B tensors."""

    o: torch.Tensor
    final_state: torch.Tensor | None
    final_key_sum: torch.Tensor | None
    tensors: dict[str, TensorBound] = field(default_factory=dict)
    # The per-sequence terms `backward_bounds` builds on (so it need not recompute them): one
    # per head group (`groups`) and sequence, group-major; and the problem as judged
    # (`_prepare`: in its own dtype, each group converted to float64 while evaluated).
    pieces: list[ForwardPieces] = field(default_factory=list, repr=False)
    groups: list[tuple[int, int]] = field(default_factory=list, repr=False)
    problem: Problem | None = field(default=None, repr=False)


_STATE_KEYS = frozenset({"S_T", "M_S", "B_S", "z_T", "M_z", "B_z"})
"""Keys of `forward_sequence`'s values that are per sequence ``[H, ...]``, not per token."""


def _group_sequences(
    p: Problem, groups: list[tuple[int, int]]
) -> list[tuple[tuple[int, int], tuple[int, int, int, int]]]:
    """(head group, sequence) pairs in the order of `ForwardBounds.pieces`."""
    return [(group, sequence) for group in groups for sequence in p.sequences()]


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
    return as_kernel_sees(problem, recipe).to(None, judge), Units.of(recipe, problem.q.dtype)


def _in_float64(p: Problem, h0: int, h1: int) -> Problem:
    """Heads h0..h1-1 of the judged problem in float64 (exactly).

    Only the group evaluated is held in float64 (at H_g = H/2, half the inputs at the peak).
    """
    return slice_heads(p, h0, h1).to(torch.float64)


def forward_bounds(
    problem: Problem,
    recipe: PrecisionRecipe,
    *,
    zero_denominator: ZeroDenominator = "zero",
    causal_exact: bool = True,
    scan_block: int | None = None,
    head_group: int | None = None,
) -> ForwardBounds:
    """Compute the exact forward result and its error bounds for a kernel following ``recipe``.

    A vector gate (g ``[B, T, H, K]``) is covered (docs/error-model.md §2.7), and a value gate
    gv (forward only: `linattn_verify.linear_attn.value_gate`, §2.9). Time and memory
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
        head_group: Heads evaluated together (`linattn_verify.linear_attn._bounds.heads`; the
            results do not depend on it), or `None`: as many as keep one group's
            ``[H_g, L, K]`` tensors within `GROUP_ELEMENTS`. The gradient bounds built on the
            result group their heads the same way. Default: `None`.

    Returns:
        `ForwardBounds`: the absolute bound tensors (``o`` ``[B, T, H, V]``, ``final_state``
        ``[N, H, K, V]``, ``final_key_sum`` ``[N, H, K]``), and in ``tensors`` the full
        `TensorBound` of each (reference values, magnitudes, counts, residual pieces).
        Within `linattn_verify.core.reuse.reusing_results` (the size reach): the result of the
        last call if its arguments were equal (the caller must not write into it).
    """
    if problem.gv is not None:
        # A value gate: the bounds of its single-column fold, put back in order; forward only
        # (no pieces for gradient bounds: a value gate's gradients are not judged).
        _, _, H, _, V = problem.shape
        folded = forward_bounds(
            fold(problem),
            recipe,
            zero_denominator=zero_denominator,
            causal_exact=causal_exact,
            scan_block=scan_block,
        )
        tensors = {name: unfold_bound(b, H, V) for name, b in folded.tensors.items()}
        state = tensors.get("final_state")
        return ForwardBounds(
            o=tensors["o"].bound,
            final_state=None if state is None else state.bound,
            final_key_sum=None,
            tensors=tensors,
        )
    key = (problem, recipe, zero_denominator, causal_exact, scan_block, head_group)
    return reused(
        "linear.forward_bounds",
        key,
        lambda: _forward_bounds(
            problem, recipe, zero_denominator, causal_exact, scan_block, head_group
        ),
    )


def _forward_bounds(
    problem: Problem,
    recipe: PrecisionRecipe,
    zero_denominator: ZeroDenominator,
    causal_exact: bool,
    scan_block: int | None,
    head_group: int | None,
) -> ForwardBounds:
    p, units = _prepare(problem, recipe)
    groups = head_groups(p, head_group)
    V = p.v.shape[-1]
    out_rows = Rows(p, p.q.device)
    out_states = States(p.num_sequences, p.q.shape[2])
    counts: list[torch.Tensor] = []
    pieces: list[ForwardPieces] = []
    for h0, h1 in groups:
        pg = _in_float64(p, h0, h1)
        for n, b, start, end in pg.sequences():
            seq = SequenceTerms(
                pg,
                recipe,
                units,
                n,
                b,
                start,
                end,
                causal_exact=causal_exact,
                scan_block=scan_block,
            )
            values, piece = forward_sequence(seq, pg)
            seq.forget_blocks()  # a group's cached weight blocks: O(L·P) each, held by `pieces`
            seq.release_decays()  # a vector gate's [H*K, L+1] decays, formed again when needed
            seq.release_inputs()  # the group's float64 inputs, bound again for its gradients
            for key, x in values.items():
                if key == "count_S":
                    counts.append(x)
                elif key in _STATE_KEYS:
                    out_states.put(key, x, n, h0, h1)
                else:
                    out_rows.put(key, x, b, start, end, h0, h1)
            del values
            # The piece keeps views of the whole tensors, not copies of its own.
            o_, B_o_, M_N_ = (
                out_rows.get(key, V)[b, start:end, h0:h1].transpose(0, 1)
                for key in ("o", "B_o", "M_N" if p.normalize else "M_o")
            )
            pieces.append(replace(piece, o=o_, bound_o=B_o_, numerator_magnitude=M_N_))
            del piece

    def rows(key: str, last: int) -> torch.Tensor:
        return out_rows.get(key, last)

    def states(key: str) -> torch.Tensor:
        return out_states.get(key)

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
        count_S = torch.stack(counts, dim=0).max()
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
                # The kernel returns its key sum without the eps the judged z_0 carries.
                reference=z_ref - p.key_sum_offset,
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
        groups=groups,
        problem=p,
    )


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
    if problem.gv is not None:
        raise InvalidArgument("Got a problem with a value gate gv: its gradients are not judged.")
    fb = forward or forward_bounds(problem, recipe, causal_exact=causal_exact)
    p, units = _judged(problem, recipe, fb)
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
    split_final_cotangent(d_final_state, p)  # validates the cotangent's layout
    K, V = p.q.shape[3], p.v.shape[-1]
    layout = {"q": K, "k": K, "v": V, "g": K if p.vector_gate else None}
    refs: dict[str, torch.Tensor] = {}
    out_rows = Rows(p, judge)
    out_states = States(p.num_sequences, p.q.shape[2])
    counts: list[torch.Tensor] = []
    # One head group at a time (`_bounds.heads`), each written into the whole problem's tensors
    # before the next group's intermediates are formed: first every group's bounds, then every
    # group's reference gradients (p is the problem as the kernel sees it, in float64 on the
    # judging device). In that order the bounds' working tensors (the peak) never meet the
    # references, nor the autograd graph the bounds' outputs.
    for (h0, h1), group in _by_group(fb):
        pg = _bound(p, h0, h1, group)
        dfs = slice_cotangent(d_final_state, h0, h1)
        do_g = do.narrow(2, h0, h1 - h0)
        sinks = [
            sink(out_rows, out_states, counts, n, b, start, end, h0, h1)
            for n, b, start, end in pg.sequences()
        ]
        backward_pieces(pg, group, do_g, dfs, sinks)
        if not causal_exact and recipe.decay_scan == "global" and p.g is not None:
            width = K if p.vector_gate else 1
            M_g, B_g = out_rows.get("M_g", width), out_rows.get("B_g", width)
            charge_packed_scan(pg, M_g, B_g, h0, h1, units.acc)
        _release(group)
        del pg
    # Each group's reference gradients are kept as they are until every group's are formed:
    # whole-problem tensors allocated at the first group would be held through the others.
    per_group: dict[str, list[torch.Tensor]] = {}
    for h0, h1 in fb.groups or [(0, p.q.shape[2])]:
        dfs = slice_cotangent(d_final_state, h0, h1)
        grads = reference_gradients(_in_float64(p, h0, h1), do.narrow(2, h0, h1 - h0), dfs)
        for name in list(grads):
            per_group.setdefault(name, []).append(grads.pop(name))
    for name, parts in per_group.items():
        head_dim = 1 if name in ("initial_state", "initial_key_sum") else 2
        refs[name] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=head_dim)
        parts.clear()

    def rows(key: str, last: int | None) -> torch.Tensor:
        x = out_rows.get(key, last or 1)
        return x if last is not None else x[..., 0]

    count = torch.stack(counts, dim=0).max()
    input_out = units.out
    result: dict[str, TensorBound] = {}
    # dg is [B, T, H] for a scalar gate and [B, T, H, K] for a vector one (per dimension).
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
            M, B = out_states.get("M_" + key), out_states.get("B_" + key)
            bad = out_states.get("bad_S0")
            bad = bad.reshape(*bad.shape, *([1] * (M.ndim - bad.ndim))).expand_as(M)
            source = problem.initial_state if name == "initial_state" else problem.initial_key_sum
            dtype = source.dtype if source is not None else torch.float32
        out_unit = input_out if dtype == problem.q.dtype else Units.of(recipe, dtype).out
        out_units = Units.of(recipe, dtype)
        tiny = out_units.out_abs + units.underflow * count * (p.q.shape[1] + 1) * (K + V)
        # In place on the whole tensors (each is this gradient's alone): B + u|ref| + tiny.
        B.add_(out_unit * ref.abs()).add_(tiny)
        # Where the float64 reference itself left the float64 range (docs/error-model.md §6.3) it
        # certifies nothing: count the element as unverifiable rather than skip it silently. So
        # does a bound that is not finite: NaN from 1/|Z| = inf for a float64-subnormal
        # denominator times a zero term (a row the element barely depends on), inf from γ_n
        # with n u >= 1 (`core.rounding.gamma`).
        bad = bad | ~torch.isfinite(ref) | ~torch.isfinite(B)
        result[name] = TensorBound(
            name="d" + name,
            reference=ref,
            bound=B.masked_fill_(bad, torch.inf),
            magnitude=M,
            count=count.expand_as(ref),
            unit=units.acc,
            verifiable=~bad,
            undefined=undefined_like(undefined.get(name), ref),
            zero_denominator=zero_denominator,
        )
    return {name: bound_on(b, problem.q.device) for name, b in result.items()}


def _judged(problem: Problem, recipe: PrecisionRecipe, fb: ForwardBounds) -> tuple[Problem, Units]:
    """The problem as judged (`_prepare`): the forward's own where it kept it."""
    p = fb.problem
    if p is None or p.eps != as_kernel_sees(problem, recipe).eps or p.shape != problem.shape:
        return _prepare(problem, recipe)
    return p, Units.of(recipe, problem.q.dtype)


def _bound(p: Problem, h0: int, h1: int, group: list[ForwardPieces]) -> Problem:
    """The group's float64 problem, with its pieces' terms bound to it (`SequenceTerms.bind`)."""
    pg = _in_float64(p, h0, h1)
    for piece in group:
        piece.seq.bind(pg)
    return pg


def _release(group: list[ForwardPieces]) -> None:
    """Drop what a group's sequence terms hold beyond the forward's results, once evaluated."""
    for piece in group:
        piece.seq.forget_blocks()
        piece.seq.release_decays()
        piece.seq.release_inputs()


def _by_group(fb: ForwardBounds) -> list[tuple[tuple[int, int], list[ForwardPieces]]]:
    """The forward's pieces by head group (`ForwardBounds.groups`), each group's in order."""
    groups = fb.groups or [(0, fb.o.shape[2])]
    per = len(fb.pieces) // len(groups)
    return [(group, fb.pieces[i * per : (i + 1) * per]) for i, group in enumerate(groups)]


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
    if problem.gv is not None:  # forward only: the masks of the fold, put back in order
        _, _, H, _, V = problem.shape
        masks = overflow_elements(fold(problem), recipe, causal_exact=causal_exact)
        return {name: unfold_tensor(m, name, H, V) for name, m in masks.items()}
    p, units = _prepare(problem, recipe)
    if units.overflow_arith == float("inf") and units.overflow_division == float("inf"):
        return {}
    fb = forward_bounds(problem, recipe, causal_exact=causal_exact)
    B, T, H, _, V = p.shape
    rows, ends = Rows(p, p.q.device), States(p.num_sequences, H)
    for ((h0, h1), (n, b, start, stop)), piece in zip(
        _group_sequences(p, fb.groups), fb.pieces, strict=True
    ):
        rows.put("overflow", piece.overflow, b, start, stop, h0, h1)
        ends.put("end", piece.end_overflow, n, h0, h1)
    masks = {"o": (rows.get("overflow", 1) > 0).expand(B, T, H, V)}
    F, N = p.feature_dim, p.num_sequences
    end = ends.get("end")  # [N, H]
    masks["final_state"] = end[..., None, None].expand(N, H, F, V)
    if p.normalize:
        masks["final_key_sum"] = end[..., None].expand(N, H, F)
    if cotangents is None:
        return masks
    marked = torch.zeros(B, T, H, dtype=torch.bool, device=p.q.device)
    do = cotangents[0].to(p.q.device)
    for (h0, h1), group in _by_group(fb):
        pg = _bound(p, h0, h1, group)
        dfs = slice_cotangent(moved_to(cotangents[1], p.q.device), h0, h1)
        per_seq = backward_pieces(pg, group, do.narrow(2, h0, h1 - h0), dfs)
        _release(group)
        for values, (_, b, start, stop) in zip(per_seq, pg.sequences(), strict=True):
            marked[b, start:stop, h0:h1] = values["overflow_heads"]
    spread = depends_on_rows(p, marked, whole_sequence=True)
    masks.update({"d" + name: mask for name, mask in spread.items()})
    return masks


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
