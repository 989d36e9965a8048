# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Equivalences: runs that compute the same function by different routes agree.

Two runs a and b of the same exact function are each within their own bound of it, so a correct
pair satisfies, for every element judged by both,

    |a - b| <= B_a + B_b,

with B from each run's own precision recipe (`forward_bounds`, `backward_bounds`). The score is
the ratio |a - b| / (B_a + B_b); like r against the oracle it FAILS above 2 (the bounds are
first-order; see `linattn_verify.compare.FAIL_THRESHOLD`). Elements unverifiable for either run
(an ill-conditioned denominator, B = inf) are excluded; an element finite in one run and not in
the other fails wherever the exact value is representable.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from linattn_properties._support import (
    KernelFailure,
    KernelRun,
    kernel_recipe,
    make_result,
    run_kernel,
    with_effective_eps,
)
from linattn_verify.compare import FAIL_THRESHOLD, Comparison, compare
from linattn_verify.errors import InvalidArgument
from linattn_verify.feature_maps import apply_feature_map
from linattn_verify.kernel import Kernel
from linattn_verify.semantics import Problem, validate_problem
from linattn_verify.strategies import ProblemSpec, random_cotangents
from linattn_verify.tolerance import TensorBound, backward_bounds, forward_bounds
from linattn_verify.verdict import PropertyResult


@dataclass(frozen=True)
class Side:
    """One run's value of a tensor with its bound.

    Attributes:
        label: Which run (a kernel name, ``"split"``, ``"separate runs"``...).
        value: The run's tensor.
        bound: Its absolute error bound B (inf where unverifiable).
        verifiable: Elements whose bound is meaningful.
    """

    label: str
    value: torch.Tensor
    bound: torch.Tensor
    verifiable: torch.Tensor


def side(label: str, value: torch.Tensor, tb: TensorBound) -> Side:
    """Pair a run's tensor with the `TensorBound` of its own recipe."""
    return Side(label, value, tb.bound, tb.verifiable)


