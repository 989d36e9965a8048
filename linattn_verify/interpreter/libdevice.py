# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Give ``triton.language.extra.libdevice`` functions numpy bodies under the interpreter.

Gap: ``triton.language.extra.libdevice`` is a module of empty stubs (``def exp(arg0): ...``);
a compiled kernel has them replaced by the backend's libdevice, but the interpreter calls the
stubs, which return `None` ("cannot convert None"). The CUDA module behind it,
``triton.language.extra.cuda.libdevice``, lowers to ``extern_elementwise``, which the
interpreter refuses.

Fix: while the patch is on, the floating-point functions of both modules are numpy functions
on interpreter tensors. Arguments are computed in their own dtype, fp32 or fp64 (the only
ones libdevice accepts; other dtypes raise `TypeError`, as compiling would), Python numbers
becoming tensors as Triton would make them. FLA uses ``exp``, ``exp2``, ``log1p``, ``tanh``,
``round`` and the ``fast_*`` approximations (``fast_expf``, ``fast_logf``, ``fast_log2f``,
``fast_tanhf``, ``fast_sinf``, ``fast_cosf``); the table below covers those and the usual
elementary functions. The ``fast_*`` versions are accurate here (numpy), not approximate as
on a GPU: error bounds must budget for the approximation, a CPU run does not show it.
``round`` rounds halves away from zero (C ``round``), ``rint`` to even. Kernels that bound a
function directly (``from ...libdevice import exp``) keep the stub; import the module instead.

Versions: both modules, and the interpreter helpers used here, are the same in triton 3.7, 3.8
and 3.9.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from linattn_verify.interpreter._guard import Restorer, check

NAME = "libdevice"
VERSIONS = ((3, 7), (3, 10))
"""The Triton versions this patch was written for: >=3.7, <3.10."""
REQUIRES = (
    "triton.language.extra.libdevice",
    "triton.runtime.interpreter.TensorHandle",
    "triton.runtime.interpreter._get_np_dtype",
    "triton.runtime.interpreter.interpreter_semantic.to_tensor",
)
"""The internals it replaces or calls."""

MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")
"""The modules whose functions are replaced (the second only when it imports)."""

Array = npt.NDArray[Any]


def _round_half_away(x: Array) -> Array:
    whole = np.trunc(x)
    # x - trunc(x) is exact, so comparing it with 1/2 decides the tie without rounding error.
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole)


def _erf(x: Array) -> Array:
    erf: Array = np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf


UNARY: dict[str, Callable[[Array], Array]] = {
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "nearbyint": np.rint,
    "round": _round_half_away,
    "sqrt": np.sqrt,
    "sqrt_rn": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "rsqrt_rn": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt,
    "rcbrt": lambda x: 1 / np.cbrt(x),
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(10, x, dtype=x.dtype),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x),
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": _erf,
    "saturatef": lambda x: np.clip(x, 0, 1),
    "fast_expf": np.exp,
    "fast_exp10f": lambda x: np.power(10, x, dtype=x.dtype),
    "fast_logf": np.log,
    "fast_log2f": np.log2,
    "fast_log10f": np.log10,
    "fast_sinf": np.sin,
    "fast_cosf": np.cos,
    "fast_tanf": np.tan,
    "fast_tanhf": np.tanh,
}
"""One-argument functions: name -> numpy function (result in the argument's dtype)."""

BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "pow": np.power,
    "fast_powf": np.power,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "rhypot": lambda x, y: 1 / np.hypot(x, y),
    "fmod": np.fmod,
    "copysign": np.copysign,
    "nextafter": np.nextafter,
    "fdim": lambda x, y: np.maximum(x - y, 0),
    "fast_dividef": np.divide,
    "div_rn": np.divide,
    "add_rn": np.add,
    "sub_rn": np.subtract,
    "mul_rn": np.multiply,
}
"""Two-argument functions."""

PREDICATES: dict[str, Callable[[Array], Array]] = {
    "isnan": np.isnan,
    "isinf": np.isinf,
    "finitef": np.isfinite,
    "isfinited": np.isfinite,
    "signbit": np.signbit,
}
"""Functions returning int32 0/1, as libdevice's do."""


def _implementation(
    name: str, fn: Callable[..., Array], *, predicate: bool = False
) -> Callable[..., Any]:
    """Build an interpreter-tensor function computing ``fn`` elementwise."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype, interpreter_semantic

    def impl(*args: Any, **kwargs: Any) -> Any:
        # Compiled calls may carry _semantic/_generator keywords; nothing else is accepted.
        kwargs.pop("_semantic", None)
        kwargs.pop("_generator", None)
        if kwargs:
            raise TypeError(f"libdevice.{name}() got unexpected keywords {sorted(kwargs)}")
        tensors = [
            interpreter_semantic.to_tensor(a.value if isinstance(a, tl.constexpr) else a)
            for a in args
        ]
        dtype = next((t.dtype for t in tensors if t.type.is_block()), tensors[0].dtype)
        if dtype not in (tl.float32, tl.float64):
            raise TypeError(
                f"libdevice.{name} takes fp32 or fp64 arguments, got {dtype} (cast first)"
            )
        np_dtype = _get_np_dtype(dtype)
        data = np.broadcast_arrays(*(t.handle.data.astype(np_dtype) for t in tensors))
        with np.errstate(all="ignore"):
            result = np.asarray(fn(*data))
        out_dtype = tl.int32 if predicate else dtype
        result = result.astype(_get_np_dtype(out_dtype))
        is_block = any(t.type.is_block() for t in tensors)
        ty = tl.block_type(out_dtype, list(result.shape)) if is_block else out_dtype
        return tl.tensor(TensorHandle(result, out_dtype), ty)

    impl.__name__ = name
    impl.__doc__ = f"libdevice.{name} computed with numpy (linattn_verify interpreter patch)."
    return impl


def implementations() -> dict[str, Callable[..., Any]]:
    """Return the replacement of every mapped libdevice function, by name."""
    table: dict[str, Callable[..., Any]] = {}
    for name, unary in UNARY.items():
        table[name] = _implementation(name, unary)
    for name, binary in BINARY.items():
        table[name] = _implementation(name, binary)
    for name, pred in PREDICATES.items():
        table[name] = _implementation(name, pred, predicate=True)
    return table


def apply() -> Restorer:
    """Replace the mapped functions in the libdevice modules."""
    check(NAME, VERSIONS, REQUIRES)
    import importlib

    restorer = Restorer()
    table = implementations()
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, impl in table.items():
            if hasattr(module, name):
                restorer.set(module, name, impl)
    return restorer
