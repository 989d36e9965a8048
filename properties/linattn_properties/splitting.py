# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Splitting the work: a state carried across a split, and packed varlen sequences.

Both compare a kernel with itself run on the same function split differently, so each run is
within its own bound of the exact values (`linattn_verify.compare.compare_pair`:
|a - b| <= B_a + B_b); the split run's bound also carries the error of the state handed over.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import torch

from linattn_properties._support import (
    not_applicable,
    prepare_case,
    property_function,
    run_kernel,
)
from linattn_verify.compare import Side, compare, compare_pair
from linattn_verify.compare._elementwise import safe_ratio
from linattn_verify.core.bound import TensorBound
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.semantics import Problem, validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.linear_attn.tolerance import forward_bounds
from linattn_verify.results import Comparison, PropertyResult


def _subproblem(problem: Problem, start: int, end: int, initial_state: Any) -> Problem:
    """Tokens [start, end) of a dense problem as a problem of its own (contiguous copies).

    Validated afresh: ``initial_state`` may be a kernel's returned state, which must be a valid
    initial state of the calling convention.
    """

    def cut(x: torch.Tensor) -> torch.Tensor:
        return x[:, start:end].contiguous()

    return validate_problem(
        cut(problem.q),
        cut(problem.k),
        cut(problem.v),
        None if problem.g is None else cut(problem.g),
        scale=problem.scale,
        normalize=problem.normalize,
        eps=problem.eps,
        feature_map=problem.feature_map,
        initial_state=initial_state,
        output_final_state=True,
        feature_weights=problem.feature_weights,
        query_feature_map=problem.query_feature_map,
        gv=None if problem.gv is None else cut(problem.gv),
    )


def _carried_state_error(
    problem: Problem, s: int, fb_whole: dict[str, TensorBound], e_S: torch.Tensor, e_z: Any
) -> dict[str, torch.Tensor]:
    """Bound the exact effect, on o[s:], S_T and z_T, of a state error |E_S| <= e_S, |E_z| <= e_z.

    With w_t = exp(G_t - G_s) the decay from s to t (a vector over the key dimensions, the
    scalar gate's repeated) the state error enters linearly:
    ΔN_t = s (w_t ⊙ φ(q_t))^T E_S, ΔZ_t = s (w_t ⊙ φ(q_t))·E_z, ΔS_T = diag(w_T) E_S,
    Δz_T = w_T ⊙ E_z, so

        |ΔN_t| <= A_t = |s| (w_t ⊙ |φ(q_t)|)^T e_S    |ΔZ_t| <= C_t = |s| (w_t ⊙ |φ(q_t)|)·e_z
        unnormalized  |Δo_t| <= A_t
        normalized    |Δo_t| = |ΔN_t - o_t ΔZ_t| / |Z_t + ΔZ_t| <= (A_t + |o_t| C_t) / (|Z_t| - C_t)

    with o_t, Z_t the exact whole-run values (inf, i.e. unverifiable, where C_t >= |Z_t| > 0).
    """
    p = problem.to(torch.float64)
    phi_q = p.query_features(p.q[:, s:]).abs()  # [B, L, H, F]
    if p.g is None:
        w = torch.ones_like(phi_q)
    else:
        # The decay from s to t, per key dimension (a scalar gate repeated over K).
        G = torch.cumsum(p.g[:, s:], dim=1)
        w = torch.exp(G if p.vector_gate else G[..., None]).expand_as(phi_q)  # [B, L, H, K]
    weighted_q = abs(p.outer_scale) * w * phi_q
    A = torch.einsum("blhk,bhkv->blhv", weighted_q, e_S)
    carried = {"final_state": w[:, -1, :, :, None] * e_S}
    if not p.normalize:
        carried["o"] = A
        return carried
    C = torch.einsum("blhk,bhk->blh", weighted_q, e_z)
    tb = fb_whole["o"]
    assert tb.residual is not None
    Z = tb.residual.denominator[:, s:, :, 0].abs()
    o = tb.reference[:, s:].abs()
    room = (Z - C)[..., None]
    carried["o"] = torch.where(room > 0, safe_ratio(A + o * C[..., None], room), torch.inf)
    carried["o"] = torch.where((Z == 0)[..., None] & (A == 0), 0.0, carried["o"])
    carried["final_key_sum"] = w[:, -1] * e_z
    return carried


def _shifted(tb: TensorBound, s: int, name: str) -> TensorBound:
    """Rows [s, T) of an output `TensorBound`, without the residual pieces."""
    return TensorBound(
        name=name,
        reference=tb.reference[:, s:],
        bound=tb.bound[:, s:],
        magnitude=tb.magnitude[:, s:],
        count=tb.count[:, s:],
        unit=tb.unit,
        verifiable=tb.verifiable[:, s:],
        undefined=None if tb.undefined is None else tb.undefined[:, s:],
        zero_denominator=tb.zero_denominator,
    )


def _undefined(tb: TensorBound) -> torch.Tensor:
    """``tb.undefined``, or no element."""
    if tb.undefined is None:
        return torch.zeros_like(tb.reference, dtype=torch.bool)
    return tb.undefined


