# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The value gate gv: folded into single-column problems, judged as the function it is.

S'_t = diag(e^{g_t}) S_{t-1} diag(e^{gv_t}), then the delta rule; column c is the rule of one
value column with the gate g + gv_c (`linattn_verify.delta.value_gate`). These tests pin the
fold against the recurrence written out, the bound against an fp32 kernel that decays in two
steps as FLA's does, and the declarations around it. End to end: the corpus
(``value_gate_loop``, FLA's ``fused_recurrent_gated_delta_rule`` with gv) and the zoo
(``value_gate_after_update``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from linattn_verify.cli import EXIT_USAGE, main
from linattn_verify.delta.bounds import forward_bounds
from linattn_verify.delta.high_precision import delta_mpmath
from linattn_verify.delta.kernel import DeltaRecipe
from linattn_verify.delta.problem import DeltaProblem, validate_delta
from linattn_verify.delta.reference import delta_recurrent
from linattn_verify.delta.strategies import DeltaCase, delta_cases
from linattn_verify.errors import InvalidArgument
from linattn_verify.signature import call_with


def _written_out(p: DeltaProblem, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence token by token in ``dtype``, decaying by e^g, then by e^gv (one sequence
    per batch row)."""
    B, T, H, K, V = p.shape
    S = (
        torch.zeros(B, H, K, V, dtype=dtype)
        if p.initial_state is None
        else p.initial_state.to(dtype)
    )
    outs = []
    for t in range(T):
        if p.g is not None:
            d = torch.exp(p.g[:, t].to(dtype))
            S = S * (d[..., None] if p.g.ndim == 4 else d[..., None, None])
        S = S * torch.exp(p.gv[:, t].to(dtype))[:, :, None, :]
        kt = p.k[:, t].to(dtype)
        err = p.v[:, t].to(dtype) - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + torch.einsum("bhk,bhv->bhkv", kt, p.beta[:, t].to(dtype)[..., None] * err)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, p.q[:, t].to(dtype) * p.scale))
    return torch.stack(outs, 1), S


@pytest.mark.parametrize("gate", ["none", "scalar", "vector"])
def test_the_fold_is_the_recurrence_written_out(gate: str) -> None:
    case = DeltaCase(
        B=2, T=9, H=2, K=3, V=4, dtype="float32", gate=gate,
        gate_family="none" if gate == "none" else "logsigmoid", beta_family="sigmoid",
        key_family="unit", value_family="unit", l2norm_qk=False, negative_eigenvalues=False,
        initial_state=True, output_final_state=True, seq_lens=None, scale=None, seed=4,
        value_gate="logsigmoid",
    )  # fmt: skip
    p = case.build()
    assert p.gv is not None
    want_o, want_S = _written_out(p, torch.float64)
    o, S = delta_recurrent(p)
    assert torch.allclose(o, want_o, rtol=1e-12, atol=1e-14)
    assert S is not None
    assert torch.allclose(S, want_S, rtol=1e-12, atol=1e-14)
    o_mp, _ = delta_mpmath(p)
    assert torch.allclose(o_mp, o, rtol=1e-12, atol=1e-14)


@settings(max_examples=60, deadline=None, database=None)
@given(
    case=delta_cases(
        dtypes=("float32",),
        value_gate=True,
        varlen=False,
        l2norm=(False,),
        max_seq_len=24,
        max_head_dim=6,
    )
)
def test_an_fp32_kernel_decaying_in_two_steps_is_within_the_bound(case: DeltaCase) -> None:
    p = case.build()
    fb = forward_bounds(p, DeltaRecipe(form="recurrent"))
    o, S = _written_out(p, torch.float32)
    got = {"o": o, "final_state": S}
    for name, b in fb.items():
        err = (got[name].double() - b.reference).abs()
        assert bool((err <= b.bound).all()), (name, float((err / b.bound).max()))


def test_a_value_gate_is_judged_under_the_recurrent_recipe_only() -> None:
    q = torch.rand(1, 3, 1, 2)
    p = validate_delta(q, q, q, torch.rand(1, 3, 1), gv=-torch.rand(1, 3, 1, 2))
    with pytest.raises(InvalidArgument, match="recurrent recipe"):
        forward_bounds(p, DeltaRecipe(form="chunk"))
    with pytest.raises(InvalidArgument, match="gv <= 0"):
        validate_delta(q, q, q, torch.rand(1, 3, 1), gv=torch.rand(1, 3, 1, 2))


def test_an_argument_named_at_another_position_goes_by_keyword() -> None:
    seen = {}

    def fla_like(q, k, v, g=None, gk=None, gv=None, beta=None):  # type: ignore[no-untyped-def]
        seen.update(g=g, gk=gk, gv=gv, beta=beta)

    call_with(fla_like, [("q", 0), ("k", 1), ("v", 2), ("g", 3), ("beta", 4)], {"gv": 5})
    assert seen == {"g": 3, "gk": None, "gv": 5, "beta": 4}

    def own_names(query, key, value, decay, strength):  # type: ignore[no-untyped-def]
        seen.update(decay=decay, strength=strength)

    call_with(own_names, [("q", 0), ("k", 1), ("v", 2), ("g", 3), ("beta", 4)], {})
    assert (seen["decay"], seen["strength"]) == (3, 4)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--form", "recurrent"], "--no-backward"),
        (["--no-backward", "--form", "chunk"], "recurrent"),
    ],
)
def test_a_value_gate_declaration_that_cannot_be_judged_exits_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "k.py"
    target.write_text("def k(q, k, v, g, beta, *, gv, scale=None):\n    return v, None\n")
    code = main(
        ["check", f"{target}:k", "--family", "delta", "--gates", "scalar", "--value-gate", *flags]
    )
    assert code == EXIT_USAGE
    assert message in capsys.readouterr().err
