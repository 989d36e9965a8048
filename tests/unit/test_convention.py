# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Declared conventions: layouts moved at the call, o alone, eps inside the dot, T >= H.

The tests here pin what each declaration means; that correct kernels written in these
conventions hold and broken ones fail is tested end to end by the corpus
(tests/corpus: ``heads_first_vk``, ``performer_pytorch``) and tests/zoo/test_convention_zoo.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.cli import EXIT_USAGE, main
from linattn_verify.core.convention import check_layouts, result_out, state_in, tokens_in
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Capabilities, Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem
from linattn_verify.linear_attn.strategies import ProblemSpec, kernel_specs, problem_specs
from linattn_verify.linear_attn.tolerance import as_kernel_sees, forward_bounds


def test_heads_first_tokens_go_in_contiguous_and_come_back_token_major() -> None:
    x = torch.randn(2, 5, 3, 4)
    moved = tokens_in(x, "heads-first")
    assert moved.shape == (2, 3, 5, 4)
    assert moved.is_contiguous()
    assert torch.equal(moved.transpose(1, 2), x)
    strided = torch.randn(2, 5, 3, 8)[..., ::2]  # the layout property's views stay views
    assert not tokens_in(strided, "heads-first").is_contiguous()
    assert tokens_in(x, "token-major") is x
    o = torch.randn(2, 3, 5, 6)
    back, final = result_out((o, None), "heads-first", "kv", final_state_asked=False)
    assert back.shape == (2, 5, 3, 6)
    assert torch.equal(back, o.transpose(1, 2))
    assert final is None


def test_a_value_major_state_is_transposed_both_ways_and_z_is_left_alone() -> None:
    S, z = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4)
    S_in, z_in = state_in((S, z), "vk")
    assert S_in.shape == (2, 3, 5, 4)
    assert z_in is z
    _, (S_out, z_out) = result_out((None, (S_in, z)), "token-major", "vk", final_state_asked=True)
    assert torch.equal(S_out, S)
    assert z_out is z
    assert state_in(None, "vk") is None


def test_o_alone_is_accepted_only_where_no_final_state_was_asked_for() -> None:
    o = torch.randn(1, 2, 1, 3)
    assert result_out(o, "token-major", "kv", final_state_asked=False)[1] is None
    assert result_out(o, "token-major", "kv", final_state_asked=True) is o  # validation names it


def test_unknown_layouts_name_the_argument() -> None:
    with pytest.raises(InvalidArgument, match="layout='bhtd'"):
        check_layouts("bhtd", "kv")
    with pytest.raises(InvalidArgument, match="state_layout"):
        Capabilities(state_layout="kvz")  # type: ignore[arg-type]


def _in_dot_reference(q, k, v, eps, z0=None, S0=None):  # type: ignore[no-untyped-def]
    """o_t = s q_t·S_t / (s q_t·(z_t + eps)), token by token in float64 (no decay)."""
    q, k, v = q.double(), k.double(), v.double()
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64) if S0 is None else S0.double()
    z = torch.zeros(B, H, K, dtype=torch.float64) if z0 is None else z0.double()
    s = K**-0.5
    outs = []
    for t in range(T):
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        z = z + k[:, t]
        num = s * torch.einsum("bhk,bhkv->bhv", q[:, t], S)
        den = s * torch.einsum("bhk,bhk->bh", q[:, t], z + eps)
        outs.append(num / den[..., None])
    return torch.stack(outs, 1), z


@pytest.mark.parametrize("with_state", [False, True])
def test_eps_inside_the_dot_is_judged_as_that_function(with_state: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.rand(1, 9, 2, 4, generator=gen) + 0.1 for _ in range(3))
    S0 = torch.rand(1, 2, 4, 4, generator=gen) if with_state else None
    z0 = torch.rand(1, 2, 4, generator=gen) if with_state else None
    eps = 0.25  # large, so an offset form would differ by far more than rounding
    problem = validate_problem(
        q, k, v, normalize=True, eps=eps, output_final_state=True,
        initial_state=(S0, z0) if with_state else None,
    )  # fmt: skip
    recipe = PrecisionRecipe(normalizer="in-dot", eps_dtype="float64")
    bounds = forward_bounds(problem, recipe).tensors
    o, z_T = _in_dot_reference(q, k, v, eps, z0, S0)
    assert torch.allclose(bounds["o"].reference, o, rtol=1e-12, atol=0)
    # The kernel's returned key sum carries no eps: the reference takes it back off.
    assert torch.allclose(bounds["final_key_sum"].reference, z_T, rtol=1e-12, atol=1e-15)
    offset = forward_bounds(problem, replace(recipe, normalizer="offset")).tensors["o"]
    assert not torch.allclose(offset.reference, o, rtol=1e-3)