@property_function
def state_split_composes(
    spec: ProblemSpec, kernel: Kernel, *, split: int | None = None
) -> PropertyResult:
    """Check that running [0, s), then [s, T) from the returned state, equals one run.

    The kernel runs three times with the final state requested: on [0, s) from S_0 (giving o',
    Ŝ_s), on [s, T) from Ŝ_s (giving o'', Ŝ_T), and on [0, T) (giving o, S_T-hat). For
    normalized problems the state is the pair (S, z). Checked, against the exact values x of
    the whole run [0, T):

    * first part: o' and Ŝ_s within their oracle bound B' (r <= 2, η <= 2 for o');
    * second part: |x̂ - x| <= B'' + P for o'' and Ŝ_T, where B'' is the bound of the second
      run on the state it was actually given (Ŝ_s), and P carries the first run's state bound
      B'_S through the exact, linear dependence of the rest on the state (derived in
      `_carried_state_error`): |x̂ - x| <= |x̂ - f(Ŝ_s)| + |f(Ŝ_s) - f(S_s)| <= B'' + P. The
      whole run's own bound is not used for the second part: its rounding counts assume chunk
      boundaries and recurrences anchored at 0, not at s;
    * the split equals the whole run: |split - whole| / (B_split + B_whole) <= 2 for o, S_T, z_T.

    Args:
        spec: The case (dense: varlen cases are not applicable).
        kernel: The kernel under test.
        split: s in [1, T-1]. Default: `None`: drawn from ``spec.seed``.

    Returns:
        The `PropertyResult` (not applicable for T < 2, varlen cases, or a kernel without
        initial- or final-state support).
    """
    name = "state_split_composes"
    cap = kernel.capabilities
    if spec.T < 2 or spec.segments is not None:
        why = "T < 2: nothing to split" if spec.T < 2 else "varlen case (see varlen property)"
        return not_applicable(name, kernel, spec, why)
    if not (cap.initial_state and cap.final_state):
        return not_applicable(name, kernel, spec, f"{kernel.name}: needs initial and final state")
    s = 1 + random.Random(spec.seed).randrange(spec.T - 1) if split is None else split
    if not 1 <= s < spec.T:
        raise InvalidArgument(
            f"Got split={split}, but split must be in [1, T-1] = [1, {spec.T - 1}]."
        )
    case = prepare_case(name, spec, kernel, final_state=True)
    if isinstance(case, PropertyResult):
        return case
    whole, recipe = case.problem, case.recipe
    first = _subproblem(whole, 0, s, whole.state_arg)
    run_whole = run_kernel(kernel, whole, caller_judges=True)
    run_first = run_kernel(kernel, first, caller_judges=True)
    handed_over = run_first.final_state
    try:
        second = _subproblem(
            whole, s, spec.T, tuple(handed_over) if isinstance(handed_over, list) else handed_over
        )
    except InvalidArgument as exc:
        return case.failed(
            f"{kernel.name}'s final state at s={s} is not a valid initial state: {exc}"
        )
    run_second = run_kernel(kernel, second, caller_judges=True)
    declared = kernel.capabilities.zero_denominator
    fb_whole = forward_bounds(whole, recipe, zero_denominator=declared).tensors
    fb_first = forward_bounds(first, recipe, zero_denominator=declared).tensors
    fb_second = forward_bounds(second, recipe, zero_denominator=declared).tensors
    e_z = fb_first["final_key_sum"].bound if whole.normalize else None
    carried = _carried_state_error(whole, s, fb_whole, fb_first["final_state"].bound, e_z)
    label = f"{kernel.name} split at s={s}"
    firsts, seconds, wholes = run_first.tensors(), run_second.tensors(), run_whole.tensors()

    comparisons: list[Comparison] = [
        compare(firsts["o"], replace(fb_first["o"], name=f"o[:{s}]"), subject=label)
    ]
    split_sides: dict[str, Side] = {}
    for key, tb_second in fb_second.items():
        bound = tb_second.bound + carried[key]
        verifiable = tb_second.verifiable & torch.isfinite(bound)
        if key == "o":
            exact = _shifted(fb_whole["o"], s, f"o[{s}:]")
            split_sides[key] = Side(
                label,
                torch.cat([firsts["o"], seconds["o"]], dim=1),
                torch.cat([fb_first["o"].bound, bound], dim=1),
                torch.cat([fb_first["o"].verifiable, verifiable], dim=1),
                torch.cat([_undefined(fb_first["o"]), _undefined(tb_second)], dim=1),
            )
        else:
            exact = replace(fb_whole[key], name=key)
            at_s = replace(fb_first[key], name=f"{key} at s={s}")
            comparisons.append(compare(firsts[key], at_s, subject=label))
            split_sides[key] = Side(label, seconds[key], bound, verifiable)
        derived = replace(exact, bound=bound, magnitude=tb_second.magnitude, verifiable=verifiable)
        comparisons.append(compare(seconds[key], derived, subject=label))
    comparisons += [
        compare_pair(
            key,
            split_side,
            Side.of(f"{kernel.name} whole run", wholes[key], fb_whole[key]),
            fb_whole[key].reference,
        )
        for key, split_side in split_sides.items()
    ]
    return case.judged(comparisons, notes=[f"split at s={s}"])