@dataclass(frozen=True)
class Discrepancy:
    """How far two runs of one tensor are apart, in units of the sum of their bounds.

    Attributes:
        name: The tensor (``"o"``, ``"final_state"``, ``"dq"``, ...).
        a: Label of the first run.
        b: Label of the second run.
        ok: Whether max ratio <= `FAIL_THRESHOLD` and no finite/non-finite mismatch.
        numel: Number of elements.
        excluded: Elements left out (unverifiable for either run).
        exceeding: Judged elements with |a - b| > B_a + B_b.
        nonfinite: Judged elements finite in one run only.
        max_ratio: Largest |a - b| / (B_a + B_b).
        index: Index of the worst element.
        a_value: First run's value there.
        b_value: Second run's value there.
        allowed: B_a + B_b there.
    """

    name: str
    a: str
    b: str
    ok: bool
    numel: int
    excluded: int = 0
    exceeding: int = 0
    nonfinite: int = 0
    max_ratio: float = 0.0
    index: tuple[int, ...] | None = None
    a_value: float = 0.0
    b_value: float = 0.0
    allowed: float = 0.0

    def message(self) -> str:
        """Return a torch.testing-style mismatch message."""
        pct = 100.0 * self.exceeding / max(self.numel, 1)
        lines = [
            f"{self.a} and {self.b} disagree on {self.name}!",
            f"Mismatched elements (|a - b| > B_a + B_b): {self.exceeding} / {self.numel} "
            f"({pct:.1f}%)",
        ]
        if self.nonfinite:
            lines.append(f"Finite/non-finite mismatches: {self.nonfinite} (never allowed)")
        lines.append(
            f"Greatest ratio |a - b| / (B_a + B_b): {self.max_ratio:.3g} at index {self.index} "
            f"(up to {FAIL_THRESHOLD:g} allowed): a = {self.a_value:.9g}, b = {self.b_value:.9g}, "
            f"|a - b| = {abs(self.a_value - self.b_value):.3g}, B_a + B_b = {self.allowed:.3g}"
        )
        lines.append(f"Elements excluded as unverifiable: {self.excluded}")
        return "\n".join(lines)


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Return num / den with 0/0 := 0 and x/0 := inf."""
    safe = num / torch.where(den == 0, 1.0, den)
    return torch.where(den == 0, torch.where(num == 0, 0.0, torch.inf), safe)


def discrepancy(name: str, a: Side, b: Side, reference: torch.Tensor) -> Discrepancy:
    """Score |a - b| against B_a + B_b (see the module docstring).

    Args:
        name: The tensor's name.
        a: The first run.
        b: The second run.
        reference: The exact value (float64), to tell an honest overflow from a failure.

    Returns:
        The `Discrepancy`.
    """
    x = a.value.detach().to(torch.float64)
    y = b.value.detach().to(device=x.device, dtype=torch.float64)
    numel = x.numel()
    if numel == 0:
        return Discrepancy(name, a.label, b.label, True, 0)
    allowed = a.bound + b.bound
    limit = min(torch.finfo(a.value.dtype).max, torch.finfo(b.value.dtype).max)
    representable = reference.abs() + torch.nan_to_num(allowed, posinf=0.0) < limit
    judged = a.verifiable & b.verifiable & representable & torch.isfinite(allowed)
    both = torch.isfinite(x) & torch.isfinite(y)
    mismatch = (torch.isfinite(x) != torch.isfinite(y)) & judged
    err = torch.where(both, (x - y).abs(), 0.0)
    ratio = torch.where(judged, _ratio(err, allowed), 0.0)
    ratio = torch.where(mismatch, torch.inf, ratio)
    flat = int(torch.argmax(ratio))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), x.shape))
    max_ratio = float(ratio.max())
    return Discrepancy(
        name=name,
        a=a.label,
        b=b.label,
        ok=max_ratio <= FAIL_THRESHOLD,
        numel=numel,
        excluded=int((~judged).sum()),
        exceeding=int((ratio > 1).sum()),
        nonfinite=int(mismatch.sum()),
        max_ratio=max_ratio,
        index=index,
        a_value=float(x[index]),
        b_value=float(y[index]),
        allowed=float(allowed[index]),
    )


@dataclass(frozen=True)
class _Outcome:
    """A kernel run with the bounds of its recipe, tensors keyed like `KernelRun.tensors`."""

    label: str
    run: KernelRun
    bounds: dict[str, TensorBound]


def _evaluate(
    kernel: Kernel,
    problem: Problem,
    cotangents: tuple[torch.Tensor, Any] | None,
) -> _Outcome:
    recipe = kernel_recipe(kernel, problem.q.dtype)
    run = run_kernel(kernel, problem, cotangents=cotangents, caller_judges=True)
    exact = with_effective_eps(problem, recipe)
    bounds = dict(forward_bounds(exact, recipe).tensors)
    if cotangents is not None:
        do, d_final = cotangents
        grads = backward_bounds(exact, recipe, do=do, d_final_state=d_final)
        bounds.update({"d" + n: tb for n, tb in grads.items()})
    return _Outcome(kernel.name, run, bounds)


def _scores(diffs: Sequence[Discrepancy]) -> dict[str, float]:
    scores: dict[str, float] = {}
    for d in diffs:
        key = f"{d.name}.max_ratio"
        scores[key] = max(scores.get(key, 0.0), d.max_ratio)
    return scores


def _diff_result(
    prop: str,
    label: str,
    spec: ProblemSpec,
    diffs: Sequence[Discrepancy],
    problem: Problem,
    extra: Sequence[str] = (),
) -> PropertyResult:
    failing = [d for d in diffs if not d.ok]
    worst = max(diffs, key=lambda d: d.max_ratio, default=None)
    if failing:
        message = "\n".join([*(d.message() for d in failing), *extra, problem.describe()])
    elif worst is not None:
        message = f"worst: {worst.name} ratio {worst.max_ratio:.3g} ({worst.a} vs {worst.b})"
    else:
        message = "nothing to compare"
    return make_result(
        prop,
        label,
        spec,
        ok=not failing,
        message=message,
        scores=_scores(diffs),
        worst_index=None if worst is None else worst.index,
    )


def _with_zero_gradients(outcome: _Outcome, problem: Problem) -> dict[str, torch.Tensor]:
    """The run's tensors, a gradient autograd left undefined (`None`) counted as zeros.

    `None` means the kernel's function does not depend on that input, so its derivative is 0;
    comparing the zeros tells how wrong that is.
    """
    named = outcome.run.tensors()
    for key, grad in (outcome.run.grads or {}).items():
        if grad is None and "d" + key in outcome.bounds:
            ref = outcome.bounds["d" + key].reference
            named["d" + key] = torch.zeros_like(ref, dtype=problem.q.dtype)
    return named


def _agreement(
    prop: str, label: str, spec: ProblemSpec, problem: Problem, kernels: Sequence[Kernel]
) -> PropertyResult:
    """Run every kernel (forward, and backward when all can) and compare them pairwise."""
    caps = [k.capabilities for k in kernels]
    if all(c.final_state for c in caps):
        problem = replace(problem, output_final_state=True)
    cotangents = None
    if all(c.backward for c in caps):
        do, d_final = random_cotangents(problem, spec.seed + 1)
        cotangents = (do, d_final if problem.output_final_state else None)
    outcomes = []
    for kernel in kernels:
        try:
            outcomes.append(_evaluate(kernel, problem, cotangents))
        except KernelFailure as exc:
            return make_result(prop, label, spec, ok=False, message=str(exc))
    diffs = []
    for a, b in itertools.combinations(outcomes, 2):
        xs, ys = _with_zero_gradients(a, problem), _with_zero_gradients(b, problem)
        for name in a.bounds:
            if name in xs and name in ys:
                diffs.append(
                    discrepancy(
                        name,
                        side(a.label, xs[name], a.bounds[name]),
                        side(b.label, ys[name], b.bounds[name]),
                        a.bounds[name].reference,
                    )
                )
            elif (name in xs) != (name in ys):
                missing = b.label if name in xs else a.label
                return make_result(
                    prop, label, spec, ok=False, message=f"{missing} returned no {name}"
                )
    return _diff_result(prop, label, spec, diffs, problem)


def forms_agree(spec: ProblemSpec, kernels: Sequence[Kernel]) -> PropertyResult:
    """Check that several kernels (e.g. the three forms) compute the same function.

    For every pair (a, b) of the kernels that support the case, and every element of o, S_T,
    z_T (requested whenever every kernel can return them) and, when every kernel has a backward,
    the gradients of <o, do> + <S_T, dS_T> + <z_T, dz_T> (cotangents from ``spec.seed + 1``):

        |a - b| / (B_a + B_b) <= 2,   B from each kernel's own recipe.

    Scores: ``"<tensor>.max_ratio"``, the largest over pairs.

    Args:
        spec: The case.
        kernels: Two or more kernels.

    Returns:
        The `PropertyResult` (kernel: the names joined by ``+``; skipped when fewer than two
        kernels support the case).

    Raises:
        InvalidArgument: fewer than two kernels were given.
    """
    name = "forms_agree"
    if len(kernels) < 2:
        raise InvalidArgument(f"Expected at least two kernels but got {len(kernels)}.")
    label = "+".join(k.name for k in kernels)
    problem = kernels[0].prepare(spec.build())
    reasons = [r for r in (k.supports(problem) for k in kernels) if r is not None]
    chosen = [k for k in kernels if k.supports(problem) is None]
    if len(chosen) < 2:
        return make_result(name, label, spec, skipped="; ".join(reasons))
    return _agreement(name, label, spec, problem, chosen)


def chunk_size_invariant(
    spec: ProblemSpec, kernel: Kernel, *, chunk_sizes: tuple[int, int] | None = None
) -> PropertyResult:
    """Check that a chunked kernel's result does not depend on its chunk size beyond rounding.

    With the kernel run at chunk sizes C1 != C2 (``chunk_size=`` option; each run's bound uses
    its own C), for o, S_T, z_T and the gradients, as in `forms_agree`:

        |x(C1) - x(C2)| / (B(C1) + B(C2)) <= 2.

    Args:
        spec: The case.
        kernel: The kernel under test; it must declare ``capabilities.chunk_sizes``.
        chunk_sizes: The two sizes. Default: `None`: the smallest declared size (the most
            chunks, hence the most chunk boundaries in a short case) and another declared size
            chosen by ``spec.seed``.

    Returns:
        The `PropertyResult` (skipped when the kernel declares fewer than two chunk sizes or
        does not support the case).
    """
    name = "chunk_size_invariant"
    declared = sorted(kernel.capabilities.chunk_sizes)
    if len(declared) < 2:
        return make_result(
            name, kernel.name, spec, skipped=f"{kernel.name}: fewer than two chunk sizes declared"
        )
    if chunk_sizes is None:
        chunk_sizes = (declared[0], random.Random(spec.seed).choice(declared[1:]))
    bad = [c for c in chunk_sizes if c not in declared]
    if bad or chunk_sizes[0] == chunk_sizes[1]:
        raise InvalidArgument(
            f"Got chunk_sizes={chunk_sizes}, but they must be two different sizes among "
            f"{tuple(declared)}."
        )
    problem = kernel.prepare(spec.build())
    reason = kernel.supports(problem)
    if reason is not None:
        return make_result(name, kernel.name, spec, skipped=reason)
    variants = [kernel.with_options(f"{kernel.name}[C={c}]", chunk_size=c) for c in chunk_sizes]
    return _agreement(name, kernel.name, spec, problem, variants)


def _state_arg(state: Any) -> Any:
    return state if state is None or isinstance(state, torch.Tensor) else tuple(state)


def _subproblem(problem: Problem, start: int, end: int, initial_state: Any) -> Problem:
    """Tokens [start, end) of a dense problem as a problem of its own (contiguous copies)."""

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
        initial_state=_state_arg(initial_state),
        output_final_state=True,
    )


def _carried_state_error(
    problem: Problem, s: int, fb_whole: dict[str, TensorBound], e_S: torch.Tensor, e_z: Any
) -> dict[str, torch.Tensor]:
    """Bound the exact effect, on o[s:], S_T and z_T, of a state error |E_S| <= e_S, |E_z| <= e_z.

    With w_t = exp(G_t - G_s) (the decay from s to t) the state error enters linearly:
    ΔN_t = s w_t φ(q_t)^T E_S, ΔZ_t = s w_t φ(q_t)·E_z, ΔS_T = w_T E_S, Δz_T = w_T E_z, so

        |ΔN_t| <= A_t = |s| w_t |φ(q_t)|^T e_S        |ΔZ_t| <= C_t = |s| w_t |φ(q_t)|·e_z
        unnormalized  |Δo_t| <= A_t
        normalized    |Δo_t| = |ΔN_t - o_t ΔZ_t| / |Z_t + ΔZ_t| <= (A_t + |o_t| C_t) / (|Z_t| - C_t)

    with o_t, Z_t the exact whole-run values (inf, i.e. unverifiable, where C_t >= |Z_t| > 0).
    """
    p = problem.to(torch.float64)
    phi_q = apply_feature_map(p.q[:, s:], p.feature_map).abs()  # [B, L, H, K]
    if p.g is None:
        w = torch.ones(phi_q.shape[:3], dtype=torch.float64)
    else:
        w = torch.exp(torch.cumsum(p.g[:, s:], dim=1))  # [B, L, H]
    coeff = abs(p.scale) * w
    A = coeff[..., None] * torch.einsum("blhk,bhkv->blhv", phi_q, e_S)
    carried = {"final_state": w[:, -1, :, None, None] * e_S}
    if not p.normalize:
        carried["o"] = A
        return carried
    C = coeff * torch.einsum("blhk,bhk->blh", phi_q, e_z)
    tb = fb_whole["o"]
    assert tb.residual is not None
    Z = tb.residual.denominator[:, s:, :, 0].abs()
    o = tb.reference[:, s:].abs()
    room = (Z - C)[..., None]
    carried["o"] = torch.where(room > 0, _ratio(A + o * C[..., None], room), torch.inf)
    carried["o"] = torch.where((Z == 0)[..., None] & (A == 0), 0.0, carried["o"])
    carried["final_key_sum"] = w[:, -1, :, None] * e_z
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
        single=tb.single[:, s:],
        verifiable=tb.verifiable[:, s:],
    )


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

    Scores: ``"split.<tensor>.max_r"`` against the oracle, ``"<tensor>.max_ratio"`` against the
    whole run.

    Args:
        spec: The case (dense: varlen cases are skipped).
        kernel: The kernel under test.
        split: s in [1, T-1]. Default: `None`: drawn from ``spec.seed``.

    Returns:
        The `PropertyResult` (skipped for T < 2, varlen cases, or a kernel without initial- or
        final-state support).
    """
    name = "state_split_composes"
    cap = kernel.capabilities
    if spec.T < 2 or spec.segments is not None:
        why = "T < 2: nothing to split" if spec.T < 2 else "varlen case (see varlen property)"
        return make_result(name, kernel.name, spec, skipped=why)
    if not (cap.initial_state and cap.final_state):
        return make_result(
            name, kernel.name, spec, skipped=f"{kernel.name}: needs initial and final state"
        )
    s = 1 + random.Random(spec.seed).randrange(spec.T - 1) if split is None else split
    if not 1 <= s < spec.T:
        raise InvalidArgument(
            f"Got split={split}, but split must be in [1, T-1] = [1, {spec.T - 1}]."
        )
    whole = replace(kernel.prepare(spec.build()), output_final_state=True)
    reason = kernel.supports(whole)
    if reason is not None:
        return make_result(name, kernel.name, spec, skipped=reason)
    recipe = kernel_recipe(kernel, whole.q.dtype)
    initial = (
        None
        if whole.initial_state is None
        else (whole.initial_state, whole.initial_key_sum)
        if whole.normalize
        else whole.initial_state
    )
    first = _subproblem(whole, 0, s, initial)
    try:
        run_whole = run_kernel(kernel, whole, caller_judges=True)
        run_first = run_kernel(kernel, first, caller_judges=True)
        try:
            second = _subproblem(whole, s, spec.T, run_first.final_state)
        except InvalidArgument as exc:
            raise KernelFailure(
                f"{kernel.name}'s final state at s={s} is not a valid initial state: {exc}"
            ) from None
        run_second = run_kernel(kernel, second, caller_judges=True)
    except KernelFailure as exc:
        return make_result(name, kernel.name, spec, ok=False, message=str(exc))
    fb_whole = forward_bounds(with_effective_eps(whole, recipe), recipe).tensors
    fb_first = forward_bounds(with_effective_eps(first, recipe), recipe).tensors
    fb_second = forward_bounds(with_effective_eps(second, recipe), recipe).tensors
    e_z = fb_first["final_key_sum"].bound if whole.normalize else None
    carried = _carried_state_error(whole, s, fb_whole, fb_first["final_state"].bound, e_z)
    label = f"{kernel.name} split at s={s}"
    firsts, seconds, wholes = run_first.tensors(), run_second.tensors(), run_whole.tensors()

    # Against the oracle: (score key, comparison) per checked piece.
    checks: list[tuple[str, Comparison]] = [
        ("split.o.max_r", compare(firsts["o"], replace(fb_first["o"], name=f"o[:{s}]")))
    ]
    # Against the whole run: the split's value, bound and verifiable mask per tensor.
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
            )
        else:
            exact = replace(fb_whole[key], name=key)
            at_s = replace(fb_first[key], name=f"{key} at s={s}")
            checks.append((f"split.{key}_at_s.max_r", compare(firsts[key], at_s)))
            split_sides[key] = Side(label, seconds[key], bound, verifiable)
        derived = replace(
            exact,
            bound=bound,
            magnitude=tb_second.magnitude,
            single=tb_second.single,
            verifiable=verifiable,
        )
        checks.append((f"split.{key}.max_r", compare(seconds[key], derived)))
    diffs = [
        discrepancy(
            key,
            split_side,
            side(f"{kernel.name} whole run", wholes[key], fb_whole[key]),
            fb_whole[key].reference,
        )
        for key, split_side in split_sides.items()
    ]
    scores = _scores(diffs)
    for key, c in checks:
        scores[key] = max(scores.get(key, 0.0), c.max_r, c.max_eta or 0.0)
    failing = [c.message(label) for _, c in checks if not c.ok]
    result = _diff_result(name, kernel.name, spec, diffs, whole, extra=failing)
    if not failing:
        return replace(result, scores=scores)
    if result.ok:
        return replace(
            result, ok=False, scores=scores, message="\n".join([*failing, whole.describe()])
        )
    return replace(result, scores=scores)


