# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A kernel's precision recipe: what the error bound needs to know about how it computes.

docs/error-model.md §7 lists the ingredients. The bound (`linattn_verify.linear_attn.tolerance`)
turns a recipe plus the problem's shapes into a per-term relative error; a recipe that claims less
rounding than the kernel does makes correct kernels fail, one that claims more makes the bound
blunter.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple, get_args

import torch

from linattn_verify import typing
from linattn_verify.core.rounding import UNIT_ROUNDOFF
from linattn_verify.errors import InvalidArgument
from linattn_verify.typing import (
    Accumulation,
    DecayScan,
    Division,
    DotPrecision,
    Form,
    Normalizer,
)


def dtype_name(dtype: torch.dtype) -> str:
    """Return ``"float32"`` etc. for a torch floating dtype the harness knows.

    Raises:
        InvalidArgument: for any other dtype.
    """
    name = typing.dtype_name(dtype)
    if name not in typing.DTYPE_NAMES:
        raise InvalidArgument(f"Expected a floating dtype but got dtype={dtype}.")
    return name


class DivisionLimits(NamedTuple):
    """The range of a reciprocal division's dtype (`PrecisionRecipe.division_limits`)."""

    subnormal_abs: float  # half the smallest subnormal: the absolute error of an underflow
    smallest_normal: float
    largest: float


