# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The delta-rule family (`DeltaFamily`), registered as ``delta``.

DeltaNet (no gate), Gated DeltaNet (scalar gate) and KDA (vector gate) in FLA's calling
convention ``fn(q, k, v[, g], beta, *, scale, initial_state, output_final_state, cu_seqlens,
use_qk_l2norm_in_kernel)`` (`linattn_verify.delta.kernel`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from linattn_verify.core.arguments import csv_of, dtype_name
from linattn_verify.core.family import Family

if TYPE_CHECKING:
    import torch
    from hypothesis.strategies import SearchStrategy

    from linattn_verify.core.recipe_steps import Ladders
    from linattn_verify.delta.kernel import DeltaKernel, DeltaRecipe
    from linattn_verify.delta.problem import DeltaProblem
    from linattn_verify.delta.strategies import DeltaCase
    from linattn_verify.delta.targets import DeltaKernelSource


class DeltaFamily(Family["DeltaKernel", "DeltaCase", "DeltaProblem"]):
    """The delta rule: DeltaNet (no gate), Gated DeltaNet (scalar gate), KDA (vector gate)."""

    name: ClassVar[str] = "delta"
    description: ClassVar[str] = (
        "the delta rule: DeltaNet (no gate), Gated DeltaNet (scalar gate), KDA (vector gate)"
    )
    reach: ClassVar[bool] = True

    def case_type(self) -> type[DeltaCase]:
        """`linattn_verify.delta.strategies.DeltaCase`."""
        from linattn_verify.delta.strategies import DeltaCase

        return DeltaCase

    def cases_for(
        self, kernel: DeltaKernel, *, max_seq_len: int, max_head_dim: int, realistic: bool
    ) -> SearchStrategy[DeltaCase]:
        """`linattn_verify.delta.strategies.delta_cases_for`."""
        from linattn_verify.delta.strategies import delta_cases_for

        return delta_cases_for(
            kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim, realistic_only=realistic
        )

    def narrowed(self, kernel: DeltaKernel, dtype: str, gates: Sequence[str]) -> DeltaKernel | None:
        """``kernel`` with ``dtype`` and those gates (the gate-less cases only with both)."""
        # A run about some gate shapes only leaves out the gate-less (DeltaNet) cases.
        everything = {"scalar", "vector"} <= set(gates)
        cap = kernel.capabilities
        kept = tuple(g for g in cap.gates if g in gates or (g == "none" and everything))
        if not kept:
            return None
        return replace(kernel, capabilities=replace(cap, dtypes=(dtype,), gates=kept))

    def problem_from_tensors(
        self, tensors: Mapping[str, torch.Tensor], case: DeltaCase
    ) -> DeltaProblem:
        """`validate_delta` of the saved tensors with the case's options."""
        from linattn_verify.delta.problem import validate_delta

        problem = validate_delta(
            tensors["q"],
            tensors["k"],
            tensors["v"],
            tensors["beta"],
            tensors.get("g"),
            scale=case.scale,
            l2norm_qk=case.l2norm_qk,
            initial_state=tensors.get("initial_state"),
            output_final_state=case.output_final_state,
            cu_seqlens=tensors.get("cu_seqlens"),
            allow_negative_eigenvalues=case.negative_eigenvalues,
        )
        return replace(problem, omit=frozenset(case.omit))

    def source_from_json(self, document: Mapping[str, Any]) -> DeltaKernelSource:
        """`linattn_verify.delta.targets.DeltaKernelSource.from_json`."""
        from linattn_verify.delta.targets import DeltaKernelSource

        return DeltaKernelSource.from_json(document)

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """The gates, beta range, key norms and the chunk form's inverse and state storage."""
        delta = parser.add_argument_group("what the kernel computes (--family delta)")
        delta.add_argument(
            "--gates",
            type=csv_of(("none", "scalar", "vector")),
            default=("none",),
            help="the gates g it takes: none (DeltaNet: no g argument unless another is listed), "
            "scalar g [B, T, H] (Gated DeltaNet), vector g [B, T, H, K] (KDA). Default: none",
        )
        delta.add_argument(
            "--l2norm",
            choices=("both", "on", "off"),
            default=None,
            help="values of use_qk_l2norm_in_kernel it takes. Default: both when its signature "
            "names use_qk_l2norm_in_kernel, else off",
        )
        delta.add_argument(
            "--beta-max",
            type=float,
            choices=(1.0, 2.0),
            default=2.0,
            help="beta in [0, 1], or [0, 2) (negative eigenvalues). Default: %(default)r",
        )
        delta.add_argument(
            "--any-key-norm",
            action="store_true",
            help="keys need not be unit-norm (by default a case with ||k||² > 1 + 2^-6 and no "
            "in-kernel L2 norm is outside the kernel's contract)",
        )
        delta.add_argument(
            "--inverse-dtype",
            type=dtype_name,
            choices=("none", "input", "float16", "bfloat16"),
            default="none",
            help="what the chunk form's triangular inverse is stored in. Default: none (fp32)",
        )
        delta.add_argument(
            "--inverse-method",
            choices=("substitution", "products"),
            default="substitution",
            help="how the chunk form inverts its triangular system: forward substitution, a "
            "triangular solve or a block merge ('substitution'), or a Neumann/doubling product of "
            "(I + N^(2^k)) factors ('products'). A general pivoting solver (torch.linalg.inv) is "
            "charged for any kernel not declaring --causal-exact. Default: %(default)s",
        )
        delta.add_argument(
            "--state-dtype",
            type=dtype_name,
            choices=("none", "input", "float16", "bfloat16"),
            default="none",
            help="what the chunk-boundary state is rounded to before the chunk's dots read it. "
            "Default: none (fp32)",
        )

    def source_from_args(self, args: argparse.Namespace, *, on_cuda: bool) -> DeltaKernelSource:
        """`linattn_verify.delta.targets.delta_source_from_args`."""
        from linattn_verify.delta.targets import delta_source_from_args

        return delta_source_from_args(args, on_cuda=on_cuda)

    def recipe_ladders(
        self, declared: DeltaRecipe, case: DeltaCase, kernel: DeltaKernel, dtype: torch.dtype
    ) -> Ladders:
        """`linattn_verify.delta.recipe_ladders.recipe_ladders`."""
        from linattn_verify.delta.recipe_ladders import recipe_ladders

        del case, kernel
        return recipe_ladders(declared, dtype)

    def library_kernels(self, library: str) -> list[DeltaKernel]:
        """FLA's delta-rule kernels (`linattn_verify.delta.fla.fla_delta_kernels`)."""
        from linattn_verify.delta.fla import fla_delta_kernels

        return list(fla_delta_kernels()) if library == "fla" else []

    def reach_case(self, kernel: DeltaKernel, size: Any, seed: int) -> DeltaCase:
        """`linattn_verify.delta.reach.delta_reach_case`."""
        from linattn_verify.delta.reach import delta_reach_case

        return delta_reach_case(kernel, size, seed)

    def drift_driver(self, kernel: DeltaKernel, settings: Any) -> Any:
        """`linattn_verify.drift_families.DeltaDriver`."""
        from linattn_verify.drift_families import DeltaDriver

        return DeltaDriver(kernel, settings)


__all__ = ["DeltaFamily"]