def _packed(problem: Problem) -> Problem:
    """The dense batch rows of ``problem`` packed end to end into one varlen problem."""
    B, T = problem.shape[:2]

    def pack(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(1, B * T, *x.shape[2:]).contiguous()

    initial: Any = problem.initial_state
    if problem.normalize and initial is not None:
        initial = (problem.initial_state, problem.initial_key_sum)
    return validate_problem(
        pack(problem.q),
        pack(problem.k),
        pack(problem.v),
        None if problem.g is None else pack(problem.g),
        scale=problem.scale,
        normalize=problem.normalize,
        eps=problem.eps,
        feature_map=problem.feature_map,
        initial_state=initial,
        output_final_state=True,
        cu_seqlens=torch.arange(B + 1) * T,
    )


def _initial_row(problem: Problem, n: int) -> Any:
    """Sequence n's initial state as a one-row state argument (or `None`)."""
    if problem.initial_state is None:
        return None
    S0 = problem.initial_state[n : n + 1]
    if problem.normalize:
        assert problem.initial_key_sum is not None
        return (S0, problem.initial_key_sum[n : n + 1])
    return S0


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
        The `PropertyResult` (skipped without varlen or final-state support).
    """
    name = "varlen_matches_separate_runs"
    if not kernel.capabilities.varlen:
        return make_result(name, kernel.name, spec, skipped=f"{kernel.name}: no varlen support")
    if not kernel.capabilities.final_state:
        return make_result(name, kernel.name, spec, skipped=f"{kernel.name}: no final state")
    problem = kernel.prepare(spec.build())
    notes = []
    if problem.cu_seqlens is None:
        problem = _packed(problem)
        notes.append(f"packed from the dense batch rows: {problem.describe()}")
    else:
        problem = replace(problem, output_final_state=True)
    reason = kernel.supports(problem)
    if reason is not None:
        return make_result(name, kernel.name, spec, skipped=reason)
    recipe = kernel_recipe(kernel, problem.q.dtype)
    segments = [(n, start, end) for n, _, start, end in problem.sequences()]
    try:
        packed = run_kernel(kernel, problem, caller_judges=True)
        separate = {
            n: (sub, run_kernel(kernel, sub, caller_judges=True))
            for n, start, end in segments
            if end > start
            for sub in [_subproblem(problem, start, end, _initial_row(problem, n))]
        }
    except KernelFailure as exc:
        return make_result(name, kernel.name, spec, ok=False, message=str(exc))
    fb_packed = forward_bounds(with_effective_eps(problem, recipe), recipe).tensors
    pieces: dict[str, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
    for n, _, _ in segments:
        if n in separate:
            sub, run = separate[n]
            bounds = forward_bounds(with_effective_eps(sub, recipe), recipe).tensors
            values = run.tensors()
            for key, tb in bounds.items():
                pieces.setdefault(key, []).append((values[key], tb.bound, tb.verifiable))
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
            pieces.setdefault(key, []).append((value, zero, torch.ones_like(ref, dtype=torch.bool)))
    diffs = []
    values = packed.tensors()
    for key in [k for k in fb_packed if k in pieces]:
        parts = pieces[key]
        dim = 1 if key == "o" else 0
        sep = Side(
            "separate runs",
            torch.cat([p[0].to(parts[0][0].dtype) for p in parts], dim=dim),
            torch.cat([p[1] for p in parts], dim=dim),
            torch.cat([p[2] for p in parts], dim=dim),
        )
        diffs.append(
            discrepancy(
                key,
                side(f"{kernel.name} packed", values[key], fb_packed[key]),
                sep,
                fb_packed[key].reference,
            )
        )
    return _diff_result(name, kernel.name, spec, diffs, problem, extra=notes)


__all__ = [
    "Discrepancy",
    "Side",
    "chunk_size_invariant",
    "discrepancy",
    "forms_agree",
    "side",
    "state_split_composes",
    "varlen_matches_separate_runs",
]