def test_judging_an_in_dot_problem_twice_shifts_its_key_sum_once() -> None:
    # judge_against_oracle judges the problem as the kernel sees it, then forward_bounds does
    # again: the returned z_T must still be compared without eps.
    q = torch.rand(1, 5, 1, 2, dtype=torch.float64) + 0.1
    problem = validate_problem(q, q, q, normalize=True, eps=0.25, output_final_state=True)
    recipe = PrecisionRecipe(normalizer="in-dot", eps_dtype="float64")
    once = forward_bounds(problem, recipe).tensors["final_key_sum"].reference
    twice = forward_bounds(as_kernel_sees(problem, recipe), recipe).tensors["final_key_sum"]
    assert torch.equal(once, twice.reference)
    assert torch.allclose(once, q.sum(1), rtol=1e-12)


def test_eps_inside_the_dot_is_refused_with_decay() -> None:
    q = torch.rand(1, 3, 1, 2)
    problem = validate_problem(q, q, q, -torch.rand(1, 3, 1), normalize=True, eps=1e-3)
    with pytest.raises(InvalidArgument, match="without decay"):
        as_kernel_sees(problem, PrecisionRecipe(normalizer="in-dot"))


def test_eps_added_in_the_input_dtype_is_rounded_to_it() -> None:
    recipe = PrecisionRecipe(eps_dtype="input")
    fp16 = float(torch.tensor(1e-6, dtype=torch.float16))
    assert fp16 != 1e-6
    assert recipe.effective_eps(1e-6, torch.float16) == fp16
    assert recipe.effective_eps(1e-6, torch.float32) == float(torch.tensor(1e-6))


def _passthrough(q, k, v, *, scale=None, initial_state=None, output_final_state=False):  # type: ignore[no-untyped-def]
    return v, None


@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_a_kernel_refusing_t_below_h_is_never_drawn_such_a_case(data: st.DataObject) -> None:
    kernel = Kernel(
        "t_at_least_h",
        _passthrough,
        Capabilities(seq_len_at_least_heads=True),
        PrecisionRecipe(),
    )
    spec = data.draw(kernel_specs(kernel, max_seq_len=6))
    assert spec.H <= spec.T
    assert kernel.supports(kernel.prepare(spec.build())) is None


