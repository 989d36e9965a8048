# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Lifted feature maps (taylor2, rebased, favor+): the Triton φ step and the forms through it.

`lift_features` is checked against the float64 `linattn_verify.linear_attn.feature_maps.lift` (and
`Problem.query_features` for the prescale and the stabiliser), its backward against float64
autograd, both within the harness's feature bounds (`linattn_verify.linear_attn._bounds.lifted`);
the chunked and recurrent forms with each map against the float64 oracle with
`assert_linattn_close`. Everything runs under the Triton interpreter, so cases stay tiny
(T <= 32, K <= 4, V <= 4).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from linattn_verify.compare import assert_linattn_close
from linattn_verify.linear_attn._bounds.lifted import chain, feature_error
from linattn_verify.linear_attn.feature_maps import favor_exponent, lift
from linattn_verify.linear_attn.oracles.parallel import parallel_reference
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.semantics import validate_problem

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from linattn_kernels.lifted import lift_features
    from linattn_kernels.linear_attn import chunk as chunk_module
    from linattn_kernels.linear_attn import recurrent as recurrent_module

pytestmark = pytest.mark.filterwarnings("ignore::linattn_kernels.InterpreterFallbackWarning")

MAPS = ("taylor2", "rebased", "favor+")
U32 = 2.0**-24
TINY32 = torch.finfo(torch.float32).tiny


def weights_for(feature_map: str, K: int, m: int = 6, seed: int = 7) -> torch.Tensor | None:
    """favor+'s projection W ``[m, K]`` (fp32, standard normal), None for the other maps."""
    if feature_map != "favor+":
        return None
    return torch.randn(m, K, generator=torch.Generator().manual_seed(seed))


def rows_problem(
    x: torch.Tensor, feature_map: str, W: torch.Tensor | None, *, scale: float, stabilise: bool
) -> Any:
    """A problem whose queries are the rows of x, so its feature bounds describe lift_features.

    The prescale is the problem's scale (taylor2, rebased); normalize with eps = 0 makes
    favor+'s queries stabilised.
    """
    q = x.detach().reshape(1, -1, 1, x.shape[-1])
    v = torch.zeros(*q.shape[:3], 1, dtype=q.dtype)
    return validate_problem(
        q, q, v, None, scale=scale, normalize=stabilise, feature_map=feature_map,
        feature_weights=W,
    )  # fmt: skip


def output_rounding(dtype: torch.dtype) -> float:
    """The unit roundoff of one rounding to ``dtype`` (0 for fp32, which the kernel keeps)."""
    return 0.0 if dtype == torch.float32 else torch.finfo(dtype).eps / 2


def assert_within(
    actual: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor, what: str
) -> float:
    """Every |actual - exact| <= bound; return the worst err/bound (0 where both are 0)."""
    __tracebackhide__ = True
    err = (actual.detach().double() - exact.detach()).abs()
    ratio = torch.where(err == 0, torch.zeros_like(err), err / bound)
    worst = float(ratio.max()) if ratio.numel() else 0.0
    index = tuple(int(i) for i in torch.nonzero(ratio == ratio.max())[0]) if ratio.numel() else ()
    assert worst <= 1.0, (
        f"{what}: err/bound = {worst:.3g} at index {index} (err {float(err[index]):.3g}, "
        f"bound {float(bound[index]):.3g}); {int((ratio > 1).sum())} / {ratio.numel()} elements"
    )
    return worst


# fmt: off
LIFT_CASES = [
    pytest.param(fm, dtype, prescale, stabilise, id=f"{fm}-{str(dtype)[6:]}-p{prescale}"
                 + ("-stab" if stabilise else ""))
    for fm in MAPS
    for dtype in (torch.float32, torch.bfloat16)
    for prescale, stabilise in (
        ((1.0, False), (1.0, True)) if fm == "favor+" else ((1.0, False), (0.37, False))
    )
]
# fmt: on


