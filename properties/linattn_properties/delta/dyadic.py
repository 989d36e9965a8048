# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Exactness of the delta rule on dyadic inputs: the kernel must return o and S_T bit for bit.

A tolerance property cannot see an error smaller than its bound: a 16-bit output store that
truncates instead of rounding to nearest is off by less than one unit in the last place (r about
2 at most). This property picks inputs on which the whole delta rule is exact in fp32 under any
evaluation order of either form, so a correct kernel's only rounding is the output's own, once,
to nearest; one ulp off anywhere is a failure.

The inputs (`dyadic_delta_problem`), per token: no decay (g absent, or g = 0: exp(0) = 1
exactly), beta = 1, no in-kernel L2 norm (x / sqrt(1 + 1e-6) is not x in fp32), keys that are
standard basis vectors e_i or 0, q = a·2^{e_q} and v = b·2^{e_v}, S_0 = c·2^{e_v} with integers
|a| <= Q, |b|, |c| <= R, and a power-of-two scale s = 2^{e_s}. Why every intermediate is exact,
with "n units" meaning an integer n times the value's power of two:

* Token recurrence. S'^T k_t with k_t = e_i reads row i of S (one non-zero product; adding
  exact zeros is exact). Row i of every state is some v_j or a row of S_0 (below), so the
  correction e = v_t - S'^T k_t is a difference of two R-unit integers: |e| <= 2R units. beta e
  = e, S + k_t e^T changes row i only, to S_i + (v_t - S_i) = v_t exactly. o_t = s Σ_i q_ti
  S_t[i] sums K products of at most Q·R units (or, written as s(S_{t-1}^T q_t + (q_t·k_t) e),
  K + 2 of them).