def _packed(problem: Problem) -> Problem:
    """The dense batch rows of ``problem`` packed end to end into one varlen problem."""
    B, T = problem.shape[:2]

    def pack(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(1, B * T, *x.shape[2:]).contiguous()

    packed = problem.with_tensors(
        q=pack(problem.q),
        k=pack(problem.k),
        v=pack(problem.v),
        g=None if problem.g is None else pack(problem.g),
        gv=None if problem.gv is None else pack(problem.gv),
        # One sequence per former batch row: the initial states keep their [N, ...] rows.
        cu_seqlens=torch.arange(B + 1) * T,
    )
    return replace(packed, output_final_state=True)


def _initial_row(problem: Problem, n: int) -> Any:
    """Sequence n's initial state as a one-row state argument (or `None`)."""
    if problem.initial_state is None:
        return None
    S0 = problem.initial_state[n : n + 1]
    if problem.normalize:
        assert problem.initial_key_sum is not None
        return (S0, problem.initial_key_sum[n : n + 1])
    return S0


@property_function
def varlen_matches_separate_runs(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that a packed varlen run equals separate runs of each sequence.

    With cu_seqlens = [0, c_1, ..., c_N], the packed run (B = 1) and, for each nonempty
    sequence n, a run on tokens [c_n, c_{n+1}) alone from S_0[n] (B = 1, no cu_seqlens), for o
    and every S_T[n] (and z_T[n]):

        |packed - separate| / (B_packed + B_separate) <= 2.

    An empty sequence has no tokens: its separate "run" is S_0[n] itself, exactly (bound 0), so
    the packed run must return its initial state (or zeros) within its own bound. Bit equality is
    not required: the tilings differ. A dense case is packed row by row (B = 1 gives one
    sequence: the varlen path against the dense one).

    Args:
        spec: The case: varlen, or dense (packed).
        kernel: The kernel under test.

    Returns:
        The `PropertyResult` (not applicable without varlen or final-state support).
    """
    name = "varlen_matches_separate_runs"
    if not kernel.capabilities.varlen:
        return not_applicable(name, kernel, spec, f"{kernel.name}: no varlen support")
    if not kernel.capabilities.final_state:
        return not_applicable(name, kernel, spec, f"{kernel.name}: no final state")
    case = prepare_case(name, spec, kernel, final_state=True)
    if isinstance(case, PropertyResult):
        return case
    problem, recipe = case.problem, case.recipe
    notes = []
    if problem.cu_seqlens is None:
        problem = _packed(problem)
        notes.append(f"packed from the dense batch rows: {problem.describe()}")
        reason = kernel.supports(problem)
        if reason is not None:
            return case.not_applicable(reason)
    segments = [(n, start, end) for n, _, start, end in problem.sequences()]
    packed = run_kernel(kernel, problem, caller_judges=True)
    separate = {
        n: (sub, run_kernel(kernel, sub, caller_judges=True))
        for n, start, end in segments
        if end > start
        for sub in [_subproblem(problem, start, end, _initial_row(problem, n))]
    }
    fb_packed = forward_bounds(problem, recipe).tensors
    pieces: dict[str, list[tuple[torch.Tensor, ...]]] = {}
    for n, _, _ in segments:
        if n in separate:
            sub, run = separate[n]
            bounds = forward_bounds(sub, recipe).tensors
            values = run.tensors()
            for key, tb in bounds.items():
                piece = (values[key], tb.bound, tb.verifiable, _undefined(tb))
                pieces.setdefault(key, []).append(piece)
            continue
        for key, initial in (
            ("final_state", problem.initial_state),
            ("final_key_sum", problem.initial_key_sum),
        ):
            if key not in fb_packed:
                continue
            ref = fb_packed[key].reference[n : n + 1]
            value = ref.new_zeros(ref.shape) if initial is None else initial[n : n + 1]
            zero = torch.zeros_like(ref)
            known = torch.ones_like(ref, dtype=torch.bool)
            pieces.setdefault(key, []).append((value, zero, known, ~known))
    comparisons = []
    values = packed.tensors()
    for key in [k for k in fb_packed if k in pieces]:
        parts = pieces[key]
        dim = 1 if key == "o" else 0
        sep = Side(
            "separate runs",
            torch.cat([p[0].to(parts[0][0].dtype) for p in parts], dim=dim),
            torch.cat([p[1] for p in parts], dim=dim),
            torch.cat([p[2] for p in parts], dim=dim),
            torch.cat([p[3] for p in parts], dim=dim),
        )
        comparisons.append(
            compare_pair(
                key,
                Side.of(f"{kernel.name} packed", values[key], fb_packed[key]),
                sep,
                fb_packed[key].reference,
            )
        )
    return case.judged(comparisons, notes=notes)


__all__ = ["state_split_composes", "varlen_matches_separate_runs"]
