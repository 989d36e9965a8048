# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The linear-attention family (`LinearAttnFamily`), registered as ``linear_attn``.

Linear attention with no, scalar or vector (GLA) gates, normalized or not, with elementwise or
lifted feature maps, in the calling convention ``fn(q, k, v[, g], *, scale, initial_state,
output_final_state[, cu_seqlens])``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from linattn_verify.core.arguments import csv_of, dtype_name, nonnegative_float, positive
from linattn_verify.core.family import Family
from linattn_verify.typing import KEEPS_K, KERNEL_DTYPES, Division, FeatureMap, Normalizer

if TYPE_CHECKING:
    import torch
    from hypothesis.strategies import SearchStrategy

    from linattn_verify.core.recipe_steps import Ladders
    from linattn_verify.linear_attn.kernel import Kernel
    from linattn_verify.linear_attn.recipe import PrecisionRecipe
    from linattn_verify.linear_attn.semantics import Problem
    from linattn_verify.linear_attn.strategies import ProblemSpec
    from linattn_verify.linear_attn.targets import KernelSource


class LinearAttnFamily(Family["Kernel", "ProblemSpec", "Problem"]):
    """Linear attention: decay none/scalar/vector (GLA), normalized or not, feature maps."""

    name: ClassVar[str] = "linear_attn"
    description: ClassVar[str] = (
        "linear attention: decay none/scalar/vector (GLA), normalized or not, feature maps"
    )
    reach: ClassVar[bool] = True

    def case_type(self) -> type[ProblemSpec]:
        """`linattn_verify.linear_attn.strategies.ProblemSpec`."""
        from linattn_verify.linear_attn.strategies import ProblemSpec

        return ProblemSpec

    def cases_for(
        self, kernel: Kernel, *, max_seq_len: int, max_head_dim: int, realistic: bool
    ) -> SearchStrategy[ProblemSpec]:
        """`linear_attn.strategies.kernel_specs` (realistic values: `REALISTIC_FAMILIES`)."""
        from linattn_verify.linear_attn.strategies import REALISTIC_FAMILIES, kernel_specs

        if realistic:
            return kernel_specs(
                kernel,
                max_seq_len=max_seq_len,
                max_head_dim=max_head_dim,
                values=REALISTIC_FAMILIES,
            )
        return kernel_specs(kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim)

    def narrowed(self, kernel: Kernel, dtype: str, gates: Sequence[str]) -> Kernel | None:
        """``kernel`` drawing only ``dtype`` and the gate shapes of ``gates`` it declares.

        A kernel with a data-dependent decay declares the gate shapes it takes; any other (no
        decay, or a fixed one) counts as scalar: `None` when none of ``gates`` is among them.
        """
        cap = kernel.capabilities
        declared = cap.gates if cap.decay and kernel.implied_decay is None else ("scalar",)
        if not any(g in declared for g in gates):
            return None
        kept = tuple(g for g in cap.gates if g in gates) or cap.gates
        return replace(kernel, capabilities=replace(cap, gates=kept, dtypes=(dtype,)))

    def problem_from_tensors(
        self, tensors: Mapping[str, torch.Tensor], case: ProblemSpec
    ) -> Problem:
        """`validate_problem` of the saved tensors with the case's options."""
        from linattn_verify.linear_attn.semantics import validate_problem

        h0: Any = tensors.get("initial_state")
        if h0 is not None and case.normalize:
            # The calling convention's state argument (see `Problem.state_arg`).
            h0 = (h0, tensors["initial_key_sum"])
        problem = validate_problem(
            tensors["q"],
            tensors["k"],
            tensors["v"],
            tensors.get("g"),
            scale=case.scale,
            normalize=case.normalize,
            eps=case.eps,
            feature_map=case.feature_map,
            initial_state=h0,
            output_final_state=case.output_final_state,
            cu_seqlens=tensors.get("cu_seqlens"),
            feature_weights=tensors.get("feature_weights"),
            query_feature_map=case.query_feature_map,
            gv=tensors.get("gv"),
        )
        return dataclasses.replace(problem, omit=frozenset(case.omit))

    def source_from_json(self, document: Mapping[str, Any]) -> KernelSource:
        """`linattn_verify.linear_attn.targets.KernelSource.from_json`."""
        from linattn_verify.linear_attn.targets import KernelSource

        return KernelSource.from_json(document)

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """What a linear-attention kernel computes, and how its normalizer and map round."""
        sem = parser.add_argument_group("what the kernel computes (--family linear_attn)")
        sem.add_argument(
            "--normalized", action="store_true", help="output is divided by s q·z + eps"
        )
        sem.add_argument(
            "--eps",
            type=nonnegative_float,
            default=0.0,
            help="eps of the normalizer. Default: %(default)r",
        )
        sem.add_argument(
            "--decay",
            choices=("none", "scalar", "vector", "data"),
            default="none",
            help="the log decay g the kernel takes: 'scalar' g [B, T, H] ('data' is an alias), "
            "'vector' g [B, T, H, K] (a gate per key dimension, GLA's). Default: %(default)r",
        )
        sem.add_argument(
            "--decay-required",
            action="store_true",
            help="the kernel takes no g=None (FLA's chunk_gla asserts a gate): no case without "
            "decay is drawn (g = 0 stands for it)",
        )
        sem.add_argument(
            "--feature-map",
            choices=get_args(FeatureMap),
            default="identity",
            help="feature map the kernel applies itself: elementwise (identity, elu1, relu, exp), "
            "softmax over the features, or lifted (taylor2: Based's 1 + x + x²/2 of x = s q·k; "
            "rebased: x²; favor+: Performer's exp(Wx - |x|²/2)/√m, with W drawn by the harness "
            "and passed as feature_weights=W). Default: %(default)r",
        )
        sem.add_argument(
            "--query-feature-map",
            choices=KEEPS_K,
            default=None,
            help="the queries' own map where it is not the keys' (--feature-map): 'efficient "
            "attention' is --query-feature-map softmax --feature-map exp. Default: the same",
        )
        sem.add_argument(
            "--normalizer",
            choices=get_args(Normalizer),
            default="offset",
            help="where eps goes: 'offset' s q·z + eps; 'in-dot' s q·(z + eps), eps added to every "
            "entry of the key sum (performer-pytorch; judged without decay); 'clamp' max(s q·z, "
            "eps) (linear-attention-transformer). Default: %(default)r",
        )
        sem.add_argument(
            "--seq-len-multiple",
            type=positive,
            default=1,
            metavar="N",
            help="T must be a multiple of N (linear-attention-transformer's bucket_size): no "
            "other T is drawn. Default: 1",
        )
        sem.add_argument(
            "--zero-denominator",
            choices=("zero", "ieee", "any"),
            default="any",
            help="what a normalized output is where the exact denominator is exactly 0 (0/0): "
            "'zero' returns 0, 'ieee' the IEEE quotient (NaN for 0/0, ±inf for x/0), 'any' is "
            "not judged there. Default: %(default)r",
        )
        sem.add_argument(
            "--even-head-dims",
            type=csv_of(KERNEL_DTYPES),
            default=(),
            metavar="DTYPES",
            help="dtypes in which K and V must be even (FLA's 16-bit chunked backward). "
            "Default: none",
        )
        rec = parser.add_argument_group("how its map and normalizer round (--family linear_attn)")
        rec.add_argument(
            "--naive-elu1",
            action="store_true",
            help="elu1 evaluated as elu(x) + 1 (torch's F.elu then +1: an absolute error of 2u, "
            "and features of x << 0 may round to 0) instead of where(x > 0, x + 1, exp(x))",
        )
        rec.add_argument(
            "--division",
            choices=get_args(Division),
            default="full",
            help="how the normalizer divides: 'full' (fp32 division, 2 ulp), 'rn' (correctly "
            "rounded), 'reciprocal' (1/Z, then a multiply). Default: %(default)s",
        )
        rec.add_argument(
            "--division-dtype",
            type=dtype_name,
            choices=("float32", "input"),
            default="float32",
            help="dtype the division (or reciprocal and multiply) is computed in. "
            "Default: %(default)s",
        )
        rec.add_argument(
            "--eps-dtype",
            type=dtype_name,
            choices=("float32", "float16", "bfloat16", "float64", "input"),
            default="float32",
            help="dtype eps is added in ('input': the input dtype; fl16(1e-6) is not 1e-6). "
            "Default: %(default)s",
        )

    def source_from_args(self, args: argparse.Namespace, *, on_cuda: bool) -> KernelSource:
        """The kernel as ``check``'s flags and its signature describe it (`KernelSource`)."""
        from linattn_verify.core.loading import load_kernel_function
        from linattn_verify.linear_attn.kernel import Capabilities
        from linattn_verify.linear_attn.recipe import PrecisionRecipe
        from linattn_verify.linear_attn.targets import KernelSource
        from linattn_verify.signature import check_call, declared_capabilities, fit_flags

        if args.normalizer == "in-dot":
            from linattn_verify.errors import InvalidArgument

            if not args.normalized or args.decay != "none":
                raise InvalidArgument(
                    "--normalizer in-dot describes a normalized kernel without decay (a decayed "
                    "key sum would decay its eps too): add --normalized, leave out --decay."
                )
            if args.final_state_dtype == "input":
                raise InvalidArgument(
                    "--normalizer in-dot with --final-state-dtype input is not judged: the "
                    "returned key sum's rounding is charged in float32 only."
                )
        if args.normalizer == "clamp" and not (args.normalized and args.eps > 0):
            from linattn_verify.errors import InvalidArgument

            raise InvalidArgument(
                "--normalizer clamp describes max(s q·z, eps) with eps > 0: add --normalized "
                "and --eps."
            )
        dot = args.dot_precision or ("tf32" if on_cuda else "ieee")
        # argparse restricted these strings to the recipe's choices; PrecisionRecipe rechecks.
        recipe = PrecisionRecipe.from_dict(
            {
                "form": args.form,
                "chunk_size": args.chunk_size,
                "accumulation": args.accumulation
                or ("mma" if on_cuda and dot != "ieee" else "ieee"),
                "dot_precision": dot,
                "intermediate_dtype": None
                if args.intermediate_dtype == "none"
                else args.intermediate_dtype,
                "casts_on_path": 0 if args.intermediate_dtype == "none" else args.casts,
                "decay_scan": {"recurrent": "per_step", "parallel": "global"}.get(
                    args.form or "", "chunk_local"
                ),
                "division": args.division,
                "division_dtype": args.division_dtype,
                "naive_elu1": args.naive_elu1,
                "eps_dtype": args.eps_dtype,
                "normalizer": args.normalizer,
            }
        )
        fn = load_kernel_function(args.target)
        _, fitted = fit_flags(fn, args)
        capabilities = Capabilities(
            normalize=(args.normalized,),
            eps=args.eps if args.normalized else 0.0,
            feature_maps=(args.feature_map,),
            query_feature_map=args.query_feature_map,
            seq_len_multiple=args.seq_len_multiple,
            decay=args.decay != "none",
            gates=("vector",) if args.decay == "vector" else ("scalar",),
            decay_required=args.decay_required,
            backward=not args.no_backward,
            even_head_dims=args.even_head_dims,
            zero_denominator=args.zero_denominator,
            **declared_capabilities(args, fitted),
        )
        positional = ["q", "k", "v"] + (["g"] if capabilities.decay else [])
        keywords = [name for name, fit in fitted.items() if fit.supported]
        keywords += ["feature_weights"] if args.feature_map == "favor+" else []
        keywords += ["gv"] if args.value_gate else []
        convention = "fn(q, k, v[, g], *, scale, initial_state, output_final_state[, cu_seqlens])"
        check_call(fn, positional, keywords, convention)
        return KernelSource(
            target=args.target,
            capabilities=capabilities,
            recipe=recipe,
            form=args.form,
            timeout=args.timeout,
            inferred=tuple(fit.note for fit in fitted.values() if fit.note),
        )

    def recipe_ladders(
        self, declared: PrecisionRecipe, case: ProblemSpec, kernel: Kernel, dtype: torch.dtype
    ) -> Ladders:
        """`linear_attn.recipe_ladders.recipe_ladders`."""
        from linattn_verify.linear_attn.recipe_ladders import recipe_ladders

        return recipe_ladders(declared, case, kernel, dtype)

    def error_shape(self, case: ProblemSpec, kernel: Kernel) -> str | None:
        """`linattn_verify.compare.error_shapes.recognised` of the kernel's o on ``case``."""
        import torch

        from linattn_verify.compare.error_shapes import recognised
        from linattn_verify.linear_attn.tolerance import as_kernel_sees, forward_bounds

        problem = kernel.prepare(case.build())
        if kernel.supports(problem) is not None:
            return None
        recipe = kernel.precision_recipe(problem.q.dtype)
        with torch.no_grad():
            o, _ = kernel.call(problem)
        problem = as_kernel_sees(problem, recipe)
        causal_exact = kernel.capabilities.causal_exact
        exact = forward_bounds(
            problem,
            recipe,
            zero_denominator=kernel.capabilities.zero_denominator,
            causal_exact=causal_exact,
        ).tensors["o"]
        return recognised(problem, recipe, o, exact, causal_exact=causal_exact)

    def library_kernels(self, library: str) -> list[Kernel]:
        """FLA's linear-attention kernels (`linear_attn.adapters.fla.fla_kernels`)."""
        from linattn_verify.linear_attn.adapters.fla import fla_kernels

        return list(fla_kernels()) if library == "fla" else []

    def reach_case(self, kernel: Kernel, size: Any, seed: int) -> ProblemSpec:
        """`linattn_verify.linear_attn.reach.reach_spec`."""
        from linattn_verify.linear_attn.reach import reach_spec

        return reach_spec(kernel, size, seed)

    def drift_driver(self, kernel: Kernel, settings: Any) -> Any:
        """`linattn_verify.drift_families.LinearDriver`."""
        from linattn_verify.drift_families import LinearDriver

        return LinearDriver(kernel, settings)


__all__ = ["LinearAttnFamily"]
