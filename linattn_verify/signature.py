# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""What a kernel's signature says it takes: calls shaped by the signature, in every family.

The calling conventions (docs/design.md §4) name keyword arguments a kernel may or may not
have: ``scale``, ``initial_state``, ``output_final_state``, ``cu_seqlens``,
``use_qk_l2norm_in_kernel``. A kernel is called only with the keywords its signature names: one
without ``cu_seqlens`` is not varlen, one without ``scale`` applies its own scale, one without
``use_qk_l2norm_in_kernel`` does not normalise q and k. A ``**kwargs`` catch-all names nothing
(transformers' delta-rule fallbacks take ``**kwargs`` and silently drop a ``scale`` passed
there), so a keyword reaches it only where the user declared the feature explicitly. A function
whose signature names nothing beyond ``*args, **kwargs`` (a wrapper without `functools.wraps`),
or cannot be read, is called as its declaration says.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from linattn_verify.errors import InvalidArgument

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclass(frozen=True)
class Signature:
    """The parameters a callable names.

    Attributes:
        names: Every parameter it names (positional or keyword; not ``*args``/``**kwargs``).
        var_keyword: It has a ``**kwargs`` catch-all.
        readable: Its signature could be read and names at least one parameter; otherwise the
            harness cannot tell and calls it as declared.
    """

    names: frozenset[str]
    var_keyword: bool
    readable: bool
    positional: tuple[str, ...] = ()

    def names_parameter(self, name: str) -> bool:
        """Whether the signature names ``name`` (always, when it cannot be read)."""
        return not self.readable or name in self.names

    def accepts(self, name: str) -> bool:
        """Whether ``name=`` can be passed: named, or absorbed by ``**kwargs``."""
        return self.names_parameter(name) or self.var_keyword

    def by_position(self, names: Sequence[str]) -> int:
        """How many of the convention's leading arguments ``names`` to pass by position.

        All of them, up to the first one the signature names at another position, which goes
        by keyword with everything after it: FLA's ``fused_recurrent_gated_delta_rule(q, k, v,
        g, gk, gv, beta, ...)`` takes the delta convention's fifth argument, beta, as its
        seventh. Passed by position it would land in gk. A kernel with names of its own
        (``query``, ``key``) takes every argument by position.
        """
        for i, name in enumerate(names):
            if name in self.positional and self.positional.index(name) != i:
                return i
        return len(names)


@functools.lru_cache(maxsize=256)
def _signature_of(fn: Callable[..., Any]) -> Signature:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and extension functions may have none
        return Signature(frozenset(), True, False)
    names = frozenset(p.name for p in parameters if p.kind not in _VARIADIC)
    var_keyword = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)
    by_position = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = tuple(p.name for p in parameters if p.kind in by_position)
    return Signature(names, var_keyword, bool(names), positional)


def signature_of(fn: Callable[..., Any]) -> Signature:
    """Read ``fn``'s signature (following `functools.wraps`'s ``__wrapped__``)."""
    try:
        return _signature_of(fn)
    except TypeError:  # unhashable callable: read it afresh
        return _signature_of.__wrapped__(fn)


def keywords_for(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], declared: Collection[str]
) -> dict[str, Any]:
    """Return ``kwargs`` restricted to what ``fn`` takes.

    That is the names its signature names and, through a ``**kwargs`` catch-all, only those in
    ``declared`` (features the kernel declared it supports).
    """
    sig = signature_of(fn)
    return {
        name: value
        for name, value in kwargs.items()
        if sig.names_parameter(name) or (sig.var_keyword and name in declared)
    }


def call_with(
    fn: Callable[..., Any], arguments: Sequence[tuple[str, Any]], kwargs: Mapping[str, Any]
) -> Any:
    """Call ``fn`` with the convention's ``arguments`` (name, value pairs) and ``kwargs``.

    The arguments go by position where the signature has them there (`Signature.by_position`),
    else by keyword.
    """
    n = signature_of(fn).by_position([name for name, _ in arguments])
    return fn(*(value for _, value in arguments[:n]), **dict(arguments[n:]), **kwargs)


