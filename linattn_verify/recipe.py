# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A kernel's precision recipe: what the error bound needs to know about how it computes.

docs/error-model.md §7 lists the ingredients. The bound (`linattn_verify.tolerance`) turns a recipe
plus the problem's shapes into a per-term relative error; a recipe that claims less rounding
than the kernel does makes correct kernels fail, one that claims more makes the bound blunter.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, get_args

import torch

from linattn_verify import typing
from linattn_verify.errors import InvalidArgument
from linattn_verify.typing import (
    Accumulation,
    DecayScan,
    Division,
    DotPrecision,
    Form,
)

UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}
"""u = 2^-t for each storage format (docs/error-model.md §1)."""


def dtype_name(dtype: torch.dtype) -> str:
    """Return ``"float32"`` etc. for a torch floating dtype the harness knows.

    Raises:
        InvalidArgument: for any other dtype.
    """
    name = typing.dtype_name(dtype)
    if name not in typing.DTYPE_NAMES:
        raise InvalidArgument(f"Expected a floating dtype but got dtype={dtype}.")
    return name


@dataclass(frozen=True)
class PrecisionRecipe:
    """How a kernel rounds, as far as the error bound is concerned.

    Attributes:
        form: The algorithm (``"parallel"``, ``"chunk"``, ``"recurrent"``) or `None` when unknown;
            unknown forms are charged the rounding counts of all three. Default: `None`.
        chunk_size: C for the chunk form (and the block of chunk-local decay cumsums).
            Default: `64`.
        accumulation: ``"ieee"`` fp32 round-to-nearest adds (u_acc = 2^-24), ``"mma"``
            tensor-core accumulation (u_acc = 2^-23), or ``"float64"`` for a computation done
            wholly in float64 (every unit roundoff becomes 2^-53). Default: `"ieee"`.
        dot_precision: ``tl.dot`` input precision for fp32 operands. Default: `"ieee"`.
        dots_on_path: How many ``tl.dot`` products a single term passes through (two for
            ``(QK^T)V``; zero for an elementwise recurrence). Default: `2`.
        intermediate_dtype: Dtype intermediates are rounded to inside the kernel (P, S, scaled
            q/k), or `None` when everything stays fp32. ``"input"`` means the input dtype.
            Default: `None`.
        casts_on_path: How many such roundings a single term passes through. Default: `0`.
        decay_scan: How the decay weights are obtained. Default: `"chunk_local"`.
        division: fp32 division flavour (u_div = 4u for ``"full"``, u for ``"rn"``).
            Default: `"full"`.
        naive_elu1: φ = elu1 evaluated as (exp(x)-1)+1, an absolute error of 2u. Default: `False`.
        eps_dtype: The dtype eps is added in; the oracle uses eps rounded to it. Default:
            `"float32"`.
    """

    form: Form | None = None
    chunk_size: int = 64
    accumulation: Accumulation = "ieee"
    dot_precision: DotPrecision = "ieee"
    dots_on_path: int = 2
    intermediate_dtype: str | None = None
    casts_on_path: int = 0
    decay_scan: DecayScan = "chunk_local"
    division: Division = "full"
    naive_elu1: bool = False
    eps_dtype: str = "float32"

    def __post_init__(self) -> None:
        _check_choice("form", self.form, (*get_args(Form), None))
        _check_choice("accumulation", self.accumulation, get_args(Accumulation))
        _check_choice("dot_precision", self.dot_precision, get_args(DotPrecision))
        _check_choice("decay_scan", self.decay_scan, get_args(DecayScan))
        _check_choice("division", self.division, get_args(Division))
        _check_choice(
            "intermediate_dtype", self.intermediate_dtype, (*UNIT_ROUNDOFF, "input", None)
        )
        _check_choice("eps_dtype", self.eps_dtype, tuple(UNIT_ROUNDOFF))
        for name in ("chunk_size", "dots_on_path", "casts_on_path"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"Got {name}={value!r}, but {name} must be an int >= 0.")
        if self.chunk_size < 1:
            raise InvalidArgument(f"Got chunk_size={self.chunk_size}, but chunk_size must be >= 1.")
        if self.casts_on_path and self.intermediate_dtype is None:
            raise InvalidArgument(
                f"Got casts_on_path={self.casts_on_path} with intermediate_dtype=None; name the "
                "dtype the intermediates are rounded to."
            )

    @property
    def u_acc(self) -> float:
        """Unit roundoff of accumulation."""
        return {"ieee": 2.0**-24, "mma": 2.0**-23, "float64": 2.0**-53}[self.accumulation]

    @property
    def u_arith(self) -> float:
        """Unit roundoff of the elementwise arithmetic (fp32, or float64 for float64 recipes)."""
        return 2.0**-53 if self.accumulation == "float64" else 2.0**-24

    @property
    def u_op(self) -> float:
        """Relative error of one ``tl.dot`` operand (0 for IEEE fp32 operands).

        tf32 keeps 10 explicit mantissa bits; raw fp32 bits may be truncated, so 2^-10 is the
        safe per-operand figure (docs/error-model.md §1). tf32x3 drops the small*small product and
        truncates the small parts: about 2^-21 per product, modelled as 2^-22 per operand.
        """
        return {"ieee": 0.0, "tf32": 2.0**-10, "tf32x3": 2.0**-22}[self.dot_precision]

    @property
    def u_div(self) -> float:
        """Relative error of the fp32 division."""
        return (4 if self.division == "full" else 1) * self.u_arith

    def u_low(self, input_dtype: torch.dtype) -> float:
        """Unit roundoff of the intermediate dtype (0 when there is none)."""
        if self.intermediate_dtype is None:
            return 0.0
        name = (
            dtype_name(input_dtype)
            if self.intermediate_dtype == "input"
            else self.intermediate_dtype
        )
        return UNIT_ROUNDOFF[name]

    def effective_eps(self, eps: float) -> float:
        """Return eps as the kernel adds it: rounded to ``eps_dtype``."""
        dtype = typing.torch_dtype(self.eps_dtype)
        return float(torch.tensor(eps, dtype=torch.float64).to(dtype).double())

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> PrecisionRecipe:
        """Build a recipe from a kernel's declaration (unknown keys are an error)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise InvalidArgument(
                f"Got unknown precision-recipe keys {unknown}; known: {sorted(known)}."
            )
        return cls(**spec)


def _check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"Got {name}={value!r}, but {name} must be one of {choices}.")


__all__ = ["UNIT_ROUNDOFF", "PrecisionRecipe", "dtype_name"]
