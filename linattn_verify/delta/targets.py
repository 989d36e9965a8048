# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A third-party delta-rule kernel as ``check --family delta`` describes it, saved for replay."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from linattn_verify.core.loading import load_kernel_function
from linattn_verify.core.source import TargetSource, tuples_in
from linattn_verify.delta.kernel import DeltaCapabilities, DeltaKernel, DeltaRecipe
from linattn_verify.errors import InvalidArgument
from linattn_verify.signature import check_call, declared_capabilities, fit_flags, fit_keyword


@dataclass(frozen=True)
class DeltaKernelSource(TargetSource[DeltaKernel]):
    """A delta-rule kernel named by ``module:function`` (or ``file.py:function``) and declared.

    Its fields are `TargetSource`'s: target, capabilities, recipe, timeout, inferred.
    """

    capabilities: DeltaCapabilities
    recipe: DeltaRecipe

    family: ClassVar[str] = "delta"

    def kernel(self, fn: Callable[..., Any]) -> DeltaKernel:
        """The declared `DeltaKernel` of ``fn``."""
        return DeltaKernel(
            name=self.target,
            fn=fn,
            capabilities=self.capabilities,
            recipe=self.recipe,
            source=self.resolved().to_json(),
        )

    @classmethod
    def declaration_from_json(cls, document: Mapping[str, Any]) -> dict[str, Any]:
        """Capabilities and recipe."""
        return {
            "capabilities": DeltaCapabilities(
                **tuples_in(document["capabilities"], DeltaCapabilities)
            ),
            "recipe": DeltaRecipe(**dict(document["recipe"])),
        }


def delta_source_from_args(args: Any, *, on_cuda: bool) -> DeltaKernelSource:
    """The kernel ``check --family delta`` describes by its flags and its signature.

    Raises:
        InvalidArgument: naming the flag that does not fit the delta family, or the parameter
            the kernel's signature lacks for what was declared.
    """
    if args.form not in ("recurrent", "chunk"):
        raise InvalidArgument(
            f"Got --form {args.form}, but a delta-rule kernel's recipe needs --form recurrent or "
            "--form chunk (the error bound of the chunk form depends on its triangular inverse)."
        )
    dot = args.dot_precision or ("tf32" if on_cuda else "ieee")
    if dot == "tf32x3":
        raise InvalidArgument("Got --dot-precision tf32x3, which the delta family does not model.")

    def storage(flag: str) -> str | None:
        return None if flag == "none" else flag

    recipe = DeltaRecipe(
        form=args.form,
        chunk_size=args.chunk_size,
        accumulation=args.accumulation or ("mma" if on_cuda and dot != "ieee" else "ieee"),
        tf32=dot == "tf32",
        inverse_dtype=storage(args.inverse_dtype),
        intermediate_dtype=storage(args.intermediate_dtype),
        state_dtype=storage(args.state_dtype),
        casts_on_path=0 if args.intermediate_dtype == "none" else args.casts,
        inverse_method=args.inverse_method,
    )
    fn = load_kernel_function(args.target)
    sig, fitted = fit_flags(fn, args)
    l2norm = fit_keyword(
        sig,
        "use_qk_l2norm_in_kernel",
        declared=args.l2norm != "off",
        explicit=args.l2norm in ("both", "on"),
        flag=f"--l2norm {args.l2norm}",
        without="it does not normalise q and k (--l2norm off)",
    )
    l2norm_values = {"both": (False, True), "on": (True,), "off": (False,)}[
        args.l2norm or ("both" if l2norm.supported else "off")
    ]
    capabilities = DeltaCapabilities(
        gates=tuple(args.gates),
        l2norm_qk=l2norm_values,
        negative_eigenvalues=args.beta_max > 1,
        unit_norm_keys=not args.any_key_norm,
        backward=not args.no_backward,
        **declared_capabilities(args, fitted),
    )
    if args.value_gate and args.form != "recurrent":
        raise InvalidArgument(
            "--value-gate is judged under the recurrent recipe only: add --form recurrent."
        )
    gated = capabilities.takes_g
    positional = ["q", "k", "v", "g", "beta"] if gated else ["q", "k", "v", "beta"]
    keywords = [name for name, fit in fitted.items() if fit.supported]
    keywords += ["use_qk_l2norm_in_kernel"] if l2norm.supported else []
    keywords += ["gv"] if args.value_gate else []
    convention = (
        "fn(q, k, v[, g], beta, *, scale, initial_state, output_final_state, cu_seqlens, "
        "use_qk_l2norm_in_kernel)"
    )
    check_call(fn, positional, keywords, convention)
    notes = [fit.note for fit in (*fitted.values(), l2norm) if fit.note]
    return DeltaKernelSource(
        target=args.target,
        capabilities=capabilities,
        recipe=recipe,
        timeout=args.timeout,
        inferred=tuple(notes),
    )


__all__ = ["DeltaKernelSource", "delta_source_from_args"]
