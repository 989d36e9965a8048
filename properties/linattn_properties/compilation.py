# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Compile invariance (BUG_CLASSES.md, "compile and device"): torch.compile changes nothing.

Compiled with dynamo's ``eager`` backend, the captured graph runs the very operators the eager
kernel runs, so o and the final state must be bit-identical. What this catches is Python that
behaves differently while it is traced (``torch.compiler.is_compiling()`` selecting another path,
fla #52), a graph break that drops a side effect, or a kernel that does not survive tracing.
Costs a dynamo trace per case (1-3 s on a CPU), which is why it is last in the catalogue.

Under the Triton interpreter a kernel launch is Python, and dynamo would trace the interpreter
itself (and fail on its uint64 address arithmetic with fake tensors): a harness artefact, not a
kernel bug. A compiled GPU kernel is one opaque operation to dynamo; `_launches_opaque` makes an
interpreted launch the same by running it outside the trace.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from linattn_properties._support import attempt, bitwise_message, finish, skipped
from linattn_verify.kernel import Kernel
from linattn_verify.strategies import ProblemSpec
from linattn_verify.verdict import PropertyResult

NAME = "compiled_matches_eager"


@contextmanager
def _launches_opaque() -> Iterator[None]:
    """Run interpreted Triton launches outside dynamo's trace (see the module docstring)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no Triton, or a version without the interpreter: nothing to hide
        yield
        return
    original = InterpretedFunction.run
    InterpretedFunction.run = torch._dynamo.disable(original)  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        InterpretedFunction.run = original


def compiled_matches_eager(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that ``torch.compile(kernel)`` returns o and the final state bit-identically."""
    problem = kernel.prepare(
        replace(spec.build(), output_final_state=kernel.capabilities.final_state)
    )
    reason = kernel.supports(problem)
    if reason is not None:
        return skipped(NAME, kernel, spec, reason)
    eager = attempt(kernel, problem)
    if isinstance(eager, str):
        return finish(NAME, kernel, spec, [f"eager call: {eager}"], {})
    torch._dynamo.reset()
    try:
        compiled_fn = torch.compile(kernel.fn, backend="eager", dynamic=False)
        # Dynamo's own warnings (graph breaks, deprecations) are not the kernel's.
        with warnings.catch_warnings(), _launches_opaque():
            warnings.simplefilter("ignore")
            traced = attempt(replace(kernel, fn=compiled_fn), problem)
    finally:
        torch._dynamo.reset()
    if isinstance(traced, str):
        return finish(NAME, kernel, spec, [f"under torch.compile: {traced}"], {})
    failures, worst, worst_index = [], 0.0, None
    expected = eager.outputs
    got = traced.outputs
    if set(got) != set(expected):
        failures.append(
            f"under torch.compile the kernel returned {sorted(got)}, not {sorted(expected)}"
        )
    for name in sorted(set(got) & set(expected)):
        message, diff, index = bitwise_message(
            name, got[name], expected[name], "under torch.compile"
        )
        if message:
            failures.append(message)
            if diff >= worst:
                worst, worst_index = diff, index
    return finish(
        NAME,
        kernel,
        spec,
        failures,
        {"max_abs_diff": worst},
        worst_index,
        summary="compiled outputs bit-identical to eager",
    )


__all__ = ["compiled_matches_eager"]
