# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Meta tests of the delta-rule strategies: every family builds what it promises."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linattn_verify.delta import DeltaProblem
from linattn_verify.delta.kernel import (
    UNIT_KEY_SLACK,
    DeltaCapabilities,
    DeltaKernel,
    DeltaRecipe,
    gate_of,
)
from linattn_verify.delta.strategies import (
    BETA_FAMILIES,
    GATE_FAMILIES,
    KEY_FAMILIES,
    VALUE_FAMILIES,
    DeltaCase,
    delta_cases,
    delta_cases_for,
    random_delta_cotangents,
)
from linattn_verify.errors import InvalidArgument

FEW = settings(max_examples=25, deadline=None)


def case(**changes) -> DeltaCase:
    fields = {
        "B": 1,
        "T": 9,
        "H": 2,
        "K": 5,
        "V": 3,
        "dtype": "float32",
        "gate": "scalar",
        "gate_family": "logsigmoid",
        "beta_family": "sigmoid",
        "key_family": "unit",
        "value_family": "unit",
        "l2norm_qk": False,
        "negative_eigenvalues": False,
        "initial_state": True,
        "output_final_state": True,
        "seq_lens": None,
        "scale": None,
        "seed": 3,
    }
    fields.update(changes)
    return DeltaCase(**fields)


def key_norms(p: DeltaProblem) -> torch.Tensor:
    return p.k.double().pow(2).sum(-1)


def check_promises(c: DeltaCase, p: DeltaProblem) -> None:
    """What every built case promises, whatever its families."""
    assert isinstance(p, DeltaProblem)
    assert p.shape == (c.B, c.T, c.H, c.K, c.V)
    assert str(p.q.dtype) == f"torch.{c.dtype}"
    assert gate_of(p) == c.gate
    assert (p.initial_state is not None) == c.initial_state
    assert p.output_final_state == c.output_final_state
    assert p.l2norm_qk == c.l2norm_qk
    beta = p.beta.double()
    assert float(beta.min()) >= 0
    assert float(beta.max()) < 2 if c.negative_eigenvalues else float(beta.max()) <= 1
    if p.g is not None:
        assert bool((p.g <= 0).all())
        assert bool(torch.isfinite(p.g).all())
    if c.seq_lens is None:
        assert p.cu_seqlens is None
    else:
        assert p.cu_seqlens.diff().tolist() == list(c.seq_lens)
    norms = key_norms(p)
    if c.out_of_contract:
        assert float(norms.max()) > 1 + UNIT_KEY_SLACK
        assert float(norms.max()) <= 4 * (1 + 2**-6)
    elif not c.l2norm_qk:
        assert float(norms.max()) <= 1 + UNIT_KEY_SLACK


@FEW
@given(
    c=delta_cases(
        out_of_contract=True, max_seq_len=80, dtypes=("float32", "float16", "bfloat16", "float64")
    )
)
def test_drawn_cases_build_valid_problems(c):
    check_promises(c, c.build())


@FEW
@given(
    key=st.sampled_from(KEY_FAMILIES),
    beta=st.sampled_from(BETA_FAMILIES),
    gate=st.sampled_from(("none", *GATE_FAMILIES)),
    vector=st.booleans(),
    value=st.sampled_from(VALUE_FAMILIES),
    dtype=st.sampled_from(("float32", "float16", "bfloat16")),
    seed=st.integers(0, 2**31 - 1),
)
def test_every_family_builds(key, beta, gate, vector, value, dtype, seed):
    c = case(
        key_family=key,
        beta_family=beta,
        gate="none" if gate == "none" else ("vector" if vector else "scalar"),
        gate_family=gate,
        value_family=value,
        dtype=dtype,
        seed=seed,
        K=16,
        T=20,
        l2norm_qk=key == "raw",
        negative_eigenvalues=beta == "near_two" or vector,
        out_of_contract=key == "large_norm",
    )
    check_promises(c, c.build())