@dataclass(frozen=True)
class PrecisionRecipe:
    """How a kernel rounds, as far as the error bound is concerned.

    Attributes:
        form: The algorithm (``"parallel"``, ``"chunk"``, ``"recurrent"``) or `None` when unknown;
            unknown forms are charged the rounding counts of all three. Default: `None`.
        chunk_size: C for the chunk form (and the block of chunk-local decay cumsums).
            Default: `64`.
        accumulation: ``"ieee"`` fp32 round-to-nearest adds (u_acc = 2^-24), ``"mma"``
            tensor-core accumulation (u_acc = 2^-23), ``"float64"`` for a computation done
            wholly in float64 (every unit roundoff becomes 2^-53), or ``"input"``: every sum and
            elementwise operation in the input dtype (its unit roundoff, at least fp32's, for
            both; `linattn_verify.linear_attn._bounds.terms.Units.of` resolves it). Default:
            `"ieee"`.
        dot_precision: ``tl.dot`` input precision for fp32 operands. Default: `"ieee"`.
        dots_on_path: How many ``tl.dot`` products a single term passes through (two for
            ``(QK^T)V``; zero for an elementwise recurrence). Default: `2`.
        intermediate_dtype: Dtype intermediates are rounded to inside the kernel (P, S, scaled
            q/k), or `None` when everything stays fp32. ``"input"`` means the input dtype.
            Default: `None`.
        casts_on_path: How many such roundings a single term passes through. Default: `0`.
        decay_scan: How the decay weights are obtained. Default: `"chunk_local"`.
        division: How the normalizer divides: ``"full"`` (u_div = 4u), ``"rn"`` (u) or
            ``"reciprocal"`` (1/Z rounded, then a multiply: docs/error-model.md §2.3).
            Default: `"full"`.
        division_dtype: The dtype the division (or the reciprocal and the multiply) is computed
            in: ``"float32"`` or ``"input"``. Default: `"float32"`.
        naive_elu1: φ = elu1 evaluated as (exp(x)-1)+1, an absolute error of 2u. Default: `False`.
        eps_dtype: The dtype eps is added in (a name of `UNIT_ROUNDOFF`, or ``"input"``: the
            input dtype); the oracle uses eps rounded to it. Default: `"float32"`.
        normalizer: Where eps goes (`linattn_verify.typing.Normalizer`): ``"offset"``,
            s φ(q)·z + eps, ``"in-dot"``, s φ(q)·(z + eps), or ``"clamp"``, max(s φ(q)·z, eps).
            What the kernel computes rather
            than how it rounds, kept here beside ``eps_dtype`` because both decide the eps the
            oracle sees (`linattn_verify.linear_attn.tolerance.as_kernel_sees`). ``"in-dot"``
            is judged without decay only. Default: `"offset"`.
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
    division_dtype: str = "float32"
    naive_elu1: bool = False
    eps_dtype: str = "float32"
    normalizer: Normalizer = "offset"

    def __post_init__(self) -> None:
        _check_choice("form", self.form, (*get_args(Form), None))
        _check_choice("accumulation", self.accumulation, get_args(Accumulation))
        _check_choice("dot_precision", self.dot_precision, get_args(DotPrecision))
        _check_choice("decay_scan", self.decay_scan, get_args(DecayScan))
        _check_choice("division", self.division, get_args(Division))
        _check_choice("division_dtype", self.division_dtype, ("float32", "input"))
        _check_choice(
            "intermediate_dtype", self.intermediate_dtype, (*UNIT_ROUNDOFF, "input", None)
        )
        _check_choice("eps_dtype", self.eps_dtype, (*UNIT_ROUNDOFF, "input"))
        _check_choice("normalizer", self.normalizer, get_args(Normalizer))
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

    def u_acc(self, input_dtype: torch.dtype) -> float:
        """Unit roundoff of accumulation for inputs of ``input_dtype``."""
        if self.accumulation == "input":
            return self.u_arith(input_dtype)
        return {"ieee": 2.0**-24, "mma": 2.0**-23, "float64": 2.0**-53}[self.accumulation]

    def u_arith(self, input_dtype: torch.dtype) -> float:
        """Unit roundoff of the elementwise arithmetic for inputs of ``input_dtype``.

        fp32's; float64's for a float64 recipe; the input dtype's (at least fp32's) for
        ``accumulation="input"``.
        """
        if self.accumulation == "float64":
            return 2.0**-53
        if self.accumulation == "input":
            return max(UNIT_ROUNDOFF[dtype_name(input_dtype)], 2.0**-24)
        return 2.0**-24

    @property
    def u_op(self) -> float:
        """Relative error of one ``tl.dot`` operand (0 for IEEE fp32 operands).

        tf32 keeps 10 explicit mantissa bits; raw fp32 bits may be truncated, so 2^-10 is the
        safe per-operand figure (docs/error-model.md §1). tf32x3 drops the small*small product and
        truncates the small parts: about 2^-21 per product, modelled as 2^-22 per operand.
        """
        return {"ieee": 0.0, "tf32": 2.0**-10, "tf32x3": 2.0**-22}[self.dot_precision]

    def u_div(self, input_dtype: torch.dtype) -> float:
        """Relative error of the division o = N / Z (docs/error-model.md §2.3).

        ``full``: 4u, ``rn``: u, in the division dtype's u. ``reciprocal``: 1/Z and the multiply
        round once each, and in a 16-bit division dtype N and Z are first rounded to it too:
        2u, or 4u in a 16-bit dtype (the reciprocal's underflow and overflow are charged apart,
        `division_limits`).
        """
        unit = self._division_unit(input_dtype)
        if self.division == "reciprocal":
            return (2 if unit <= 2.0**-24 else 4) * unit
        return (4 if self.division == "full" else 1) * unit

    def division_limits(self, input_dtype: torch.dtype) -> DivisionLimits | None:
        """For a reciprocal division: its dtype's half smallest subnormal, smallest normal, max.

        1/Z below the normal range loses up to the first absolutely; the backward's (1/Z)^2
        below the second loses the denominator's gradient; 1/Z or (1/Z)^2 above the third
        overflows to inf. `None` for a direct division (its rounding is relative).
        """
        if self.division != "reciprocal":
            return None
        name = dtype_name(input_dtype) if self.division_dtype == "input" else "float32"
        if self.accumulation == "float64":
            name = "float64"
        info = torch.finfo(typing.torch_dtype(name))
        tiny = float(info.smallest_normal)
        return DivisionLimits(tiny * float(info.eps) / 2, tiny, float(info.max))

    def _division_unit(self, input_dtype: torch.dtype) -> float:
        arith = self.u_arith(input_dtype)
        if self.division_dtype == "input" and self.accumulation != "float64":
            return max(UNIT_ROUNDOFF[dtype_name(input_dtype)], arith)
        return arith

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

    def effective_eps(self, eps: float, input_dtype: torch.dtype) -> float:
        """Return eps as the kernel adds it: rounded to ``eps_dtype`` (``"input"``: the input's)."""
        dtype = input_dtype if self.eps_dtype == "input" else typing.torch_dtype(self.eps_dtype)
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


__all__ = ["DivisionLimits", "PrecisionRecipe", "dtype_name"]
