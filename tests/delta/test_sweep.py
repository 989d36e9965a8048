# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The blocked sweep of the exact recurrence and the reference gradients built on it (#27).

`linattn_verify.delta.sweep` forms the states a block at a time and the adjoints backward from
checkpoints; `reference_gradients` reads the gradients off them. They must equal what they
replace: the token-by-token oracle `delta_recurrent` (states and outputs) and float64 autograd
through it (every gradient), over the whole case space (gate shapes, in-kernel L2 norm, initial
and final states, varlen with empty sequences, negative eigenvalues), with blocks of a few
tokens so that every block boundary and the checkpoints are crossed. Equal means within 1e-12
of the tensor's largest magnitude: the two evaluate the same sums in other orders.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.delta import sweep
from linattn_verify.delta.gradient_assembly import reference_gradients
from linattn_verify.delta.problem import L2NORM_EPS, DeltaProblem
from linattn_verify.delta.reference import delta_recurrent, sequence_groups, sequence_inputs
from linattn_verify.delta.strategies import DeltaCase, delta_cases, random_delta_cotangents

RELATIVE = 1e-12


def _autograd_gradients(
    problem: DeltaProblem, do: torch.Tensor, dS: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """Float64 autograd of <o, do> + <S_T, dS_T> through the token-by-token oracle."""
    p = problem.to(torch.float64)
    leaves = {n: x.detach().clone().requires_grad_(True) for n, x in p.inputs().items()}
    p = replace(p, **leaves)  # type: ignore[arg-type]
    with torch.enable_grad():
        o, S_T = delta_recurrent(p)
        loss = (o * do.to(torch.float64)).sum()
        if S_T is not None and dS is not None:
            loss = loss + (S_T * dS.to(torch.float64)).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {
        n: torch.zeros_like(x) if g is None else g
        for (n, x), g in zip(leaves.items(), grads, strict=True)
    }


def _chain_magnitudes(
    problem: DeltaProblem, do: torch.Tensor, dS: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """|J| |dx̂| for q and k under the in-kernel L2 norm: the terms dx's chain cancels.

    dx = (dx̂ - x̂ (x̂·dx̂)) / r loses everything but its rounding where x̂ is nearly parallel
    to dx̂ (K = 1 always): both evaluations then err by u times these terms, not by u |dx|.
    """
    if not problem.l2norm_qk:
        return {}
    p = problem.to(torch.float64)
    r = {
        n: torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)
        for n, x in (("q", p.q), ("k", p.k))
    }
    unit = replace(p, q=p.q / r["q"], k=p.k / r["k"], l2norm_qk=False)
    d_unit = _autograd_gradients(unit, do, dS)
    out = {}
    for name in ("q", "k"):
        x = getattr(unit, name).abs()
        dx = d_unit[name].abs()
        out[name] = (dx + x * (x * dx).sum(-1, keepdim=True)) / r[name]
    return out


def _initial_state_terms(
    problem: DeltaProblem, do: torch.Tensor, dS: torch.Tensor | None
) -> torch.Tensor:
    """The magnitude of dS_0's terms: the adjoint recurrence on absolute values.

    M_L = |dS_L| + |s q_L| |do_L|^T, M_{t-1} = D_t (M_t + β_t |k_t| (|k_t|^T M_t)) +
    |s q_{t-1}| |do_{t-1}|^T: Λ'_t = Λ_t - β k (k^T Λ_t) cancels where β ||k||² = 1, and both
    evaluations then err by u times these terms.
    """
    p = problem.to(torch.float64)
    out = []
    for n, b, start, end in p.sequences():
        seq = sequence_inputs(p, n, b, start, end)
        do_n = do[b, start:end].transpose(0, 1).to(torch.float64).abs()
        M = torch.zeros_like(seq.S0)
        if dS is not None and p.output_final_state:
            M = dS[n].to(torch.float64).abs()
        q = (p.scale * seq.q).abs()
        d = sweep.decay_factors(seq)
        for t in reversed(range(end - start)):
            M = M + q[:, t, :, None] * do_n[:, t, None, :]
            k = seq.k[:, t].abs()
            M = M + seq.beta[:, t, None, None] * k[..., None] * (k[..., None] * M).sum(
                1, keepdim=True
            )
            M = M if d is None else d[:, t] * M
        out.append(M)
    return torch.stack(out)


def _assert_close(
    name: str, got: torch.Tensor, want: torch.Tensor, terms: torch.Tensor | None = None
) -> None:
    assert got.shape == want.shape, name
    scale = float(want.abs().max()) if want.numel() else 0.0
    if terms is not None and terms.numel():
        scale = max(scale, float(terms.max()))
    worst = float((got - want).abs().max()) if want.numel() else 0.0
    assert worst <= RELATIVE * scale + 1e-300, f"{name}: {worst:.3g} of {scale:.3g}"


@settings(max_examples=40, deadline=None)
@given(case=delta_cases(max_seq_len=23, max_head_dim=6), block=st.integers(1, 5))
def test_reference_gradients_equal_autograd_through_the_oracle(case: DeltaCase, block: int) -> None:
    problem = case.build()
    do, dS = random_delta_cotangents(problem, case.seed)
    want = _autograd_gradients(problem, do, dS)
    _, _, H, K, V = problem.shape
    # Blocks of `block` tokens (a group stacks at most 2 sequences here: 2 H heads).
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sweep, "BLOCK_ELEMENTS", block * H * K * V)
        m.setattr("linattn_verify.delta.reference.GROUP_ELEMENTS", {"cpu": 2 * H * K * V})
        got = reference_gradients(problem, do, dS)
    assert got.keys() == want.keys()
    terms = _chain_magnitudes(problem, do, dS)
    if "initial_state" in want:
        terms["initial_state"] = _initial_state_terms(problem, do, dS)
    for name in want:
        _assert_close(name, got[name], want[name], terms.get(name))