def test_the_t_below_h_refusal_is_a_reason_not_a_crash() -> None:
    kernel = Kernel("k", _passthrough, Capabilities(seq_len_at_least_heads=True), PrecisionRecipe())
    q = torch.rand(1, 2, 3, 4)
    reason = kernel.supports(validate_problem(q, q, q))
    assert reason is not None
    assert "T=2 < H=3" in reason


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--normalized", "--normalizer", "in-dot", "--decay", "scalar"], "without decay"),
        (["--normalizer", "in-dot"], "--normalized"),
        (["--layout", "bhtd"], "--layout"),
        (["--eps-dtype", "int8"], "--eps-dtype"),
        (["--normalizer", "clamp", "--normalized"], "eps > 0"),
        (["--seq-len-multiple", "0"], "--seq-len-multiple"),
    ],
)
def test_declarations_that_cannot_hold_exit_2_before_any_search(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "k.py"
    target.write_text(
        "def k(q, k, v, g=None, *, scale=None, initial_state=None, output_final_state=False):\n"
        "    return v, None\n"
    )
    try:
        code = main(["check", f"{target}:k", *flags, "--budget", "5"])
    except SystemExit as parse_error:  # argparse refuses an unknown choice itself, with exit 2
        code = parse_error.code  # type: ignore[assignment]
    assert code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_clamped_denominator_is_what_every_oracle_computes() -> None:
    from linattn_verify.linear_attn.oracles.double_double import double_double_oracle
    from linattn_verify.linear_attn.oracles.exact import exact_oracle
    from linattn_verify.linear_attn.oracles.mpmath_oracle import mpmath_oracle
    from linattn_verify.linear_attn.oracles.parallel import parallel_reference

    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 6, 2, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    eps = 0.5  # s q·z crosses it both ways on these inputs
    problem = replace(validate_problem(q, k, v, normalize=True, eps=eps), clamp=True)
    Z = 3**-0.5 * torch.einsum("bthk,bthk->bth", q, torch.cumsum(k, 1))
    want = 3**-0.5 * torch.einsum(
        "bthk,bthkv->bthv", q, torch.cumsum(k[..., None] * v[..., None, :], 1)
    )
    want = want / torch.clamp(Z, min=eps)[..., None]
    assert bool((eps > Z).any())
    assert bool((eps < Z).any())
    for name, o in (
        ("float64", parallel_reference(problem)[0]),
        ("double-double", double_double_oracle(problem)[0]),
        ("mpmath", mpmath_oracle(problem)[0]),
    ):
        assert torch.allclose(o, want, rtol=1e-12, atol=1e-15), name
    dyadic = problem.to(torch.float32).to(torch.float64)  # exact oracle: dyadic inputs
    exact_o = exact_oracle(dyadic)[0]
    assert torch.allclose(exact_o, parallel_reference(dyadic)[0], rtol=1e-12, atol=1e-15)


@settings(max_examples=60, deadline=None, database=None)
@given(
    spec=problem_specs(normalize=(True,), eps_values=(1e-3, 0.3), max_seq_len=20, max_head_dim=5)
)
def test_float32_clamped_forms_are_within_the_clamped_bound(spec: ProblemSpec) -> None:
    # The float64 reference forms evaluated in fp32 with max(Z, eps): a correct clamped kernel.
    from linattn_verify.compare import check_against_oracle
    from linattn_verify.linear_attn.oracles.parallel import parallel_reference
    from linattn_verify.linear_attn.strategies import random_cotangents
    from linattn_verify.linear_attn.tolerance import cotangent_loss

    problem = spec.build()
    recipe = PrecisionRecipe(
        form="parallel", dots_on_path=0, decay_scan="global", normalizer="clamp"
    )
    p32, leaves = replace(
        problem.to(torch.float32), clamp=True, output_final_state=True
    ).with_grad_leaves()
    o, state = parallel_reference(p32)
    do, d_final = random_cotangents(problem, spec.seed + 1)
    grads = dict(
        zip(
            leaves,
            torch.autograd.grad(cotangent_loss(o, state, do, d_final), list(leaves.values())),
            strict=True,
        )
    )
    grads = {n: gr.to(problem.q.dtype) if n in "qkv" else gr for n, gr in grads.items()}
    final = _detached(state) if problem.output_final_state else None
    verdict = check_against_oracle(
        problem, o.detach().to(problem.q.dtype), final, recipe=recipe, grads=grads, do=do,
        d_final_state=d_final, name="torch/parallel-clamped",
    )  # fmt: skip
    assert verdict.ok, verdict.report()


def _detached(state):  # type: ignore[no-untyped-def]
    return tuple(x.detach() for x in state) if isinstance(state, tuple) else state.detach()


@settings(max_examples=30, deadline=None, database=None)
@given(data=st.data())
def test_a_kernel_taking_multiples_of_a_bucket_is_drawn_only_those(data: st.DataObject) -> None:
    kernel = Kernel("buckets", _passthrough, Capabilities(seq_len_multiple=8), PrecisionRecipe())
    spec = data.draw(kernel_specs(kernel, max_seq_len=20))
    assert spec.T % 8 == 0
    assert spec.segments is None


def test_a_bucket_multiple_is_refused_for_packed_sequences_and_named_for_other_t() -> None:
    with pytest.raises(InvalidArgument, match="seq_len_multiple"):
        Capabilities(seq_len_multiple=4, varlen=True)
    kernel = Kernel("k", _passthrough, Capabilities(seq_len_multiple=4), PrecisionRecipe())
    q = torch.rand(1, 6, 1, 2)
    reason = kernel.supports(validate_problem(q, q, q))
    assert reason is not None
    assert "not a multiple of 4" in reason
