# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Close the Triton interpreter's gaps so third-party kernels can be verified on a CPU.

Without CUDA, Triton kernels run under the interpreter (``TRITON_INTERPRET=1``), which has gaps
that make real kernels (FLA's first) fail or return garbage (``docs/interpreter.md``).
Each patch closes one, in its own module:

- ``autotune`` (`linattn_verify.interpreter.autotune`): multi-config ``@triton.autotune`` runs
  (a deterministic fake timer picks the first surviving config).
- ``loops`` (`linattn_verify.interpreter.loops`): ``range``/``tl.range`` loop variables are
  tensors of the induction type, as compiled.
- ``bf16`` (`linattn_verify.interpreter.bf16`): bf16 arithmetic in fp32 with round to nearest
  even.
- ``libdevice`` (`linattn_verify.interpreter.libdevice`): libdevice functions computed with
  numpy.
- ``bounds`` (`linattn_verify.interpreter.bounds`): masked-in loads and stores outside every
  tensor argument raise `OutOfBoundsAccess`.

All of them patch private interpreter internals; each names the Triton versions it was written
for and the internals it needs, and `enable` raises `InterpreterPatchError` (a `RuntimeError`)
instead of applying a patch whose internals are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import ModuleType

from linattn_verify.errors import InvalidArgument
from linattn_verify.interpreter import autotune, bf16, bounds, libdevice, loops
from linattn_verify.interpreter._guard import InterpreterPatchError, Restorer, check
from linattn_verify.interpreter.bounds import OutOfBoundsAccess

_MODULES: dict[str, ModuleType] = {
    autotune.NAME: autotune,
    loops.NAME: loops,
    bf16.NAME: bf16,
    libdevice.NAME: libdevice,
    bounds.NAME: bounds,
}

PATCHES: tuple[str, ...] = tuple(_MODULES)
"""The patch names, in the order `enable` applies them."""

_applied: dict[str, Restorer] = {}


def select_mode() -> bool:
    """Whether Triton code runs under the interpreter, selecting it when there is no CUDA.

    Triton reads ``TRITON_INTERPRET`` when it is imported, so code that may import Triton
    indirectly (torch's forward-mode decompositions do) calls this first: a Triton imported
    before the selection would run every kernel imported later (FLA's) compiled, which fails
    without CUDA.
    """
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return True
    import torch

    if torch.cuda.is_available():
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def _selection(patches: Iterable[str] | None) -> list[str]:
    if patches is None:
        return list(PATCHES)
    if isinstance(patches, str):
        raise InvalidArgument(
            f"Expected a collection of patch names but got patches={patches!r} (type=str); "
            f"write patches=[{patches!r}]."
        )
    chosen = list(patches)
    unknown = [p for p in chosen if p not in _MODULES]
    if unknown:
        raise InvalidArgument(
            f"Got patches={chosen!r}, but {unknown} are not patches; choose from {list(PATCHES)}."
        )
    return [p for p in PATCHES if p in chosen]


def enable(*, patches: Iterable[str] | None = None) -> list[str]:
    """Run Triton code under the interpreter when there is no CUDA, with its gaps closed.

    First selects the interpreter: without a CUDA device and with ``TRITON_INTERPRET`` unset
    (or ``"0"``), sets ``TRITON_INTERPRET=1``. Triton reads the variable when a kernel is
    *decorated*, so call this before importing modules that define kernels (FLA's ``fla.ops``
    included). Kernels decorated earlier stay compiled-mode ``JITFunction`` objects: they are
    not interpreted and fail at launch on a machine without CUDA (Triton finds no active
    driver); re-import them in a fresh process after calling `enable`. With a CUDA device and
    the variable unset, nothing is patched (the gaps are the interpreter's) and ``[]`` is
    returned.

    Then applies the patches, each once (calling again is harmless). Every patch checks the
    Triton version range it was written for and the private internals it needs before
    changing anything; patches named later in the call are not applied when an earlier one
    fails. Patches already decorated kernels take effect at their next launch.

    Args:
        patches: Names from `PATCHES` to apply, or `None` for all. Default: `None`.

    Returns:
        The names of the requested patches now in effect, in `PATCHES` order.

    Raises:
        InvalidArgument: for an unknown patch name.
        InterpreterPatchError: (a `RuntimeError`) when the installed Triton is outside a
            patch's version range or lacks the internals it needs; the message names both.
    """
    chosen = _selection(patches)
    if not select_mode():
        return []
    for name in chosen:
        module = _MODULES[name]
        check(name, module.VERSIONS, module.REQUIRES)
    for name in chosen:
        if name not in _applied:
            _applied[name] = _MODULES[name].apply()
    return chosen


def disable(*, patches: Iterable[str] | None = None) -> list[str]:
    """Undo patches applied by `enable` (``TRITON_INTERPRET`` is left as it is).

    Args:
        patches: Names from `PATCHES` to undo, or `None` for all. Default: `None`.

    Returns:
        The names that were undone, in `PATCHES` order.
    """
    chosen = _selection(patches)
    undone = [name for name in chosen if name in _applied]
    for name in reversed(undone):
        _applied.pop(name).restore()
    return undone


def enabled() -> list[str]:
    """Return the names of the patches in effect, in `PATCHES` order."""
    return [name for name in PATCHES if name in _applied]


__all__ = [
    "PATCHES",
    "InterpreterPatchError",
    "OutOfBoundsAccess",
    "disable",
    "enable",
    "enabled",
    "select_mode",
]