def check_call(
    fn: Callable[..., Any], positional: Sequence[str], keywords: Collection[str], convention: str
) -> None:
    """Check that ``fn`` can be called as the harness will call it, before any search.

    Args:
        fn: The kernel.
        positional: The names of the arguments passed by position (``q``, ``k``, ``v``, ...).
        keywords: The keywords that will be passed (`keywords_for`'s result's names).
        convention: The family's calling convention, for the message.

    Raises:
        InvalidArgument: naming the parameter the call cannot bind (a missing required one, one
            too many positional arguments): the declaration or the target is wrong (exit 2).
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    # As `call_with` passes them: past the first one named elsewhere, by keyword.
    n = signature_of(fn).by_position(positional)
    keywords = [*positional[n:], *keywords]
    positional = positional[:n]
    try:
        sig.bind(*positional, **dict.fromkeys(keywords))
    except TypeError as exc:
        call = ", ".join([*positional, *(f"{k}=..." for k in sorted(keywords))])
        raise InvalidArgument(
            f"The kernel's signature {fn.__name__ if hasattr(fn, '__name__') else fn}{sig} "
            f"cannot be called as fn({call}) ({exc}); the convention is {convention}."
        ) from None


@dataclass(frozen=True)
class Fitted:
    """A convention keyword, fitted to a signature.

    Attributes:
        supported: Whether the kernel is taken to support the feature.
        note: What was inferred from the signature, for the ``assumed:`` header, or "".
    """

    supported: bool
    note: str = ""


def fit_keyword(
    sig: Signature,
    parameter: str,
    *,
    declared: bool,
    explicit: bool,
    flag: str,
    without: str,
) -> Fitted:
    """Whether a feature passed as ``parameter=`` is supported, given the signature.

    Args:
        sig: The kernel's signature.
        parameter: The keyword (``cu_seqlens``, ``scale``, ...).
        declared: What the declaration says (a flag's value, or its default).
        explicit: The user asked for the feature by a flag (not its default).
        flag: The flag that asks for it, for the error message.
        without: What the kernel is taken to do without the parameter, for the note.

    Raises:
        InvalidArgument: if the feature was asked for explicitly and the signature can take no
            such keyword (exit 2 before any search: the declaration is wrong, not the kernel).
    """
    if not declared or sig.names_parameter(parameter):
        return Fitted(declared)
    if explicit:
        if sig.var_keyword:
            return Fitted(True, f"{parameter}= through **kwargs (declared by {flag})")
        raise InvalidArgument(
            f"Got {flag}, but the kernel's signature has no parameter {parameter!r} (its "
            f"parameters: {', '.join(sorted(sig.names)) or 'none'}): it cannot take it."
        )
    return Fitted(False, f"no {parameter} parameter: {without}")


def fit_convention(
    sig: Signature,
    *,
    scale: str | None,
    initial_state: bool,
    final_state: bool,
    varlen: bool,
) -> dict[str, Fitted]:
    """The keywords every family's convention shares, fitted to a signature (`fit_keyword`).

    Args:
        sig: The kernel's signature.
        scale: ``check --scale``: `None` (not given), ``"arg"``, ``"fixed"`` or ``"one"``.
        initial_state: Not declared ``--no-initial-state``.
        final_state: Not declared ``--no-final-state``.
        varlen: Declared ``--varlen``.

    Returns:
        ``{"scale", "initial_state", "output_final_state", "cu_seqlens"}`` -> `Fitted`.
    """
    return {
        "scale": fit_keyword(
            sig,
            "scale",
            declared=scale in (None, "arg"),
            explicit=scale == "arg",
            flag="--scale arg",
            without="it applies K^-1/2 itself (--scale one: it applies none)",
        ),
        "initial_state": fit_keyword(
            sig,
            "initial_state",
            declared=initial_state,
            explicit=False,
            flag="",
            without="it takes no initial state",
        ),
        "output_final_state": fit_keyword(
            sig,
            "output_final_state",
            declared=final_state,
            explicit=False,
            flag="",
            without="it returns no final state",
        ),
        "cu_seqlens": fit_keyword(
            sig,
            "cu_seqlens",
            declared=varlen,
            explicit=varlen,
            flag="--varlen",
            without="it is not varlen",
        ),
    }


def fit_flags(fn: Callable[..., Any], flags: Any) -> tuple[Signature, dict[str, Fitted]]:
    """``fn``'s signature and `fit_convention` of ``check``'s parsed flags (either family)."""
    sig = signature_of(fn)
    fitted = fit_convention(
        sig,
        scale=flags.scale,
        initial_state=not flags.no_initial_state,
        final_state=not flags.no_final_state,
        varlen=flags.varlen,
    )
    return sig, fitted


def declared_capabilities(flags: Any, fitted: Mapping[str, Fitted]) -> dict[str, Any]:
    """The capability fields every family's `check` declaration shares, as keyword arguments.

    Args:
        flags: ``check``'s parsed flags (either family).
        fitted: `fit_flags`'s keywords fitted to the kernel's signature.
    """
    takes_scale = fitted["scale"].supported
    return {
        "varlen": fitted["cu_seqlens"].supported,
        "initial_state": fitted["initial_state"].supported,
        "final_state": fitted["output_final_state"].supported,
        "dtypes": tuple(flags.dtypes),
        "max_head_dim": flags.max_head_dim,
        "deterministic": flags.deterministic,
        "causal_exact": flags.causal_exact,
        "layout_exact": flags.layout_exact,
        "scales": scales_for(flags.scale, takes_scale),
        "takes_scale": takes_scale,
        "final_state_dtype": flags.final_state_dtype,
        "layout": flags.layout,
        "state_layout": flags.state_layout,
        "seq_len_at_least_heads": flags.seq_len_at_least_heads,
        "value_gate": flags.value_gate,
    }


def scales_for(scale: str | None, takes_scale: bool) -> tuple[str, ...]:
    """The scales a kernel takes: any it is passed, else the one it applies (``check --scale``)."""
    if takes_scale:
        return ()
    return ("one",) if scale == "one" else ("default",)


__all__ = [
    "Fitted",
    "Signature",
    "call_with",
    "check_call",
    "declared_capabilities",
    "fit_convention",
    "fit_flags",
    "fit_keyword",
    "keywords_for",
    "scales_for",
    "signature_of",
]
