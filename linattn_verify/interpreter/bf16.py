# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Compute bf16 arithmetic in fp32 under the interpreter and round to nearest even.

Gap: the interpreter stores bf16 values as their raw uint16 bit patterns (numpy has no bf16)
and hands those patterns to numpy as if they were numbers: ``+ - * /``, comparisons, min/max,
``tl.sum``, ``tl.cumsum`` and ``tl.dot`` on bf16 operate on integers, so bf16 kernels return
garbage without any error, and fp32 -> bf16 casts truncate the mantissa instead of rounding.
Before triton 3.9 the builder also lacks ``get_bf16``, which ``TritonSemantic.scalar_constant``
looks up (``get_{dtype.name}``) for every bf16 constant, so ``x * 0.1`` on a bf16 ``x`` fails
with "'InterpreterBuilder' object has no attribute 'get_bf16'".

Fix: wrap the interpreter builder's bf16 entry points so each operation decodes its bf16
operands to fp32 (exact: bf16 is the top half of an fp32), computes in fp32 (fp64 for fma and
for fp64 sources) and encodes the result back to bf16 by round-to-nearest-even. Loads and stores
keep moving raw bits, which is right for a storage format; values reach memory rounded because
every cast and operation that produces bf16 now rounds. This is the result a GPU gives for one
bf16 operation, and torch's ``.to(torch.bfloat16)`` for fp32 inputs:

- ``+ - * /`` and sqrt: rounding the fp32 result again to bf16 is exactly the correctly rounded
  bf16 result, because 24 >= 2*8 + 2 (double rounding is innocuous, Figueroa 1995).
- fp64 -> bf16: rounds once (round to odd at fp32, then to nearest even; exact since 24 >= 8+2).
  torch rounds fp64 to fp32 first, so it can differ from this in the last bit; a GPU's
  ``cvt.rn.bf16.f64`` rounds once, like this.
- ``tl.sum`` / ``tl.cumsum`` of bf16 accumulate in fp32 and round each result once, like torch's
  bf16 reductions. A GPU reduces in bf16 with a rounding per addition; the interpreter is more
  accurate, and error bounds must come from the kernel's declared recipe, not from a CPU run.
- ``tl.dot`` on bf16 operands: products are exact in fp32 (8 + 8 significant bits) and
  accumulate in fp32 into the fp32 accumulator, as tensor cores do.
- NaN keeps its sign and becomes quiet; infinities and overflow to infinity follow IEEE.

Versions: the bf16 entry points wrapped here have the same signatures in triton 3.7, 3.8 and
3.9, and the wrappers only decode arguments and encode results, so they do not depend on what
the originals do with fp32 data (3.8 and 3.9 clamp without NaN propagation by ``fmax``/``fmin``
where 3.7 clips, for instance). ``get_bf16`` is set whether or not the builder has one:
replaced on 3.9, added on 3.7 and 3.8 (and removed again by `Restorer.restore`).

