# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Check every masked-in interpreter load and store against the launch's tensors.

Gap: the interpreter dereferences whatever address a kernel computes. A load just past a tensor
returns the neighbouring allocation's bytes, a store there corrupts it, and a far address
crashes the process: no error, or no Python at all. On a GPU such bugs often hide too.

Fix: each launch (``GridExecutor.__call__``) records the storage byte range of every tensor
argument (``GridExecutor._init_args_hst`` makes the host copies whose addresses the kernel
sees; tuples and tensor descriptors included). Masked loads, stores and atomics then check
that every element whose mask is true lies wholly inside one of those ranges, and raise
`OutOfBoundsAccess` (an `IndexError`) otherwise, naming the kernel, the program, the pointer's
argument and how far outside it the access is. Masked-off elements are not checked: a masked
load never dereferences them, on a GPU either. Storage rather than tensor extents are allowed
because views legitimately reach the rest of their storage.

Naming the argument: pointers built from an argument carry its name through pointer
arithmetic (``create_addptr``) and the shape operations a pointer block goes through (splat,
broadcast, expand_dims, reshape, trans, select, cat, join). Where no name travelled (pointers
from tensor descriptors or integers), the message names the nearest argument.

Versions: the masked load and store entry points take the cache hints as
``(cache_modifier, eviction_policy)`` up to triton 3.8 and as one ``cache_policy`` from 3.9;
the wrappers read only the pointers and the mask and pass every other argument on as given, so
one wrapper fits every signature. The mask is an interpreter ``TensorHandle`` from ``tl.load``
and ``tl.store``, but a bare numpy bool array from tensor descriptors before 3.9 and from 3.7's
block pointers (``create_tensor_pointer_load``/``_store`` route through the masked entry
points, so they are checked too); both are accepted. Block pointers in 3.8 are built from
pointer arithmetic and carry their argument's name; 3.7's, like descriptors, name the nearest
argument.

Scope: addresses that belong to memory the launch was not given (a pointer passed as an
integer, scratch allocated by ``triton.set_allocator``) are reported too; turn the patch off
for such kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from linattn_verify.interpreter._guard import Restorer, check

NAME = "bounds"
VERSIONS = ((3, 7), (3, 10))
"""The Triton versions this patch was written for: >=3.7, <3.10."""
_INTERP = "triton.runtime.interpreter"
_PROPAGATING = (
    "create_addptr",
    "create_splat",
    "create_broadcast",
    "create_expand_dims",
    "create_reshape",
    "create_trans",
    "create_select",
    "create_cat",
    "create_join",
)
REQUIRES = (
    f"{_INTERP}.GridExecutor.__call__",
    f"{_INTERP}.GridExecutor._init_args_hst",
    f"{_INTERP}._implicit_cvt",
    f"{_INTERP}.InterpreterBuilder.set_grid_idx",
    *(
        f"{_INTERP}.InterpreterBuilder.{m}"
        for m in (
            "create_masked_load",
            "create_masked_store",
            "create_atomic_rmw",
            "create_atomic_cas",
            *_PROPAGATING,
        )
    ),
    "triton.runtime.errors.InterpreterError",
)
"""The internals it wraps or calls."""

ARG_KEY = "linattn_verify.argument"
"""Key in ``TensorHandle.attr`` under which a pointer carries its argument's name."""


class OutOfBoundsAccess(IndexError):
    """A masked-in interpreter load or store addressed memory outside every tensor argument."""