@settings(max_examples=25, deadline=None)
@given(case=delta_cases(max_seq_len=23, max_head_dim=6), block=st.integers(1, 5))
def test_forward_blocks_are_the_oracles_states(case: DeltaCase, block: int) -> None:
    p = case.build().to(torch.float64)
    for _, seq in sequence_groups(p):
        L = seq.q.shape[1]
        S, states, starts = seq.S0, [], []
        for blk in sweep.forward_blocks(seq, block):
            starts.append(blk.start)
            _assert_close("S_prev", blk.S_prev[:, 0], S)
            S = blk.S[:, -1]
            states.append(blk.S)
        assert starts == list(range(0, L, block))
        if not L:
            continue
        # Replay the recurrence the oracle's way, token by token.
        d = sweep.decay_factors(seq)
        S_t = seq.S0
        every = torch.cat(states, 1)
        for t in range(L):
            Sp = S_t if d is None else d[:, t] * S_t
            u = seq.beta[:, t, None] * (seq.v[:, t] - (seq.k[:, t, :, None] * Sp).sum(1))
            S_t = Sp + seq.k[:, t, :, None] * u[:, None, :]
            _assert_close(f"S_{t}", every[:, t], S_t)


def test_an_empty_sequence_passes_its_final_cotangent_to_the_initial_state() -> None:
    case = DeltaCase(
        B=1, T=9, H=2, K=3, V=4, dtype="float32", gate="vector", gate_family="logsigmoid",
        beta_family="sigmoid", key_family="unit", value_family="unit", l2norm_qk=True,
        negative_eigenvalues=False, initial_state=True, output_final_state=True,
        seq_lens=(4, 0, 5), scale=None, seed=3,
    )  # fmt: skip
    problem = case.build()
    do, dS = random_delta_cotangents(problem, case.seed)
    assert dS is not None
    got = reference_gradients(problem, do, dS)
    # S_T = S_0 for an empty sequence: its initial state's gradient is dS_T itself.
    assert torch.equal(got["initial_state"][1], dS[1].to(torch.float64))
    want = _autograd_gradients(problem, do, dS)
    for name in want:
        _assert_close(name, got[name], want[name])