Not covered: atomics on bf16 memory (the interpreter's C++ atomics add raw bits), fp8
conversions (left to the interpreter), and ``tl.fma`` on bf16 rounds via fp64 (correct
except in contrived cases where fp64 itself rounds the exact sum onto a bf16 midpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from linattn_verify.interpreter._guard import Requirement, Restorer, Versioned, check

NAME = "bf16"
VERSIONS = ((3, 7), (3, 10))
"""The Triton versions this patch was written for: >=3.7, <3.10."""
_BUILDER = "triton.runtime.interpreter.InterpreterBuilder"
REQUIRES: tuple[Requirement, ...] = (
    *(
        f"{_BUILDER}.{m}"
        for m in (
            "binary_op",
            "unary_op",
            "cast_impl",
            "create_fp_to_fp",
            "create_fma",
            "create_dot",
            "create_erf",
            "create_rsqrt",
            "create_clampf",
        )
    ),
    # Replaced where it exists; triton 3.7 and 3.8 builders have none, and the patch adds it.
    Versioned(f"{_BUILDER}.get_bf16", ((3, 9), (3, 10))),
    "triton.runtime.interpreter.ReduceOps.sum",
    "triton.runtime.interpreter.ReduceOps.min_max",
    "triton.runtime.interpreter.ReduceOps.to_tensor",
    "triton.runtime.interpreter.ScanOps.cumsum",
    "triton.runtime.interpreter.ScanOps.cumprod",
    "triton.runtime.interpreter.TensorHandle",
    "triton.runtime.interpreter._get_np_dtype",
    "triton._C.libtriton.ir.ROUNDING_MODE.RTZ",
)
"""The internals it wraps or calls."""

U16 = npt.NDArray[np.uint16]
F32 = npt.NDArray[np.float32]


def bf16_to_f32(bits: npt.ArrayLike) -> F32:
    """Decode bf16 bit patterns (uint16) to fp32, exactly."""
    wide = np.asarray(bits).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32)


def f32_to_bf16(x: npt.ArrayLike) -> U16:
    """Encode fp32 values as bf16 bit patterns, rounding to nearest, ties to even."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly when the dropped
    # half exceeds the midpoint, or equals it with an odd kept half; overflow carries into the
    # exponent and reaches infinity as IEEE requires.
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    quiet_nan = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return np.where(np.isnan(x32), quiet_nan, rounded)


def f64_to_bf16(x: npt.ArrayLike) -> U16:
    """Encode fp64 values as bf16 bit patterns with a single rounding to nearest even."""
    x64 = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        near = x64.astype(np.float32)
        # Round to odd at fp32: truncate toward zero, then set the last bit if anything was
        # dropped. Rounding that to bf16 equals rounding x64 directly (24 >= 8 + 2 bits).
        wide = near.astype(np.float64)
        too_far = np.isfinite(x64) & (np.abs(wide) > np.abs(x64))
        toward_zero = np.where(too_far, np.nextafter(near, np.float32(0)), near)
        inexact = np.isfinite(x64) & (toward_zero.astype(np.float64) != x64)
    bits = np.ascontiguousarray(toward_zero).view(np.uint32) | inexact.astype(np.uint32)
    return f32_to_bf16(bits.view(np.float32))


def _encode(data: npt.NDArray[Any]) -> U16:
    return f64_to_bf16(data) if data.dtype == np.float64 else f32_to_bf16(data)


def _is_bf16(handle: Any) -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    # Bool data labelled bf16 (comparison results of the unpatched builder) is not bf16.
    return (
        isinstance(handle, TensorHandle)
        and handle.dtype == tl.bfloat16
        and handle.data.dtype == np.uint16
    )


def _as_f32(handle: Any) -> Any:
    """An fp32 TensorHandle with the value of a bf16 one (other handles unchanged)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if not _is_bf16(handle):
        return handle
    return TensorHandle(bf16_to_f32(handle.data), tl.float32)


def _through_f32(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a builder method: bf16 operands go in as fp32, a float result comes out as bf16."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(_is_bf16(a) for a in args):
            return method(self, *args, **kwargs)
        with np.errstate(all="ignore"):
            result = method(self, *(_as_f32(a) for a in args), **kwargs)
        data = result.data
        if data.dtype == np.bool_:
            # Comparisons: the unpatched method labels the bool data with the operands' type;
            # label it int1 so that later casts see what it holds.
            return TensorHandle(data, tl.int1)
        return TensorHandle(_encode(data), tl.bfloat16)

    return wrapper


def _make_cast_impl(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if src_ty == tl.bfloat16 and src.data.dtype != np.uint16:
            # Bool data mislabelled bf16 by an unpatched comparison: a plain numpy cast.
            return original(self, src, dst_type)
        if src_ty == tl.bfloat16 and dst_ty != tl.bfloat16:
            with np.errstate(all="ignore"):
                data = bf16_to_f32(src.data).astype(_get_np_dtype(dst_ty))
            return TensorHandle(data, dst_ty)
        if dst_ty == tl.bfloat16 and src_ty != tl.bfloat16:
            # Integers and fp64 go through fp64 (exact below 2^53); fp16/fp32 are exact in fp32.
            wide = np.float32 if src_ty in (tl.float16, tl.float32) else np.float64
            return TensorHandle(_encode(src.data.astype(wide)), dst_ty)
        return original(self, src, dst_type)

    return cast_impl


def _make_fp_to_fp(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import TensorHandle

    plain = (tl.float16, tl.float32, tl.float64)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if dst_ty == tl.bfloat16 and src_ty in (tl.float16, tl.float32):
            if rounding_mode == ir.ROUNDING_MODE.RTZ:
                x32 = np.ascontiguousarray(src.data, dtype=np.float32)
                # Toward zero is dropping the low half; NaN only needs to stay a NaN.
                bits = (x32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
                bits = np.where(np.isnan(x32), bits | np.uint16(0x0040), bits)
                return TensorHandle(bits, dst_ty)
            return self.cast_impl(src, dst_type)
        if src_ty == tl.bfloat16 and dst_ty in plain:
            return self.cast_impl(src, dst_type)
        return original(self, src, dst_type, rounding_mode)

    return create_fp_to_fp


def _make_fma(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def create_fma(self: Any, x: Any, y: Any, z: Any) -> Any:
        if not _is_bf16(z):
            return original(self, x, y, z)
        xs, ys, zs = (bf16_to_f32(h.data).astype(np.float64) for h in (x, y, z))
        with np.errstate(all="ignore"):
            # x*y is exact in fp64 (16 significant bits); one fp64 rounding of the sum.
            return TensorHandle(f64_to_bf16(xs * ys + zs), tl.bfloat16)

    return create_fma


def _make_dot(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        if not (_is_bf16(a) or _is_bf16(b) or _is_bf16(d)):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        a32, b32, d32 = (_as_f32(h).data for h in (a, b, d))
        with np.errstate(all="ignore"):
            acc = np.matmul(a32, b32, dtype=np.float32) + d32
        if _is_bf16(d):
            return TensorHandle(f32_to_bf16(acc), tl.bfloat16)
        return TensorHandle(acc.astype(d.data.dtype), d.dtype.scalar)

    return create_dot


def _get_bf16(self: Any, value: float) -> Any:
    """A bf16 constant: Python floats are fp64, so round once from fp64.

    Triton 3.9's own rounds the value to fp32 and then truncates it to bf16; 3.7 and 3.8 have
    no such method, and every bf16 constant fails without this one.
    """
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    del self
    return TensorHandle(f64_to_bf16(np.array([value], dtype=np.float64)), tl.bfloat16)


def _retyped(tensor: Any, data: npt.NDArray[Any], dtype: Any) -> Any:
    """An interpreter ``tl.tensor`` like ``tensor`` but holding ``data`` of scalar ``dtype``."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    ty = tensor.type.with_element_ty(dtype) if tensor.type.is_block() else dtype
    return tl.tensor(TensorHandle(data, dtype), ty)


def _make_sum(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl

    def reduce_sum(self: Any, input: Any) -> Any:
        if input.dtype != tl.bfloat16:
            return original(self, input)
        x32 = bf16_to_f32(input.handle.data)
        with np.errstate(all="ignore"):
            total = np.sum(x32, axis=self.axis, keepdims=self.keep_dims, dtype=np.float32)
        return self.to_tensor(f32_to_bf16(total), input.dtype)

    return reduce_sum


def _make_min_max(original: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl

    def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        value = input[0] if isinstance(input, tuple) else input
        if value.dtype != tl.bfloat16:
            return original(self, input, val_reduce_op, idx_reduce_op)
        decoded = _retyped(value, bf16_to_f32(value.handle.data), tl.float32)
        result = original(self, decoded, val_reduce_op, idx_reduce_op)
        # The extremum is one of the inputs, so encoding it back is exact.
        if val_reduce_op is None:
            return result
        val = result[0] if isinstance(result, tuple) else result
        val = _retyped(val, f32_to_bf16(val.handle.data), tl.bfloat16)
        return (val, result[1]) if isinstance(result, tuple) else val

    return min_max


def _make_scan(original: Callable[..., Any], np_scan: Callable[..., Any]) -> Callable[..., Any]:
    import triton.language as tl

    def scan(self: Any, input: Any) -> Any:
        if input.dtype != tl.bfloat16:
            return original(self, input)
        x32 = bf16_to_f32(input.handle.data)
        with np.errstate(all="ignore"):
            out = np_scan(x32, axis=self.axis, dtype=np.float32)
        return [self.to_tensor(f32_to_bf16(out), input.dtype)]

    return scan


def apply() -> Restorer:
    """Wrap the interpreter's bf16 arithmetic, casts, reductions, scans and dots."""
    check(NAME, VERSIONS, REQUIRES)
    from triton.runtime.interpreter import InterpreterBuilder, ReduceOps, ScanOps

    restorer = Restorer()
    for method in ("binary_op", "unary_op", "create_erf", "create_rsqrt", "create_clampf"):
        restorer.set(InterpreterBuilder, method, _through_f32(getattr(InterpreterBuilder, method)))
    restorer.set(InterpreterBuilder, "cast_impl", _make_cast_impl(InterpreterBuilder.cast_impl))
    restorer.set(
        InterpreterBuilder, "create_fp_to_fp", _make_fp_to_fp(InterpreterBuilder.create_fp_to_fp)
    )
    restorer.set(InterpreterBuilder, "create_fma", _make_fma(InterpreterBuilder.create_fma))
    restorer.set(InterpreterBuilder, "create_dot", _make_dot(InterpreterBuilder.create_dot))
    restorer.set(InterpreterBuilder, "get_bf16", _get_bf16)
    restorer.set(ReduceOps, "sum", _make_sum(ReduceOps.sum))
    restorer.set(ReduceOps, "min_max", _make_min_max(ReduceOps.min_max))
    restorer.set(ScanOps, "cumsum", _make_scan(ScanOps.cumsum, np.cumsum))
    restorer.set(ScanOps, "cumprod", _make_scan(ScanOps.cumprod, np.cumprod))
    return restorer
