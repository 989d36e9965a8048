# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The chunk bound for inverses other than forward substitution (docs/error-model.md §8.10).

Two correct kernels of the soundness corpus (tests/corpus/delta) invert each chunk's triangular
system in ways the substitution model does not cover: `torch.linalg.inv` (LU with pivoting:
its rows mix, so an output whose exact value is 0 comes out nonzero) and a Neumann product
(exact in exact arithmetic, but its powers of N reach 1e6 where |T| stays near 1). Each fails
the bound of forward substitution and is not rejected once its kind is charged: pivoting for a
kernel that does not declare bit-exact causality, products where the recipe declares them (on
this case honestly ``ill_conditioned``: the product form certifies no digit of o).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from linattn_properties.delta import delta_catalogue

from linattn_verify.core.loading import import_file
from linattn_verify.delta.inverse import inverse_magnitude
from linattn_verify.delta.kernel import DeltaCapabilities, DeltaKernel, DeltaRecipe
from linattn_verify.delta.reference import forward_substitution_inverse
from linattn_verify.delta.strategies import DeltaCase

CORPUS = Path(__file__).parents[1] / "corpus" / "delta"
OUTPUTS = delta_catalogue()["outputs_match_oracle"]


def corpus_kernel(file: str, function: str, recipe: DeltaRecipe, **caps: object) -> DeltaKernel:
    module = import_file(CORPUS / file, f"_linattn_corpus_{Path(file).stem}")
    capabilities = DeltaCapabilities(deterministic=True, varlen=False, **caps)  # type: ignore[arg-type]
    return DeltaKernel(f"corpus/{function}", getattr(module, function), capabilities, recipe)


# β = 0 on the first tokens and near-parallel bf16 keys whose |A| reaches 1.003: LU pivots, and
# o_0, exactly 0, came out 2.9e-9 against a substitution bound of 4.6e-41 (issue #25).
PIVOTING_CASE = DeltaCase(
    B=1, T=13, H=1, K=16, V=1, dtype="bfloat16", gate="none", gate_family="none",
    beta_family="mixed", key_family="near_parallel", value_family="unit", l2norm_qk=False,
    negative_eigenvalues=False, initial_state=False, output_final_state=False, seq_lens=None,
    scale=None, seed=0,
)  # fmt: skip

# K = 1, β near 2: the entries of N are about ±2 and the Neumann product's powers reach 8.8e5.
PRODUCTS_CASE = DeltaCase(
    B=1, T=16, H=1, K=1, V=1, dtype="float32", gate="none", gate_family="none",
    beta_family="near_two", key_family="unit", value_family="tiny", l2norm_qk=False,
    negative_eigenvalues=True, initial_state=False, output_final_state=True, seq_lens=None,
    scale=1.0, seed=2,
)  # fmt: skip


@pytest.mark.parametrize(("causal_exact", "status"), [(True, "failed"), (False, "held")])
def test_a_pivoting_solver_is_charged_unless_causality_is_declared(
    causal_exact: bool, status: str
) -> None:
    recipe = DeltaRecipe(form="chunk", chunk_size=32)
    kernel = corpus_kernel(
        "chunk_linalg_inv.py", "delta_rule_chunk32", recipe, causal_exact=causal_exact
    )
    result = OUTPUTS(PIVOTING_CASE, kernel)
    assert result.status == status, result.report()


@pytest.mark.parametrize(
    ("method", "status"), [("substitution", "failed"), ("products", "ill_conditioned")]
)
def test_a_product_inverse_holds_once_declared(method: str, status: str) -> None:
    recipe = DeltaRecipe(form="chunk", chunk_size=16, inverse_method=method)  # type: ignore[arg-type]
    kernel = corpus_kernel(
        "chunk_neumann.py",
        "chunk_kda16",
        recipe,
        gates=("none", "scalar", "vector"),
        causal_exact=True,
    )
    result = OUTPUTS(PRODUCTS_CASE, kernel)
    assert result.status == status, result.report()


def test_the_pivoting_and_product_magnitudes_contain_substitutions() -> None:
    gen = torch.Generator().manual_seed(0)
    c = 12
    L_off = torch.randn(2, c, c, generator=gen, dtype=torch.float64).tril(-1) * 1.5
    T = forward_substitution_inverse(torch.eye(c, dtype=torch.float64) + L_off)
    base = inverse_magnitude(L_off, T)
    for kind in ("pivoting", "products"):
        wider = inverse_magnitude(L_off, T, kind=kind)  # type: ignore[arg-type]
        assert bool((wider >= base).all())
    # Pivoting mixes rows: its magnitude reaches above the diagonal; products keep T triangular.
    assert float(inverse_magnitude(L_off, T, kind="pivoting").triu(1).abs().max()) > 0
    assert float(inverse_magnitude(L_off, T, kind="products").triu(1).abs().max()) == 0
    # With entries below 1 in magnitude nothing pivots: no row mixes into an earlier one.
    small = replace_scale(L_off, 0.1)
    T_small = forward_substitution_inverse(torch.eye(c, dtype=torch.float64) + small)
    pivoting = inverse_magnitude(small, T_small, kind="pivoting")
    assert float(pivoting.triu(1).abs().max()) == 0


def replace_scale(x: torch.Tensor, bound: float) -> torch.Tensor:
    """``x`` scaled so that its largest magnitude is ``bound``."""
    return x * (bound / float(x.abs().max()))