def test_each_family_has_its_values():
    p = case(beta_family="zero", gate_family="zero").build()
    assert bool((p.beta == 0).all())
    assert bool((p.g == 0).all())
    p = case(beta_family="one", gate_family="steep", gate="vector").build()
    assert bool((p.beta == 1).all())
    assert float(p.g.min()) >= -20
    assert float(p.g.min()) < -5
    p = case(beta_family="mixed", gate_family="some_zero", T=64).build()
    assert bool((p.beta == 0).any())
    assert bool((p.beta == 1).any())
    assert bool(((p.beta > 0) & (p.beta < 1)).any())
    assert bool((p.g == 0).any())
    assert bool((p.g < 0).any())
    p = case(gate_family="mild").build()
    assert float(p.g.min()) >= -0.05
    for dtype in ("float16", "bfloat16", "float32"):
        c = case(beta_family="near_two", negative_eigenvalues=True, dtype=dtype)
        beta = c.build().beta.double()
        below_two = 2 - (2.0**-7 if dtype == "bfloat16" else 2.0**-10)
        assert float(beta.min()) >= below_two
        assert float(beta.max()) < 2
    p = case(key_family="repeated", T=12, H=1).build()
    assert len({tuple(row) for row in p.k[0, :, 0].tolist()}) <= 2
    p = case(key_family="near_parallel", T=12, H=1, dtype="float64").build()
    k = p.k[0, :, 0]
    assert float((k @ k.T).min()) > 0.99
    p = case(key_family="raw", l2norm_qk=True, K=16).build()
    assert float(key_norms(p).max()) > 2
    p = case(value_family="large").build()
    assert float(p.v.abs().max()) > 10
    p = case(value_family="tiny").build()
    assert float(p.v.abs().max()) < 0.1


def test_unit_keys_within_slack_in_every_dtype():
    for dtype in ("float16", "bfloat16"):
        for K in (1, 7, 64, 256):
            norms = key_norms(case(dtype=dtype, K=K, T=32, seed=K).build())
            assert float(norms.max()) <= 1 + UNIT_KEY_SLACK
            assert float(norms.min()) >= 1 - 2**-4


def test_logsigmoid_normalizers_span_the_range():
    steps = [float(case(seed=s, T=64).build().g.min()) for s in range(40)]
    assert min(steps) < -30
    assert max(steps) > -1


def test_build_is_deterministic_and_describe_round_trips():
    c = case(seq_lens=(0, 4, 0, 5), key_family="near_parallel", gate="vector", scale=0.3)
    again = eval(c.describe())
    assert again == c
    assert c.describe().startswith("DeltaCase(B=1, T=9")
    a, b = c.build(), again.build()
    for name, x in a.inputs().items():
        assert torch.equal(x, b.inputs()[name]), name
    assert torch.equal(a.cu_seqlens, b.cu_seqlens)
    assert not torch.equal(a.q, case(seed=4).build().q)
    exec(c.repro(), {})


@FEW
@given(c=delta_cases(max_seq_len=40))
def test_drawn_describe_round_trips(c):
    assert eval(c.describe()) == c
    assert not c.out_of_contract
    assert DeltaCase.family == "delta"


def test_cotangents():
    p = case(dtype="bfloat16", seq_lens=(4, 0, 5)).build()
    do, dS = random_delta_cotangents(p, 7)
    assert do.shape == p.v.shape
    assert do.dtype == torch.bfloat16
    assert dS.shape == (3, 2, 5, 3)
    assert dS.dtype == torch.float32
    again = random_delta_cotangents(p, 7)
    assert torch.equal(do, again[0])
    assert torch.equal(dS, again[1])
    assert random_delta_cotangents(case(output_final_state=False).build(), 7)[1] is None


def kernel(**caps) -> DeltaKernel:
    return DeltaKernel(
        "test/fake",
        lambda *a, **k: None,
        DeltaCapabilities(**caps),
        DeltaRecipe("chunk", chunk_size=32),
    )


VECTOR_ONLY = kernel(
    gates=("vector",),
    dtypes=("bfloat16",),
    varlen=False,
    l2norm_qk=(True,),
    negative_eigenvalues=False,
    initial_state=False,
    final_state=False,
    max_head_dim=8,
    min_head_dim=2,
)