@dataclass
class _Launch:
    """The tensor arguments of one launch: names and storage byte ranges."""

    kernel: str
    names: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    by_pointer: dict[int, str] = field(default_factory=dict)

    def add(self, name: str, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        start = int(storage.data_ptr())
        self.names.append(name)
        self.starts.append(start)
        self.ends.append(start + int(storage.nbytes()))
        # Several arguments may share one data pointer (the same tensor passed twice).
        ptr = int(tensor.data_ptr())
        self.by_pointer[ptr] = f"{self.by_pointer[ptr]}/{name}" if ptr in self.by_pointer else name


_LAUNCHES: list[_Launch] = []
"""Launches in progress (a stack: interpreter launches do not nest, but be safe)."""


def _tensors(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, tensor)`` for the tensors in an argument (tuples, descriptors, wrappers)."""
    base = getattr(value, "base", None)
    if hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
        yield name, value
    elif hasattr(value, "data_ptr") and base is not None:
        # TensorWrapper (a dtype-reinterpreting view): its storage is its base's.
        yield from _tensors(name, base)
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _tensors(f"{name}[{i}]", item)
    elif base is not None and hasattr(value, "block_shape"):
        yield from _tensors(f"{name}.base", base)


def _find(launch: _Launch, addresses: npt.NDArray[np.uint64], width: int) -> npt.NDArray[np.bool_]:
    """Whether each access ``[address, address + width)`` lies inside one recorded storage."""
    if not launch.starts:
        return np.zeros(addresses.shape, dtype=bool)
    order = np.argsort(np.asarray(launch.starts, dtype=np.uint64), kind="stable")
    starts = np.asarray(launch.starts, dtype=np.uint64)[order]
    # Storages do not overlap, but a running maximum keeps this right even if they did.
    ends = np.maximum.accumulate(np.asarray(launch.ends, dtype=np.uint64)[order])
    slot = np.searchsorted(starts, addresses, side="right") - 1
    safe = np.clip(slot, 0, None)
    return (slot >= 0) & (addresses + np.uint64(width) <= ends[safe])


def _describe(launch: _Launch, address: int, width: int, pointer_name: str | None) -> str:
    """Say where ``address`` lies relative to the named (else the nearest) argument."""
    if pointer_name is not None:
        candidates = [i for i, n in enumerate(launch.names) if n in pointer_name.split("/")]
    else:
        candidates = list(range(len(launch.names)))
    if not candidates:
        return f"byte address {address:#x}"

    def distance(i: int) -> int:
        lo, hi = launch.starts[i], launch.ends[i]
        return lo - address if address < lo else address + width - hi

    i = min(candidates, key=distance)
    lo, hi = launch.starts[i], launch.ends[i]
    where = (
        f"{lo - address} bytes before the start"
        if address < lo
        else f"{address + width - hi} bytes past the end"
    )
    label = "argument" if pointer_name is not None else "nearest argument"
    return (
        f"byte address {address:#x}, {where} of {label} {launch.names[i]!r} "
        f"(storage [{lo:#x}, {hi:#x}), {hi - lo} bytes)"
    )


def _check(op: str, ptrs: Any, mask: Any) -> None:
    """Raise `OutOfBoundsAccess` if a masked-in element of ``ptrs`` is outside every argument."""
    if not _LAUNCHES:
        return
    from triton.runtime.interpreter import interpreter_builder

    launch = _LAUNCHES[-1]
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is None:
        active = np.ones(addresses.shape, dtype=bool)
    else:
        # Tensor descriptors before triton 3.9 and block pointers in 3.7 pass the mask as a bare
        # numpy array (whose own ``.data`` is a raw buffer), everything else as a TensorHandle.
        active = mask if isinstance(mask, np.ndarray) else mask.data
    active = np.broadcast_to(np.asarray(active, dtype=bool), addresses.shape)
    element = ptrs.get_element_ty()
    width = max(1, element.primitive_bitwidth // 8)
    inside = _find(launch, addresses, width)
    bad = active & ~inside
    if not bad.any():
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    address = int(addresses[index])
    name = ptrs.attr.get(ARG_KEY)
    pointer = f"pointer argument {name!r}" if name else "a pointer of unknown origin"
    raise OutOfBoundsAccess(
        f"{launch.kernel}: masked-in {op} through {pointer} (element type {element}) is out of "
        f"bounds at {int(bad.sum())} of {int(active.sum())} active elements; first at block index "
        f"{index} in program {tuple(interpreter_builder.grid_idx)}: "
        f"{_describe(launch, address, width, name)}. "
        f"Tensor arguments of this launch: {', '.join(launch.names) or 'none'}."
    )


def _find_cause(error: BaseException) -> OutOfBoundsAccess | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OutOfBoundsAccess):
            return seen
        seen = seen.__cause__
    return None


def _make_call(original: Callable[..., Any]) -> Callable[..., Any]:
    from triton.runtime.errors import InterpreterError

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        _LAUNCHES.append(_Launch(kernel=getattr(self.fn, "__name__", "kernel")))
        try:
            return original(self, *args, **kwargs)
        except InterpreterError as error:
            # The interpreter wraps kernel errors in InterpreterError(repr(e)); hand back the
            # IndexError itself so callers can catch it by type.
            cause = _find_cause(error)
            if cause is None:
                raise
            raise cause.with_traceback(cause.__traceback__) from None
        finally:
            _LAUNCHES.pop()

    return call


def _make_init_args(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_args_hst(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = original(self, args_dev, kwargs)
        if _LAUNCHES:
            launch = _LAUNCHES[-1]
            named = [*zip(self.arg_names, args_hst, strict=False), *kwargs_hst.items()]
            for arg_name, value in named:
                for name, tensor in _tensors(arg_name, value):
                    launch.add(name, tensor)
        return args_hst, kwargs_hst

    return init_args_hst


def _make_implicit_cvt(original: Callable[..., Any]) -> Callable[..., Any]:
    def implicit_cvt(arg: Any) -> Any:
        result = original(arg)
        handle: Any = getattr(result, "handle", None)
        if _LAUNCHES and hasattr(arg, "data_ptr") and hasattr(handle, "attr"):
            name = _LAUNCHES[-1].by_pointer.get(int(arg.data_ptr()))
            if name is not None:
                handle.attr[ARG_KEY] = name
        return result

    return implicit_cvt


def _make_propagating(original: Callable[..., Any]) -> Callable[..., Any]:
    def propagate(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        attr = getattr(result, "attr", None)
        if attr is not None:
            for arg in args:
                name = getattr(arg, "attr", {}).get(ARG_KEY) if hasattr(arg, "attr") else None
                if name is not None:
                    attr[ARG_KEY] = name
                    break
        return result

    return propagate


# The masked load and store take (..., cache_modifier, eviction_policy[, is_volatile]) up to
# triton 3.8 and (..., cache_policy[, is_volatile]) from 3.9, by position or by keyword
# depending on the caller. Only the leading pointers and mask matter here; whatever follows is
# passed on untouched, so the wrappers fit both signatures without asking which one is there.


def _make_load(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_masked_load(self: Any, ptrs: Any, mask: Any, *rest: Any, **options: Any) -> Any:
        _check("load", ptrs, mask)
        return original(self, ptrs, mask, *rest, **options)

    return create_masked_load


def _make_store(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_masked_store(
        self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **options: Any
    ) -> Any:
        _check("store", ptrs, mask)
        return original(self, ptrs, value, mask, *rest, **options)

    return create_masked_store


def _make_rmw(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_atomic_rmw(
        self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any
    ) -> Any:
        _check("atomic", ptr, mask)
        return original(self, rmw_op, ptr, val, mask, sem, scope)

    return create_atomic_rmw


def _make_cas(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_atomic_cas(self: Any, ptr: Any, cmp: Any, val: Any, sem: Any, scope: Any) -> Any:
        _check("atomic_cas", ptr, None)
        return original(self, ptr, cmp, val, sem, scope)

    return create_atomic_cas


def apply() -> Restorer:
    """Record launches' tensor ranges and check masked memory accesses against them."""
    check(NAME, VERSIONS, REQUIRES)
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    executor = interpreter.GridExecutor
    restorer = Restorer()
    restorer.set(executor, "__call__", _make_call(executor.__call__))
    restorer.set(executor, "_init_args_hst", _make_init_args(executor._init_args_hst))
    restorer.set(interpreter, "_implicit_cvt", _make_implicit_cvt(interpreter._implicit_cvt))
    for method in _PROPAGATING:
        restorer.set(builder, method, _make_propagating(getattr(builder, method)))
    restorer.set(builder, "create_masked_load", _make_load(builder.create_masked_load))
    restorer.set(builder, "create_masked_store", _make_store(builder.create_masked_store))
    restorer.set(builder, "create_atomic_rmw", _make_rmw(builder.create_atomic_rmw))
    restorer.set(builder, "create_atomic_cas", _make_cas(builder.create_atomic_cas))
    return restorer
