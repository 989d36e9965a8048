# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels under test named by a target string, and a per-call timeout for any family's kernel.

`load_target` turns ``package.module:function`` or ``path/to/file.py:function`` into a callable;
`load_kernel_function` does so under the Triton interpreter's patches where there is no CUDA;
`with_timeout` wraps a kernel (a frozen dataclass with an ``fn`` field, of any family).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar, cast

from linattn_verify.errors import InvalidArgument


class _HasFn(Protocol):
    """A kernel of any family: a frozen dataclass holding the function it calls."""

    @property
    def fn(self) -> Callable[..., Any]: ...


TimedKernel = TypeVar("TimedKernel", bound=_HasFn)


class KernelTimeout(RuntimeError):
    """A kernel call ran past the per-call timeout."""


def import_file(path: str | os.PathLike[str], module_name: str) -> ModuleType:
    """Import the Python file ``path`` as the module ``module_name``.

    The module is registered in ``sys.modules`` before it executes: dataclasses and pickling
    look modules up there.

    Raises:
        InvalidArgument: if ``path`` cannot be imported as a module.
    """
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"Got path={str(path)!r}, but it cannot be imported as a module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_target(target: str) -> Callable[..., Any]:
    """Import ``package.module:function`` or ``path/to/file.py:function`` and return the function.

    Raises:
        InvalidArgument: naming the target and what went wrong (bad form, missing file or
            module, missing or non-callable attribute, an exception while importing).
    """
    if not isinstance(target, str) or target.count(":") != 1 or target.endswith(":"):
        raise InvalidArgument(
            f"Got TARGET={target!r}, but it must be 'package.module:function' or "
            "'path/to/file.py:function'."
        )
    where, name = target.split(":")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise InvalidArgument(f"Got TARGET={target!r}, but {path} is not a file.")
            module = import_file(path, f"_linattn_target_{path.stem}")
        else:
            module = importlib.import_module(where)
    except InvalidArgument:
        raise
    except Exception as exc:
        raise InvalidArgument(
            f"Got TARGET={target!r}, but importing {where} raised {type(exc).__name__}: {exc}"
        ) from None
    fn = module
    for part in name.split("."):
        if not hasattr(fn, part):
            raise InvalidArgument(f"Got TARGET={target!r}, but {where} has no attribute {name!r}.")
        fn = getattr(fn, part)
    if not callable(fn):
        raise InvalidArgument(f"Got TARGET={target!r}, but {name} is not callable.")
    return fn


def load_kernel_function(target: str) -> Callable[..., Any]:
    """Load ``target`` as a kernel under test: without CUDA, under the interpreter's patches.

    A third-party Triton kernel is decorated when its module is imported, and must be decorated
    by the patched Triton.

    Raises:
        InvalidArgument: if the target cannot be loaded.
    """
    import torch

    from linattn_verify import interpreter

    if not torch.cuda.is_available():
        interpreter.enable()
    return load_target(target)


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise `KernelTimeout` in this (main) thread after ``seconds``; a no-op elsewhere."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and seconds > 0
    )

    def on_alarm(signum: int, frame: Any) -> None:
        raise KernelTimeout(f"the kernel call ran past the per-call timeout of {seconds:g} s")

    if not usable:
        yield
        return
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def with_timeout(kernel: TimedKernel, seconds: float) -> TimedKernel:
    """Return ``kernel`` whose calls raise `KernelTimeout` after ``seconds`` (main thread, Unix).

    Triton's interpreter runs kernels as Python, so the alarm interrupts a hung kernel there. A
    compiled GPU kernel that hangs inside the driver never returns to Python; the process
    isolation of `linattn_verify.isolation` kills it from outside instead.
    """
    fn = kernel.fn

    # wraps: the timed kernel keeps the signature the harness shapes its calls by.
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with _alarm(seconds):
            return fn(*args, **kwargs)

    timed_kernel: TimedKernel = replace(cast(Any, kernel), fn=timed)
    return timed_kernel


__all__ = ["KernelTimeout", "import_file", "load_kernel_function", "load_target", "with_timeout"]
