# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Calls shaped by the kernel's signature (`linattn_verify.signature`)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.signature import (
    check_call,
    fit_convention,
    fit_keyword,
    keywords_for,
    scales_for,
    signature_of,
)


def plain(q: Any, k: Any, v: Any, *, scale: Any = None, initial_state: Any = None) -> None: ...


def catch_all(
    q: Any, k: Any, v: Any, g: Any, beta: Any, chunk_size: int = 64, **kwargs: Any
) -> None: ...


def opaque(*args: Any, **kwargs: Any) -> None: ...


ALL = {"scale": 0.5, "initial_state": None, "output_final_state": False, "cu_seqlens": None}


def test_only_named_keywords_are_passed() -> None:
    assert keywords_for(plain, ALL, declared=ALL) == {"scale": 0.5, "initial_state": None}


def test_a_catch_all_receives_only_declared_features() -> None:
    # transformers' fallbacks take **kwargs and drop a scale passed there: not passed unless the
    # user declared the feature explicitly.
    assert keywords_for(catch_all, ALL, declared={"cu_seqlens"}) == {"cu_seqlens": None}


def test_an_unreadable_signature_is_called_as_declared() -> None:
    assert keywords_for(opaque, ALL, declared=()) == ALL
    assert not signature_of(opaque).readable


def test_wraps_keeps_the_signature_the_call_is_shaped_by() -> None:
    @functools.wraps(plain)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        return plain(*args, **kwargs)

    assert signature_of(wrapper).names == signature_of(plain).names


def test_a_missing_parameter_is_inferred_unsupported_with_a_note() -> None:
    fitted = fit_convention(
        signature_of(catch_all), scale=None, initial_state=True, final_state=True, varlen=False
    )
    assert not fitted["scale"].supported
    assert "applies K^-1/2 itself" in fitted["scale"].note
    assert not fitted["initial_state"].supported
    assert scales_for(None, takes_scale=False) == ("default",)
    assert scales_for("one", takes_scale=False) == ("one",)
    assert scales_for(None, takes_scale=True) == ()


def test_an_explicit_declaration_the_signature_cannot_take_is_a_usage_error() -> None:
    with pytest.raises(InvalidArgument, match="no parameter 'cu_seqlens'"):
        fit_keyword(
            signature_of(plain),
            "cu_seqlens",
            declared=True,
            explicit=True,
            flag="--varlen",
            without="it is not varlen",
        )
    # Through **kwargs an explicit declaration is trusted.
    fitted = fit_keyword(
        signature_of(catch_all),
        "cu_seqlens",
        declared=True,
        explicit=True,
        flag="--varlen",
        without="",
    )
    assert fitted.supported


def test_a_call_the_signature_cannot_bind_names_the_parameter() -> None:
    def wrong(x: Any, y: Any) -> None: ...

    with pytest.raises(InvalidArgument, match="too many positional arguments"):
        check_call(wrong, ["q", "k", "v"], [], "fn(q, k, v)")
    check_call(plain, ["q", "k", "v"], ["scale"], "fn(q, k, v)")
