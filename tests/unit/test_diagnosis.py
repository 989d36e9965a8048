# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Recipe diagnosis: which change to the declared recipe explains a bound failure, if any."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from linattn_properties._testing import bug_kernel, example_spec
from linattn_properties.oracle import outputs_match_oracle

from linattn_verify import diagnosis
from linattn_verify.compare import compare_bitwise
from linattn_verify.diagnosis import diagnose
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.recipe_ladders import recipe_ladders
from linattn_verify.linear_attn.reference_kernels import float32_reference
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.registry import get_kernel
from linattn_verify.results import Comparison, PropertyResult, Worst

REFERENCE = float32_reference("recurrent")

# fp16, T = 3, mild decay: a few milliseconds per property run.
SPEC = example_spec(dtype="float16", T=3, seed=0)


def _truncated_to_fp16(x: torch.Tensor) -> torch.Tensor:
    """x rounded to fp16 toward zero (truncated), back in fp32."""
    y = x.half()
    past = y.float().abs() > x.abs()
    return torch.where(past, torch.nextafter(y, torch.zeros_like(y)), y).float()


def fp16_state(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A correct recurrence that keeps its state in fp16, truncating it after every token.

    Truncation errs in one direction, so the roundings of the state add up instead of
    cancelling: T = 3 of them exceed the bound of a recipe that declares one.
    """
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.float()
    out = []
    for t in range(T):
        if g is not None:
            S = S * torch.exp(g[:, t].float())[..., None, None]
        S = _truncated_to_fp16(S + k[:, t].float()[..., None] * v[:, t].float()[..., None, :])
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t].float() * scale, S))
    return torch.stack(out, 1).to(q.dtype), S if output_final_state else None


def _casts(kernel: Kernel, casts: int) -> Kernel:
    recipe = kernel.precision_recipe(torch.float16)
    return replace(kernel, recipe=replace(recipe, intermediate_dtype="input", casts_on_path=casts))


def _state_kernel() -> Kernel:
    return bug_kernel(fp16_state, normalize=(False,), feature_maps=("identity",), varlen=False)


def test_an_undercounted_cast_is_diagnosed_with_the_smallest_count_that_passes() -> None:
    declared = _casts(_state_kernel(), 1)
    result = outputs_match_oracle(SPEC, declared)
    assert result.status == "failed", result.report()
    # The smallest count under which the property holds, found directly.
    passing = [c for c in range(2, 6) if outputs_match_oracle(SPEC, _casts(declared, c)).ok]
    assert passing, "no cast count up to 5 explains the truncated state"
    n = passing[0]
    assert diagnose(outputs_match_oracle, SPEC, declared, result) == (
        f"consistent with {n} roundings to float16 on the path (declared 1): if the kernel does "
        f"that, declare `--casts {n}`"
    )


def test_a_kernel_declaring_no_intermediate_dtype_is_told_which_flags_to_give() -> None:
    kernel = _state_kernel()
    assert kernel.precision_recipe(torch.float16).intermediate_dtype is None
    result = outputs_match_oracle(SPEC, kernel)
    assert result.status == "failed"
    text = diagnose(outputs_match_oracle, SPEC, kernel, result)
    assert text is not None
    assert text.startswith("consistent with ")
    assert "to float16 on the path (declared none)" in text
    assert "declare `--intermediate-dtype input --casts " in text


def _scaled_by_1_01(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    o, state = REFERENCE(*args, **kwargs)
    return (o.float() * 1.01).to(o.dtype), state


def _first_token_dropped(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kw: Any
) -> tuple[torch.Tensor, Any]:
    v = v.clone()
    v[:, 0] = 0
    return REFERENCE(q, k, v, *args, **kw)


@pytest.mark.parametrize(
    ("fn", "dtype"), [(_scaled_by_1_01, "float16"), (_first_token_dropped, "float32")]
)
def test_a_wrong_kernel_is_explained_by_no_recipe(fn: Callable[..., Any], dtype: str) -> None:
    spec = example_spec(dtype=dtype, T=5)
    kernel = bug_kernel(fn)
    result = outputs_match_oracle(spec, kernel)
    assert result.status == "failed"
    text = diagnose(outputs_match_oracle, spec, kernel, result)
    assert text is not None
    assert text.startswith("no recipe explains this error (tried ")
    assert "): the kernel, not its declaration, is wrong here" in text
    # A scale off by 1 % is recognised as one; a dropped first value has no known shape.
    if fn is _scaled_by_1_01:
        assert text.endswith(
            ". Shape of the error: o is 1.01 times the exact value at every "
            "element, within its bound: a wrong scale? The declared scale is "
            f"{spec.build().scale:.4g} (K^-1/2 = {spec.K**-0.5:.4g}); the "
            f"kernel's o is that of {1.01 * spec.build().scale:.4g}"
        )
    else:
        assert text.endswith("the kernel, not its declaration, is wrong here")
    # Every single loosening was tried, up to the most casts, and then all of them at once.
    assert "accumulation='mma'" in text
    assert "form=None" in text
    assert "every loosening at once" in text
    if dtype == "float16":
        assert "intermediate_dtype='input' with casts_on_path=1/2/3/4" in text
    else:
        assert "dot_precision" not in text  # the torch reference has no tl.dot on its path
        assert "intermediate_dtype='bfloat16' with casts_on_path=1/2/3/4" in text


def _one_element_infinite(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kw: Any
) -> tuple[torch.Tensor, Any]:
    o, state = REFERENCE(q, k, v, *args, **kw)
    o = o.clone()
    o.view(-1)[-1] = -torch.inf
    return o, state


def test_a_non_finite_value_is_offered_no_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    # A finite exact value met by -inf: no declared rounding makes it infinite, so the recipe
    # ladder is not even tried (a "declare --casts 2" here would be advice that cannot apply).
    spec = example_spec(dtype="float16", T=3)
    kernel = bug_kernel(_one_element_infinite)
    result = outputs_match_oracle(spec, kernel)
    assert result.status == "failed"
    monkeypatch.setattr(diagnosis, "_diagnosis", None)  # would raise if called
    text = diagnose(outputs_match_oracle, spec, kernel, result)
    assert text is not None
    assert text.startswith("o finite on one side only")
    assert "no declaration is offered" in text
    assert "declare `" not in text


def test_a_failure_that_does_not_come_back_is_nondeterminism() -> None:
    calls = [0]

    def every_other_call(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        calls[0] += 1
        o, state = REFERENCE(*args, **kwargs)
        return (o * 2 if calls[0] % 2 else o), state

    kernel = bug_kernel(every_other_call)
    result = outputs_match_oracle(SPEC, kernel)
    assert result.status == "failed"
    assert diagnose(outputs_match_oracle, SPEC, kernel, result) == (
        "did not reproduce on a rerun of the same case with the same recipe: the kernel is "
        "nondeterministic here (a race, or memory it reads before writing?)"
    )
    assert calls[0] == 2  # one rerun, no candidate recipes


def _never_called(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    raise AssertionError("nothing to diagnose, so nothing must be rerun")


def test_nothing_to_diagnose_gives_none() -> None:
    kernel = get_kernel("torch/recurrent")
    held = outputs_match_oracle(SPEC, kernel)
    assert held.ok
    assert diagnose(_never_called, SPEC, kernel, held) is None
    bits = compare_bitwise("o", torch.ones(2), torch.zeros(2), condition="on a rerun")
    bitwise_only = PropertyResult("p", kernel.name, repr(SPEC), "failed", (bits,))
    assert diagnose(_never_called, SPEC, kernel, bitwise_only) is None
    raised = PropertyResult("p", kernel.name, repr(SPEC), "failed", reason="k raised OSError")
    assert diagnose(_never_called, SPEC, kernel, raised) is None


# A property whose verdict is a function of the recipe only, to pin down the order of the search.

FAILED_BOUND = Comparison("o", "k", "oracle", "failed", 9.0, worst=Worst((0,), 1.0, 1.1, 0.01))
HELD_BOUND = Comparison("o", "k", "oracle", "held", 0.5)


def _recipe_property(
    passes: Callable[[PrecisionRecipe], bool | None], dtype: torch.dtype = torch.float16
) -> Callable[[ProblemSpec, Kernel], PropertyResult]:
    """A property that holds where ``passes(recipe of dtype)``; `None`: the kernel raised."""

    def prop(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
        verdict = passes(kernel.precision_recipe(dtype))
        if verdict is None:
            return PropertyResult("p", kernel.name, repr(spec), "failed", reason="k raised")
        status = "held" if verdict else "failed"
        comparison = HELD_BOUND if verdict else FAILED_BOUND
        return PropertyResult("p", kernel.name, repr(spec), status, (comparison,))

    return prop


DECLARED = PrecisionRecipe(
    form="chunk", dots_on_path=2, intermediate_dtype="input", casts_on_path=1, division="rn"
)
KERNEL = Kernel("test/recipe", REFERENCE, get_kernel("torch/chunk").capabilities, DECLARED)
FAILED = PropertyResult("p", KERNEL.name, repr(SPEC), "failed", (FAILED_BOUND,))


def _diagnosis(passes: Callable[[PrecisionRecipe], bool | None], **kwargs: Any) -> str | None:
    return diagnose(_recipe_property(passes), SPEC, KERNEL, FAILED, **kwargs)


def test_the_smallest_single_change_is_named() -> None:
    # mma accumulation adds less than a rounding to fp16: it is tried, and named, first.
    text = _diagnosis(lambda r: r.accumulation == "mma" or r.casts_on_path >= 2)
    assert text == (
        "consistent with tensor-core (mma) accumulation (declared ieee): if the kernel does "
        "that, declare `accumulation='mma'` in the recipe"
    )
    assert _diagnosis(lambda r: r.form is None) == (
        "consistent with the rounding counts of an unknown form (all three forms' counts) "
        "(declared chunk): if the kernel does that, declare no form (leave out `--form`)"
    )
    assert _diagnosis(lambda r: r.casts_on_path >= 4) == (
        "consistent with 4 roundings to float16 on the path (declared 1): if the kernel does "
        "that, declare `--casts 4`"
    )


def test_a_rerun_that_fails_otherwise_explains_nothing() -> None:
    # Under 2 casts the kernel raises: no bound fails, but that is no explanation.
    text = _diagnosis(lambda r: None if r.casts_on_path == 2 else r.casts_on_path >= 3)
    assert text is not None
    assert "consistent with 3 roundings" in text


def test_several_changes_are_named_only_as_far_as_they_are_needed() -> None:
    text = _diagnosis(lambda r: r.accumulation == "mma" and r.casts_on_path >= 3)
    assert text == (
        "consistent only with several changes at once: tensor-core (mma) accumulation "
        "(declared ieee), 3 roundings to float16 on the path (declared 1): if the kernel does "
        "all that, declare `accumulation='mma'` in the recipe, `--casts 3`"
    )


def test_fp32_kernels_are_offered_tf32_dot_products() -> None:
    spec = replace(SPEC, dtype="float32")
    declared = replace(DECLARED, intermediate_dtype=None, casts_on_path=0)
    kernel = replace(KERNEL, recipe=declared)
    prop = _recipe_property(lambda r: r.dot_precision == "tf32", torch.float32)
    assert diagnose(prop, spec, kernel, replace(FAILED, case=repr(spec))) == (
        "consistent with `tl.dot` operands in tf32 (declared ieee): if the kernel does that, "
        "declare `--dot-precision tf32`"
    )


def test_the_time_limit_stops_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every rerun takes 10 s of a fake clock; 25 s allow the rerun and two changes.
    now = [0.0]

    def slow(r: PrecisionRecipe) -> bool:
        now[0] += 10
        return False

    monkeypatch.setattr(diagnosis, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    assert _diagnosis(slow, time_limit=25) == (
        "not diagnosed within 25 s: no change up to form=None explains it (tried "
        "accumulation='mma'; form=None)"
    )
    assert now[0] == 30


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("prop", "outputs_match_oracle"),
        ("spec", {"T": 3}),
        ("kernel", "torch/recurrent"),
        ("result", "failed"),
        ("time_limit", 0),
        ("time_limit", float("nan")),
        ("time_limit", True),
    ],
)
def test_bad_arguments_are_named(name: str, value: Any) -> None:
    arguments: dict[str, Any] = {
        "prop": outputs_match_oracle,
        "spec": SPEC,
        "kernel": KERNEL,
        "result": FAILED,
        name: value,
    }
    time_limit = arguments.pop("time_limit", diagnosis.DIAGNOSIS_SECONDS)
    with pytest.raises(InvalidArgument, match=f"{name}="):
        diagnose(**arguments, time_limit=time_limit)


def test_a_diagnosis_survives_json_and_is_reported_after_the_comparisons() -> None:
    text = "consistent with 3 roundings to float16 on the path (declared 2): declare `--casts 3`"
    result = replace(FAILED, diagnosis=text, notes=("Bound: recipe",))
    assert PropertyResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert PropertyResult.from_json({**result.to_json(), "diagnosis": None}).diagnosis is None
    old = {k: v for k, v in result.to_json().items() if k != "diagnosis"}
    assert PropertyResult.from_json(old).diagnosis is None
    lines = result.report().splitlines()
    assert lines[-1] == f"Diagnosis: {text}"
    assert lines.index("Bound: recipe") < len(lines) - 1
    assert lines[1] == "k o is not close to the float64 oracle!"
    assert "Diagnosis" not in FAILED.report()


def test_the_diagnosis_tries_a_reciprocal_division_for_normalized_cases() -> None:
    # performer-pytorch divides as 1/Z then a multiply, in fp16: one ulp past a direct
    # division's bound, which "no recipe explains" said before the reciprocal was a recipe.
    kernel = get_kernel("torch/recurrent")
    spec = example_spec(dtype="float16", normalize=True, feature_map="elu1")
    declared = kernel.precision_recipe(torch.float16)
    ladders = recipe_ladders(declared, spec, kernel, torch.float16)
    steps = ladders["reciprocal"]
    assert [step.changes for step in steps] == [
        {"division": "reciprocal", "division_dtype": "float32"},
        {"division": "reciprocal", "division_dtype": "input"},
    ]
    assert steps[-1].how == "`--division reciprocal --division-dtype input`"
    assert steps[0].size < steps[1].size
    unnormalized = replace(spec, normalize=False)
    assert "reciprocal" not in recipe_ladders(declared, unnormalized, kernel, torch.float16)