@FEW
@given(c=delta_cases_for(VECTOR_ONLY, out_of_contract=True))
def test_kernel_cases_respect_capabilities(c):
    assert c.gate == "vector"
    assert c.dtype == "bfloat16"
    assert c.seq_lens is None
    assert c.l2norm_qk
    assert not c.negative_eigenvalues
    assert not c.initial_state
    assert not c.output_final_state
    assert not c.out_of_contract
    assert min(c.K, c.V) >= 2
    assert max(c.K, c.V) <= 8
    assert VECTOR_ONLY.supports(c.build()) is None


UNIT_KEYS = kernel(gates=("none", "scalar"), l2norm_qk=(False,))


@FEW
@given(c=delta_cases_for(UNIT_KEYS, out_of_contract=True, max_seq_len=100))
def test_out_of_contract_cases_break_only_the_key_contract(c):
    p = c.build()
    assert UNIT_KEYS.supports(p) is None
    assert (UNIT_KEYS.contract(p) is not None) == c.out_of_contract
    assert c.gate in ("none", "scalar")


@FEW
@given(c=delta_cases_for(UNIT_KEYS, realistic_only=True))
def test_in_contract_and_realistic_by_default(c):
    assert not c.out_of_contract
    assert c.beta_family == "sigmoid"
    assert c.value_family == "unit"
    assert c.key_family == "unit"
    assert c.gate_family in ("none", "logsigmoid")
    assert UNIT_KEYS.contract(c.build()) is None


def test_long_ragged_and_out_of_contract_cases_are_reachable():
    drawn = []

    @settings(max_examples=150, deadline=None, database=None)
    @given(c=delta_cases_for(UNIT_KEYS, out_of_contract=True))
    def collect(c):
        drawn.append(c)

    collect()
    assert any(c.T > 64 for c in drawn)
    assert any(c.T % 16 for c in drawn)
    assert any(c.out_of_contract for c in drawn)
    assert any(c.seq_lens is not None and 0 in c.seq_lens for c in drawn)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dtypes": ("float8",)}, "dtypes"),
        ({"dtypes": "float32"}, "dtypes"),
        ({"gates": ("matrix",)}, "gates"),
        ({"min_seq_len": 0}, "min_seq_len"),
        ({"max_seq_len": 2.5}, "max_seq_len"),
        ({"max_head_dim": 0}, "max_head_dim"),
        ({"max_heads": 0}, "max_heads"),
        ({"l2norm": (1,)}, "l2norm"),
        ({"negative_eigenvalues": ()}, "negative_eigenvalues"),
        ({"varlen": 1}, "varlen"),
        ({"out_of_contract": "yes"}, "out_of_contract"),
        ({"realistic_only": None}, "realistic_only"),
        ({"out_of_contract": True, "l2norm": (True,)}, "out_of_contract"),
    ],
)
def test_arguments_are_validated(kwargs, name):
    with pytest.raises(InvalidArgument, match=name):
        delta_cases(**kwargs)


def test_kernel_arguments_are_validated():
    with pytest.raises(InvalidArgument, match="kernel"):
        delta_cases_for("fla/chunk")
    with pytest.raises(InvalidArgument, match="max_head_dim"):
        delta_cases_for(UNIT_KEYS, max_head_dim="8")
    with pytest.raises(InvalidArgument, match="max_seq_len"):
        delta_cases_for(UNIT_KEYS, max_seq_len=0)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"T": 0}, "T"),
        ({"dtype": "half"}, "dtype"),
        ({"gate": "none"}, "gate_family"),
        ({"key_family": "raw"}, "l2norm_qk"),
        ({"key_family": "large_norm"}, "out_of_contract"),
        ({"beta_family": "near_two"}, "negative_eigenvalues"),
        ({"seq_lens": (4, 4)}, "seq_lens"),
        ({"B": 2, "seq_lens": (9,)}, "seq_lens"),
        ({"scale": math.inf}, "scale"),
        ({"initial_state": 1}, "initial_state"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_case_fields_are_validated(changes, name):
    with pytest.raises(InvalidArgument, match=name):
        case(**changes)