@pytest.mark.parametrize(("feature_map", "dtype", "prescale", "stabilise"), LIFT_CASES)
def test_lift_fwd_bwd_match_float64(
    feature_map: str, dtype: torch.dtype, prescale: float, stabilise: bool
) -> None:
    gen = torch.Generator().manual_seed(3)
    K = 3
    # 2 x 35 rows: more than one 64-row block for K = 3, and a partial one.
    x = torch.randn(2, 35, K, generator=gen).to(dtype).requires_grad_()
    W = weights_for(feature_map, K)
    phi = lift_features(x, feature_map, prescale=prescale, weights=W, stabilise=stabilise)
    assert phi.dtype == torch.float32
    p = rows_problem(x, feature_map, W, scale=prescale, stabilise=stabilise)
    x64 = x.detach().double().requires_grad_()
    # Exact features of the rows as the kernel received them: the float64 harness maps.
    rows64 = x64.reshape(p.q.shape[1], K)
    exact = p.to(torch.float64).query_features(rows64)
    if not stabilise and feature_map != "favor+":
        expected = lift(rows64 * prescale, feature_map, None)  # type: ignore[arg-type]
        torch.testing.assert_close(exact, expected)
    bound = feature_error(p, rows64.detach(), exact.detach(), U32, TINY32, query=True)
    r_fwd = assert_within(phi.reshape(exact.shape), exact.detach(), bound, "φ")

    dphi = torch.randn(phi.shape, generator=gen, dtype=torch.float64)
    (dx,) = torch.autograd.grad(phi, x, dphi.float())
    assert dx.dtype == dtype
    if stabilise:
        # The backward holds the row's factor exp(-|x|²/2 - c) constant (lift.py, README).
        y = favor_exponent(rows64, W.double())  # type: ignore[union-attr]
        factor = (y - rows64 @ W.double().T).detach() - y.amax(-1, keepdim=True).detach()  # type: ignore[union-attr]
        shifted = torch.exp(rows64 @ W.double().T + factor) / W.shape[0] ** 0.5  # type: ignore[union-attr]
        (dx64,) = torch.autograd.grad(shifted, x64, dphi.reshape(shifted.shape))
    else:
        (dx64,) = torch.autograd.grad(exact, x64, dphi.reshape(exact.shape))
    _, B = chain(
        p, rows64.detach(), dphi.reshape(exact.shape).abs(), torch.zeros_like(exact), U32,
        query=True, features=exact.detach(), feature_err=bound,
    )  # fmt: skip
    # The fp32 dx is rounded once to x's dtype: u_out relative to the computed value.
    u_out = output_rounding(dtype)
    B = B + u_out * (dx64.detach().reshape(B.shape).abs() + B)
    r_bwd = assert_within(dx.reshape(B.shape), dx64.detach().reshape(B.shape), B, "dx")
    print(f"lift {feature_map} {dtype} p={prescale} stab={stabilise}: r {r_fwd:.3g} / {r_bwd:.3g}")


def test_lift_prescale_is_one_fp32_multiply_before_the_map() -> None:
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(1))
    for fm in MAPS:
        W = weights_for(fm, 4)
        assert torch.equal(
            lift_features(x, fm, prescale=0.37, weights=W),
            lift_features(x * 0.37, fm, weights=W),
        )


