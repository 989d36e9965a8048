# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Make ``range`` / ``tl.range`` loop variables interpreter tensors, as they are on a GPU.

Gap: under the interpreter ``tl.range`` and ``tl.static_range`` both become Python's ``range``,
so a loop variable is a Python int. Compiled, a ``range``/``tl.range`` loop is an ``scf.for``
whose induction variable is a tensor, so kernels call tensor methods on it (FLA's
``i_t.to(tl.int64)`` fails with "'int' object has no attribute 'to'"), and arithmetic on it
wraps at the induction variable's width where a Python int silently grows.

Fix: the interpreter already rewrites every ``@triton.jit`` function's AST before running it
(``FunctionRewriter.ast_transformer``). A subclass of its transformer turns
``for i in <f>(args)``, where ``<f>`` is spelled ``range`` or ``<module>.range``, into
``for i in _linattn_typed_range(<f>, args)``: the same iteration, each value wrapped in an
interpreter tensor whose dtype is the compiler's induction-variable type (the integer
promotion of the bounds' types, as ``CodeGenerator.visit_For`` does; int32 for int32 bounds,
so int32 wrap-around happens as on a GPU). ``tl.static_range`` loops are unrolled at compile
time on a GPU, their variable is a constexpr, so they stay Python ints; the test is by the
spelled name because at run time the interpreter maps both names to the same function.
Aliased spellings (``from triton.language import range as r``) are not recognised.

The helper reaches the kernel's globals the way ``interpreter_semantic`` does: the rewriter
copies the interpreter module's globals into the kernel's (``FunctionRewriter._compile_and_exec``).
Rewritten functions are cached (``InterpretedFunction.rewritten_fn``); applying or reverting
the patch clears that cache so every kernel is rewritten again.

Versions: triton 3.7, 3.8 and 3.9 share the rewriter, the ``range``/``tl.range`` replacement
(``arg1, arg2, step`` and loop options) and the compiler's induction type; 3.9's transformer
also rewrites chained comparisons (``visit_Compare``), which the subclass inherits untouched.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import numpy as np

from linattn_verify.interpreter._guard import Restorer, check

NAME = "loops"
VERSIONS = ((3, 7), (3, 10))
"""The Triton versions this patch was written for: >=3.7, <3.10."""
REQUIRES = (
    "triton.runtime.interpreter.ASTTransformer",
    "triton.runtime.interpreter.FunctionRewriter.ast_transformer",
    "triton.runtime.interpreter.FunctionRewriter._compile_and_exec",
    "triton.runtime.interpreter.InterpretedFunction.rewritten_fn",
    "triton.runtime.interpreter.TensorHandle",
    "triton.runtime.interpreter._get_np_dtype",
    "triton.runtime.interpreter.interpreter_semantic.integer_promote_impl",
    "triton.runtime.interpreter.interpreter_semantic.to_tensor_type",
)
"""The internals it replaces or calls."""

HELPER = "_linattn_typed_range"
"""The name the rewritten loops call; injected into the interpreter module's globals."""


def _induction_type(args: tuple[Any, ...]) -> Any:
    """Return the Triton integer type a compiled loop over ``range(*args)`` would use."""
    import triton.language as tl
    from triton.runtime.interpreter import interpreter_semantic as sem

    dtype: Any = None
    for arg in args:
        value = arg.value if isinstance(arg, tl.constexpr) else arg
        ty = value.dtype if isinstance(value, tl.tensor) else sem.to_tensor_type(value)
        dtype = ty if dtype is None else sem.integer_promote_impl(dtype, ty)
    return tl.int32 if dtype is None else dtype


def typed_range(range_fn: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """Iterate ``range_fn(*args, **kwargs)`` yielding interpreter tensors of the loop's type.

    Args:
        range_fn: ``range`` or ``tl.range`` as the kernel spelled it (the interpreter's
            replacement at run time).
        *args: The loop bounds (start, stop, step).
        **kwargs: Loop options (``num_stages``, ``loop_unroll_factor``, ...), passed through.

    Yields:
        One scalar interpreter tensor per iteration.
    """
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    # tl.range's bounds may also come by keyword (the interpreter's range takes arg1, arg2, step).
    bounds = (*args, *(kwargs[k] for k in ("arg1", "arg2", "step") if kwargs.get(k) is not None))
    dtype = _induction_type(bounds)
    np_dtype = _get_np_dtype(dtype)
    for value in range_fn(*args, **kwargs):
        yield tl.tensor(TensorHandle(np.array([value], dtype=np_dtype), dtype), dtype)


def _callee_name(func: ast.expr) -> str | None:
    """The last name of a call target: ``range`` for ``range`` and ``tl.range``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _transformer_class(base: type) -> type:
    """Subclass the interpreter's AST transformer with the loop rewrite."""

    def visit_For(self: ast.NodeTransformer, node: ast.For) -> ast.AST:
        parent = getattr(super(cls, self), "visit_For", None)
        result = parent(node) if parent is not None else self.generic_visit(node)
        if not isinstance(result, ast.For):
            return result
        it = result.iter
        if isinstance(it, ast.Call) and _callee_name(it.func) == "range":
            call = ast.Call(
                func=ast.Name(id=HELPER, ctx=ast.Load()),
                args=[it.func, *it.args],
                keywords=it.keywords,
            )
            result.iter = ast.copy_location(call, it)
        return result

    cls = type("LinattnLoopTransformer", (base,), {"visit_For": visit_For})
    return cls


def apply() -> Restorer:
    """Install the loop-rewriting AST transformer and the helper it calls."""
    check(NAME, VERSIONS, REQUIRES)
    from triton.runtime import interpreter

    restorer = Restorer()
    base = type(interpreter.FunctionRewriter.ast_transformer)
    restorer.set(interpreter, HELPER, typed_range)
    restorer.set(interpreter.FunctionRewriter, "ast_transformer", _transformer_class(base)())
    restorer.set(interpreter.InterpretedFunction, "rewritten_fn", {})
    return restorer