* Chunk form (C tokens). A = strict_tril(K K^T) has entries k_i·k_j in {0, 1} (1 where two
  tokens share a basis key). Per key, L = I + A restricted to the tokens of that key is the
  all-ones lower-triangular matrix, whose inverse is 1 on the diagonal and -1 just below it:
  T = L^-1 has entries in {-1, 0, 1}. A blocked inverse multiplies blocks A_IJ T_JJ (a sum of
  one key's rows of T_JJ, which telescopes to an indicator: entries in {0, 1}) and T_II by
  those; its partial sums stay below C² units. W = T K has rows e_i (the first token of key i in
  the chunk) or 0; U = T V has rows v_t - v_{t'} (t' the previous token of the same key in the
  chunk, or v_t): |U| <= 2R units; Vn = U - W S = v_t - S_i or U: |Vn| <= 2R units. The state
  update S + K^T Vn telescopes per key to the last value written (partial sums <= (2C + 1)R).
  o = s(Q S + tril(Q K^T) Vn) sums K + C products of at most 2QR units.

So every value a kernel may *store* or feed to a dot (q, k, v, S_0, beta, A, T, W, U, Vn, the
states, the scores s q·k_j, q and k times e^0) is an integer below 2R + 1 <= 2^p units, and
every fp32 sum has partial sums below Q·R·(K + 2C + 2) < 2^a units in any order, where p is
the significand width of the narrowest format the kernel's recipe stores into or feeds a dot
(`storage_bits`: 24 for fp32, 11 for fp16 and tf32 dot operands, 8 for bf16) and a that of its
accumulation (24 IEEE, 23 tensor-core, 53 float64). R = min(255, 2^{p-1} - 1) and Q = 15 (both
shrunk until the sums fit) make every term exact; o* (the float64 oracle, exact here, since
53 >= a) is then what fp32 holds before the output store, and o must be o* rounded once to the
output dtype, S_T must be S_T* (a row of v or S_0: exact in any format holding v).

The exponents are drawn from the case's seed with e_s lowered until |o| stays below half the
output dtype's largest value. With Q·R up to 3825, o needs up to 12 + log2(K + C) significant
bits, more than bf16's 8 or fp16's 11: a store that truncates differs from round-to-nearest in
about half of the elements whose exact value falls between two 16-bit numbers.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any

import torch

from linattn_properties._support import property_function
from linattn_properties.delta._support import run, verdict
from linattn_verify.compare import compare_bitwise
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.core.sizes import dyadic_scale_exponent
from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem, validate_delta
from linattn_verify.delta.reference import delta_chunked, delta_recurrent
from linattn_verify.results import PropertyResult
from linattn_verify.typing import dtype_name, torch_dtype

QUERY_RANGE = 15
"""Q: the largest |integer| of q, in units of 2^{e_q}."""

VALUE_RANGE = 255
"""R's ceiling: the largest |integer| of v and S_0, in units of 2^{e_v}."""

ZERO_KEY_SHARE = 0.125
"""The share of tokens given the key 0 (no write), beside basis keys."""


def _bits(unit: float) -> int:
    return round(-math.log2(unit))


def storage_bits(recipe: DeltaRecipe, dtype: torch.dtype) -> int:
    """Return p: integers below 2^p units survive every storage and dot operand of ``recipe``.

    The narrowest of: the arithmetic (24 bits, 53 for a float64 recipe), the input dtype (the
    values are stored in it), every storage the recipe names (T, W, U, Vn, the casts on the path,
    the chunk-boundary state), and tf32 dot operands (11 bits) where the recipe declares them.
    """
    bits = min(_bits(UNIT_ROUNDOFF[dtype_name(dtype)]), _bits(recipe.u(dtype)))
    for name in ("inverse_dtype", "intermediate_dtype", "state_dtype"):
        unit = recipe.u_storage(name, dtype)
        if unit:
            bits = min(bits, _bits(unit))
    return min(bits, 11) if recipe.tf32 else bits


def accumulation_bits(recipe: DeltaRecipe, dtype: torch.dtype) -> int:
    """Return a: sums whose partial sums stay below 2^a units are exact in ``recipe``'s adds.

    With ``accumulation="input"`` (sums, or dot results, rounded to the input dtype: o =
    RN(Q S) + RN(A Vn) in a kernel that never upcasts) a is the input dtype's width.
    """
    return _bits(recipe.u_acc(dtype))


@dataclass(frozen=True)
class DyadicGrid:
    """The integer ranges and powers of two of a dyadic problem, and the widths they respect.

    Attributes:
        q_range: Q, the largest |integer| of q (units 2^e_q).
        v_range: R, the largest |integer| of v and S_0 (units 2^e_v).
        e_q, e_v, e_s: The exponents of q's and v's units and of the scale.
        p: `storage_bits` of the kernel's recipe.
        a: `accumulation_bits` of the kernel's recipe.
        chunk: The C the sums were bounded with (the recipe's chunk size).
    """

    q_range: int
    v_range: int
    e_q: int
    e_v: int
    e_s: int
    p: int
    a: int
    chunk: int

    def describe(self) -> str:
        """One line: the ranges, units and widths."""
        return (
            f"q = a·2^{self.e_q} (|a| <= {self.q_range}), v, S_0 = b·2^{self.e_v} "
            f"(|b| <= {self.v_range}), s = 2^{self.e_s}, basis keys, beta = 1, g = 0; "
            f"stored values < 2^{self.p} units, sums < 2^{self.a} units (C = {self.chunk})"
        )


def _sum_bound(q_range: int, v_range: int, K: int, chunk: int) -> int:
    """The largest absolute partial sum of any output term, in units (module docstring)."""
    return q_range * v_range * (K + 2 * chunk + 2)


def dyadic_grid(kernel: DeltaKernel, dtype: torch.dtype, K: int, seed: int) -> DyadicGrid | str:
    """Return the ranges and exponents on which ``kernel`` must be exact, or why there are none."""
    recipe = kernel.precision_recipe(dtype)
    # o* below 2^24 units is an fp32 number, so o*.float() rounds nothing before the output's
    # own rounding (a float64 recipe's wider sums would make that a double rounding).
    p, a = storage_bits(recipe, dtype), min(accumulation_bits(recipe, dtype), 24)
    chunk = recipe.chunk_size
    q_range = min(QUERY_RANGE, 2**p - 1)
    v_range = min(VALUE_RANGE, 2 ** (p - 1) - 1)
    while v_range >= 1 and (
        _sum_bound(q_range, v_range, K, chunk) >= 2**a or chunk * chunk >= 2**a
    ):
        v_range //= 2
    if v_range < 1:
        return f"no dyadic input keeps every sum below 2^{a} units (K={K}, C={chunk})"
    rng = random.Random(seed ^ 0xDE17A)
    e_q, e_v = rng.randint(-2, 1), rng.randint(-2, 1)
    # |o| < bound · 2^{e_s + e_q + e_v} must stay below half the output's largest value.
    top = math.floor(math.log2(torch.finfo(dtype).max)) - 1
    highest = top - math.ceil(math.log2(_sum_bound(q_range, v_range, K, chunk))) - e_q - e_v
    e_s = min(rng.randint(-2, 0), highest)
    fixed = dyadic_scale_exponent(kernel.capabilities.scales, K)
    if isinstance(fixed, str):
        return f"{kernel.name}: {fixed}"
    if fixed is not None:
        # A kernel that applies its own scale: the grid takes that scale.
        if fixed > highest:
            return f"{kernel.name}: its fixed scale 2^{fixed} would overflow the output"
        e_s = fixed
    return DyadicGrid(q_range, v_range, e_q, e_v, e_s, p, a, chunk)


def _gate(case: Any, kernel: DeltaKernel, shape: tuple[int, ...]) -> torch.Tensor | None:
    """Return g = 0 of the case's gate shape if declared, else None or the first declared one."""
    gates = kernel.capabilities.gates
    wanted = getattr(case, "gate", "none")
    pick = wanted if wanted in gates else ("none" if "none" in gates else gates[0])
    if pick == "none":
        return None
    return torch.zeros(shape if pick == "vector" else shape[:3])


def dyadic_delta_problem(case: Any, kernel: DeltaKernel) -> tuple[DeltaProblem, DyadicGrid] | str:
    """Build the case's shapes with dyadic inputs on which ``kernel`` must be exact.

    Keeps the case's B, T, H, K, V, dtype, packing, gate shape (as g = 0) and initial state;
    replaces every value (module docstring). Returns why not where no such problem exists for
    the kernel's recipe or capabilities.
    """
    if False not in kernel.capabilities.l2norm_qk:
        return f"{kernel.name}: always L2-normalises q, k in the kernel (not exact in fp32)"
    dtype = torch_dtype(case.dtype)
    B, T, H, K, V = case.B, case.T, case.H, case.K, case.V
    grid = dyadic_grid(kernel, dtype, K, case.seed)
    if isinstance(grid, str):
        return grid
    gen = torch.Generator().manual_seed(case.seed ^ 0xD1AD)
    # Few distinct keys per head make repeated keys (the interesting T) common in a chunk.
    distinct = int(torch.randint(1, K + 1, (1,), generator=gen))
    index = torch.randint(0, distinct, (B, T, H), generator=gen)
    k = torch.nn.functional.one_hot(index, K).to(torch.float64)
    k = k * (torch.rand(B, T, H, 1, generator=gen) >= ZERO_KEY_SHARE)

    def ints(limit: int, *shape: int) -> torch.Tensor:
        return torch.randint(-limit, limit + 1, shape, generator=gen).to(torch.float64)

    q = ints(grid.q_range, B, T, H, K) * 2.0**grid.e_q
    v = ints(grid.v_range, B, T, H, V) * 2.0**grid.e_v
    seq_lens = getattr(case, "seq_lens", None)
    N = B if seq_lens is None else len(seq_lens)
    cap = kernel.capabilities
    S0 = None
    if getattr(case, "initial_state", False) and cap.initial_state:
        S0 = (ints(grid.v_range, N, H, K, V) * 2.0**grid.e_v).float()
    cu = None if seq_lens is None else torch.tensor([0, *seq_lens], dtype=torch.int64).cumsum(0)
    g = _gate(case, kernel, (B, T, H, K))
    problem = validate_delta(
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        torch.ones(B, T, H, dtype=dtype),
        g,
        scale=2.0**grid.e_s,
        l2norm_qk=False,
        initial_state=S0,
        output_final_state=cap.final_state,
        cu_seqlens=cu,
    )
    return problem, grid


def exact_outputs(problem: DeltaProblem, chunk: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return the float64 oracle's (o, S_T), checked exact: two evaluation orders agree bitwise.

    On a dyadic problem every float64 operation is exact (53 bits hold every sum), so the token
    recurrence and the chunk form must agree bit for bit; a difference would mean the problem is
    not what the module docstring says, and nothing could be judged bitwise against it.
    """
    o, S = delta_recurrent(problem)
    o_c, S_c = delta_chunked(problem, chunk_size=chunk)
    same = torch.equal(o, o_c) and (S is None or (S_c is not None and torch.equal(S, S_c)))
    if not same:
        raise AssertionError(f"the float64 oracle is not exact on {problem.describe()}")
    return o, S


@property_function
def dyadic_inputs_exact(case: Any, kernel: DeltaKernel) -> PropertyResult:
    """Check that a kernel is exact where the delta rule is: o and S_T bit for bit.

    On the case's shapes with dyadic inputs (`dyadic_delta_problem`: basis keys, beta = 1, g = 0,
    q and v small integers times powers of two, a power-of-two scale; every stored value and
    every partial sum exact for the kernel's recipe, module docstring) and o*, S_T* the exact
    results:

        ô ≡ RN_out(o*)        Ŝ_T ≡ S_T*

    (≡: bit-identical; RN_out: rounding to nearest in the output dtype, once). Not applicable
    where the kernel only L2-normalises in the kernel, or its recipe leaves no exact input.
    """
    prop = "dyadic_inputs_exact"
    built = dyadic_delta_problem(case, kernel)
    if isinstance(built, str):
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=built)
    problem, grid = built
    reason = kernel.supports(problem) or kernel.contract(problem)
    if reason is not None:
        return PropertyResult(prop, kernel.name, case.describe(), "not_applicable", reason=reason)
    result = run(kernel, problem)
    o_exact, S_exact = exact_outputs(problem, grid.chunk)
    condition = "to the exact result rounded once to nearest (dyadic inputs, every sum exact)"
    # o* < 2^24 units is an fp32 number: converting through fp32 rounds once, to nearest.
    comparisons = [
        compare_bitwise(
            "o",
            result.o,
            o_exact.float().to(result.o.dtype),
            subject=kernel.name,
            condition=condition,
        )
    ]
    if result.final_state is not None and S_exact is not None:
        comparisons.append(
            compare_bitwise(
                "final_state",
                result.final_state,
                S_exact.to(result.final_state.dtype),
                subject=kernel.name,
                condition=condition,
            )
        )
    judged = verdict(prop, kernel, case, comparisons)
    return replace(judged, notes=(*judged.notes, grid.describe(), problem.describe()))


__all__ = [
    "DyadicGrid",
    "accumulation_bits",
    "dyadic_delta_problem",
    "dyadic_grid",
    "dyadic_inputs_exact",
    "exact_outputs",
    "storage_bits",
]
