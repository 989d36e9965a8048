# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Compile invariance (docs/bug-classes.md, "compile and device"): torch.compile changes nothing.

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

from linattn_properties._nonfinite import undefined_elements
from linattn_properties._support import (
    prepare_case,
    property_function,
    run_bounds,
    run_kernel,
    within_rounding,
)
from linattn_verify.compare import Side, compare_bitwise, compare_pair
from linattn_verify.linear_attn.kernel import Kernel
from linattn_verify.linear_attn.strategies import ProblemSpec
from linattn_verify.results import PropertyResult

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


@property_function
def compiled_matches_eager(spec: ProblemSpec, kernel: Kernel) -> PropertyResult:
    """Check that ``torch.compile(kernel)`` returns o and the final state bit-identically.

    With f the kernel and f_c = torch.compile(f, backend="eager", dynamic=False), on the case
    with the final state requested whenever the kernel can return it:

        f_c(x) ≡ f(x)    for o, S_T (and z_T)    (≡: bit-identical, NaN equal to NaN)

    for a kernel that promises determinism (the eager backend runs the very operators the eager
    kernel runs); for one that does not, |f_c(x) - f(x)| <= B + B (``within_rounding`` where the
    bits differ).

    Args:
        spec: The case.
        kernel: The kernel under test.

    Returns:
        The `PropertyResult`: one bitwise comparison per output (subject the kernel, condition
        ``"under torch.compile"``). A kernel that fails while traced fails the property, the
        message naming ``"<kernel> under torch.compile"``.
    """
    case = prepare_case(NAME, spec, kernel, final_state=kernel.capabilities.final_state)
    if isinstance(case, PropertyResult):
        return case
    problem = case.problem
    eager = run_kernel(kernel, problem)
    torch._dynamo.reset()
    try:
        compiled_fn = torch.compile(kernel.fn, backend="eager", dynamic=False)
        compiled = replace(kernel, name=f"{kernel.name} under torch.compile", fn=compiled_fn)
        # Dynamo's own warnings (graph breaks, deprecations) are not the kernel's.
        with warnings.catch_warnings(), _launches_opaque():
            warnings.simplefilter("ignore")
            traced = run_kernel(compiled, problem)
    finally:
        torch._dynamo.reset()
    expected, got = eager.outputs, traced.outputs
    findings = []
    if set(got) != set(expected):
        findings.append(
            f"under torch.compile the kernel returned {sorted(got)}, not {sorted(expected)}"
        )
    # An "any" kernel's values where the exact denominator is 0 are its own business.
    undefined = undefined_elements(kernel, problem)
    comparisons = [
        compare_bitwise(
            name,
            got[name],
            expected[name],
            subject=kernel.name,
            condition="under torch.compile",
            undefined=undefined.get(name),
        )
        for name in sorted(set(got) & set(expected))
    ]
    notes = ["compiled with torch.compile(backend='eager', dynamic=False)"]
    if kernel.capabilities.deterministic or all(c.ok for c in comparisons):
        return case.judged(comparisons, findings=findings, notes=notes)
    # Not promised deterministic: its two runs agree within their bounds.
    bounds = run_bounds(kernel, problem)
    pairs = [
        compare_pair(
            name,
            Side.of(f"{kernel.name} under torch.compile", got[name], bounds[name]),
            Side.of("eager", expected[name], bounds[name]),
            bounds[name].reference,
        )
        for name in sorted(set(got) & set(expected))
    ]
    result = case.judged(pairs, findings=findings, notes=notes)
    return within_rounding(result, "compiled and eager runs agree", "--deterministic")


__all__ = ["compiled_matches_eager"]
