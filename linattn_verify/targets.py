# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernels under test named by a target string, loadable again anywhere.

`load_target` turns ``package.module:function`` or ``path/to/file.py:function`` into a callable.
A `KernelSource` is that target plus everything the user declared about it (capabilities,
precision recipe, form, per-call timeout): it is picklable and JSON-serializable, so the same
kernel can be rebuilt in a child process (`linattn_verify.isolation`) or, from a saved failure,
by ``linattn-verify replay``.
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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from linattn_verify.errors import InvalidArgument
from linattn_verify.kernel import Capabilities, Kernel
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.typing import Form


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


def with_timeout(kernel: Kernel, seconds: float) -> Kernel:
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

    return replace(kernel, fn=timed)


@dataclass(frozen=True)
class KernelSource:
    """A third-party kernel as the user named and described it.

    Attributes:
        target: ``package.module:function`` or ``path/to/file.py:function`` (a relative path is
            taken from the directory the source was made in; `resolved` makes it absolute).
        capabilities: What the user declared it supports.
        recipe: How the user declared it rounds.
        form: Its algorithm, if declared.
        timeout: Seconds one call may take (0: no limit).
        inferred: What was read off its signature rather than declared (``check``'s
            ``assumed:`` header prints it). Default: `()`.
    """

    target: str
    capabilities: Capabilities
    recipe: PrecisionRecipe
    form: Form | None = None
    timeout: float = 60.0
    inferred: tuple[str, ...] = ()

    def resolved(self) -> KernelSource:
        """Return this source with a file target's path made absolute (valid from any cwd)."""
        where, sep, name = self.target.rpartition(":")
        if not where.endswith(".py"):
            return self
        return replace(self, target=f"{Path(where).resolve()}{sep}{name}")

    def load(self) -> Kernel:
        """Import the target (`load_kernel_function`) as a `Kernel` with the per-call timeout.

        Raises:
            InvalidArgument: if the target cannot be loaded.
        """
        kernel = Kernel(
            name=self.target,
            fn=load_kernel_function(self.target),
            capabilities=self.capabilities,
            recipe=self.recipe,
            form=self.form,
            source=self.resolved().to_json(),
        )
        return with_timeout(kernel, self.timeout)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (inverse: `from_json`)."""
        return {
            "target": self.target,
            "capabilities": asdict(self.capabilities),
            "recipe": asdict(self.recipe),
            "form": self.form,
            "timeout": self.timeout,
            "inferred": list(self.inferred),
        }

    @classmethod
    def from_json(cls, document: Any) -> KernelSource:
        """Rebuild a source from `to_json`'s dict.

        Raises:
            InvalidArgument: if ``document`` is not such a dict.
        """
        try:
            caps = dict(document["capabilities"])
            # A source saved before kernels declared their zero-denominator convention was
            # checked under the one the harness then imposed: 0 on a 0/0 row.
            caps.setdefault("zero_denominator", "zero")
            for name in (f.name for f in fields(Capabilities)):
                if isinstance(caps.get(name), list):
                    caps[name] = tuple(caps[name])
            recipe = dict(document["recipe"])
            return cls(
                target=str(document["target"]),
                capabilities=Capabilities(**caps),
                recipe=PrecisionRecipe.from_dict(recipe),
                form=cast(Form | None, document.get("form")),
                timeout=float(document.get("timeout", 60.0)),
                inferred=tuple(str(x) for x in document.get("inferred", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidArgument):
                raise
            raise InvalidArgument(
                f"Expected a kernel source (target, capabilities, recipe) but got {document!r}: "
                f"{exc!r}."
            ) from None


__all__ = [
    "KernelSource",
    "KernelTimeout",
    "import_file",
    "load_kernel_function",
    "load_target",
    "with_timeout",
]