def test_lift_empty_rows_and_poisoned_allocations(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lift_features(torch.zeros(0, 3), "taylor2").shape == (0, 13)

    def outputs() -> list[torch.Tensor]:
        out = []
        for fm in MAPS:
            x = torch.randn(3, 5, 3, generator=torch.Generator().manual_seed(2)).requires_grad_()
            phi = lift_features(x, fm, prescale=0.5, weights=weights_for(fm, 3))
            (dx,) = torch.autograd.grad(phi, x, torch.ones_like(phi))
            out += [phi.detach(), dx]
        return out

    kit.assert_poison_never_leaks(monkeypatch, outputs)


def test_stabiliser_keeps_features_of_large_queries() -> None:
    # The case "favor+-norm-eps0-large-q" below is only meaningful if plain features vanish.
    q = 20.0 * torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    W = weights_for("favor+", 3)
    assert not bool(lift_features(q, "favor+", weights=W).any())
    stabilised = lift_features(q, "favor+", weights=W, stabilise=True)
    # Every row keeps its largest feature exactly: exp(0) / √m.
    torch.testing.assert_close(stabilised.amax(-1), torch.full((12,), 6**-0.5), rtol=0, atol=0)


@dataclass(frozen=True)
class Case:
    """One attention problem with a lifted map; `make` draws its tensors deterministically."""

    feature_map: str
    B: int = 1
    T: int = 20
    H: int = 2
    K: int = 3
    V: int = 4
    dtype: torch.dtype = torch.float32
    normalize: bool = False
    eps: float = 0.0
    decay: bool = True
    initial_state: bool = True
    final_state: bool = True
    cu_seqlens: tuple[int, ...] | None = None
    scale: float | None = None
    q_gain: float = 1.0
    seed: int = 0

    @property
    def N(self) -> int:
        return self.B if self.cu_seqlens is None else len(self.cu_seqlens) - 1


def make(case: Case) -> tuple[dict[str, Any], torch.Tensor | None]:
    """The kernel's keyword arguments for ``case`` (leaves require grad) and favor+'s W."""
    gen = torch.Generator().manual_seed(case.seed)
    B, T, H, K, V, N = case.B, case.T, case.H, case.K, case.V, case.N
    W = weights_for(case.feature_map, K)
    F = {"taylor2": 1 + K + K * K, "rebased": K * K, "favor+": 0 if W is None else W.shape[0]}
    Fd = F[case.feature_map]

    def leaf(x: torch.Tensor, dtype: torch.dtype = case.dtype) -> torch.Tensor:
        return x.to(dtype).requires_grad_()

    q = leaf(case.q_gain * torch.randn(B, T, H, K, generator=gen))
    k = leaf(0.7 * torch.randn(B, T, H, K, generator=gen))
    v = leaf(torch.randn(B, T, H, V, generator=gen))
    g = leaf(-0.2 * torch.rand(B, T, H, generator=gen)) if case.decay else None
    state: Any = None
    if case.initial_state:
        S0 = leaf(torch.randn(N, H, Fd, V, generator=gen), torch.float32)
        state = (
            (S0, leaf(torch.rand(N, H, Fd, generator=gen), torch.float32)) if case.normalize else S0
        )
    cu = None if case.cu_seqlens is None else torch.tensor(case.cu_seqlens, dtype=torch.int32)
    kwargs = {
        "q": q, "k": k, "v": v, "g": g, "scale": case.scale, "normalize": case.normalize,
        "eps": case.eps, "feature_map": case.feature_map, "initial_state": state,
        "output_final_state": case.final_state, "cu_seqlens": cu,
    }  # fmt: skip
    return kwargs, W


FORMS: dict[str, tuple[Callable[..., Any], Callable[..., dict[str, object]], dict[str, Any]]] = {
    "chunk": (
        chunk_module.chunked_linear_attention,
        chunk_module.precision_recipe,
        {"chunk_size": 16},
    ),
    "recurrent": (
        recurrent_module.recurrent_linear_attention,
        recurrent_module.precision_recipe,
        {},
    ),
}


# fmt: off
def _cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for fm in MAPS:
        cases[f"{fm}-unnorm-gate-h0"] = Case(fm, scale=0.6)
        cases[f"{fm}-norm-eps0-gate-h0"] = Case(fm, normalize=True)
        cases[f"{fm}-norm-eps-varlen"] = Case(
            fm, T=24, H=1, K=2, normalize=True, eps=1e-3, cu_seqlens=(0, 5, 5, 6, 24), seed=1,
        )
        cases[f"{fm}-bf16-norm-gate"] = Case(
            fm, dtype=torch.bfloat16, normalize=True, initial_state=False, seed=2,
        )
    # Queries so large that every plain favor+ feature underflows: only the stabiliser keeps o.
    cases["favor+-norm-eps0-large-q"] = Case(
        "favor+", T=12, H=1, normalize=True, decay=False, initial_state=False, q_gain=20.0,
    )
    return cases
# fmt: on

CASES = _cases()


def autograd_errors(
    problem: Any, grads: dict[str, torch.Tensor], do: torch.Tensor, d_finals: list[torch.Tensor]
) -> str:
    """Max relative error of each gradient against float64 autograd of `parallel_reference`."""
    p64 = problem.to(torch.float64)
    names = ("q", "k", "v", "g", "initial_state", "initial_key_sum")
    tensors = {
        "q": p64.q, "k": p64.k, "v": p64.v, "g": p64.g,
        "initial_state": p64.initial_state, "initial_key_sum": p64.initial_key_sum,
    }  # fmt: skip
    leaves64 = {n: tensors[n].requires_grad_() for n in names if n in grads}
    o64, final64 = parallel_reference(p64)
    finals64 = [] if final64 is None else list(final64) if isinstance(final64, tuple) else [final64]
    ref = torch.autograd.grad(
        [o64, *finals64], list(leaves64.values()), [do.double(), *(d.double() for d in d_finals)]
    )
    parts = []
    for (name, dx), r in zip(((n, grads[n]) for n in leaves64), ref, strict=True):
        rel = float((dx.double() - r).abs().max() / r.abs().max().clamp_min(1e-300))
        parts.append(f"d{name} {rel:.2e}")
    return ", ".join(parts)


def leaves(kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The differentiable inputs keyed by `assert_linattn_close`'s gradient names."""
    out = {name: kwargs[name] for name in ("q", "k", "v", "g") if kwargs[name] is not None}
    state = kwargs["initial_state"]
    if isinstance(state, tuple):
        out["initial_state"], out["initial_key_sum"] = state
    elif state is not None:
        out["initial_state"] = state
    return out


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_lifted_form_fwd_bwd_match_oracle(case: Case, form: str) -> None:
    fn, recipe_fn, extra = FORMS[form]
    kwargs, W = make(case)
    o, final = fn(**kwargs, feature_weights=W, **extra)
    assert o.dtype == case.dtype
    gen = torch.Generator().manual_seed(case.seed + 1)
    do = torch.randn(o.shape, generator=gen).to(o.dtype)
    finals = [] if final is None else list(final) if isinstance(final, tuple) else [final]
    assert all(f.dtype == torch.float32 for f in finals)
    d_finals = [torch.randn(f.shape, generator=gen) for f in finals]
    inputs = leaves(kwargs)
    grads = torch.autograd.grad([o, *finals], list(inputs.values()), [do, *d_finals])
    for (name, x), dx in zip(inputs.items(), grads, strict=True):
        assert dx.dtype == x.dtype, name
    assert bool(torch.isfinite(o).all())
    d_final: Any = None if not d_finals else tuple(d_finals) if case.normalize else d_finals[0]
    detached = {
        key: tuple(x.detach() for x in val) if isinstance(val, tuple)
        else val.detach() if isinstance(val, torch.Tensor) else val
        for key, val in kwargs.items()
    }  # fmt: skip
    problem = validate_problem(**detached, feature_weights=W)
    recipe = PrecisionRecipe(**recipe_fn(case.dtype))  # type: ignore[arg-type]
    named = dict(zip(inputs, grads, strict=True))
    print(
        f"{form} {case.feature_map} {case.dtype} vs float64 autograd:",
        autograd_errors(problem, named, do, d_finals),
    )
    result = assert_linattn_close(
        problem, o.detach(), None if final is None else final,
        recipe=recipe, grads=named, do=do, d_final_state=d_final, name=f"triton/{form}-lifted",
    )  # fmt: skip
    scores = ", ".join(f"{c.tensor} {c.deciding:.3g}" for c in result.comparisons)
    print(f"{form} {case.feature_map} {case.dtype}: {scores}")


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize(
    ("feature_map", "overrides", "argument"),
    [
        ("taylor2", {"g": torch.zeros(1, 8, 1, 3)}, "g"),
        ("favor+", {}, "feature_weights"),
        ("favor+", {"feature_weights": torch.randn(4, 2)}, "feature_weights"),
        ("favor+", {"feature_weights": torch.randn(4)}, "feature_weights"),
        ("favor+", {"feature_weights": torch.randn(4, 3, device="meta")}, "feature_weights"),
        ("rebased", {"feature_weights": torch.randn(4, 3)}, "feature_weights"),
        ("elu1", {"feature_weights": torch.randn(4, 3)}, "feature_weights"),
        ("identity", {"feature_weights": torch.randn(4, 3)}, "feature_weights"),
        ("taylor2", {"initial_state": torch.zeros(1, 1, 3, 2)}, "initial_state"),
        ("rebased", {"scale": float("nan")}, "scale"),
        ("taylor2", {"eps": 1e-3}, "eps"),
        ("taylor2", {"cu_seqlens": torch.tensor([0, 3, 5])}, "cu_seqlens"),
        ("taylor2", {"k": torch.randn(1, 8, 1, 2)}, "k"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(
    form: str, feature_map: str, overrides: dict[str, Any], argument: str
) -> None:
    fn, _, _ = FORMS[form]
    args: dict[str, Any] = {"q": torch.randn(1, 8, 1, 3), "k": torch.randn(1, 8, 1, 3),
                            "v": torch.randn(1, 8, 1, 2), "feature_map": feature_map}  # fmt: skip
    args.update(overrides)
    with pytest.raises(ValueError, match=argument):
        fn(**args)


@pytest.mark.parametrize("form", list(FORMS))
def test_too_many_features_is_refused_naming_the_cause(form: str) -> None:
    fn, _, _ = FORMS[form]
    q = torch.randn(1, 4, 1, 16)
    v = torch.randn(1, 4, 1, 2)
    # taylor2 with K = 16 has F = 273 state rows, above the forms' 256.
    with pytest.raises(ValueError, match="K"):
        fn(q, q, v, feature_map="taylor2")
    with pytest.raises(ValueError, match="feature_weights"):
        fn(q, q, v, feature_map="favor+", feature_weights=torch.randn(300, 16))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"feature_map": "elu1"}, "feature_map"),
        ({"feature_map": "favor+"}, "weights"),
        ({"feature_map": "favor+", "weights": torch.randn(3, 2)}, "weights"),
        (
            {
                "feature_map": "favor+",
                "weights": torch.randn(3, 3, dtype=torch.float64) * float("inf"),
            },
            "weights",
        ),
        ({"feature_map": "taylor2", "weights": torch.randn(3, 3)}, "weights"),
        ({"feature_map": "taylor2", "prescale": float("inf")}, "prescale"),
        ({"feature_map": "taylor2", "prescale": True}, "prescale"),
        ({"feature_map": "rebased", "stabilise": True}, "stabilise"),
        ({"feature_map": "favor+", "weights": torch.randn(3, 3), "stabilise": 1}, "stabilise"),
    ],
)
def test_lift_bad_arguments_raise_value_error_naming_them(
    kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        lift_features(torch.randn(2, 3), **kwargs)
    with pytest.raises(ValueError, match="x"):
        lift_features(torch.zeros(2, 3, dtype=torch.int64), "taylor2")
