# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""enable/disable/enabled: selection of the interpreter, version guards, idempotence."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator

import pytest
import torch

from linattn_verify import interpreter
from linattn_verify.errors import InvalidArgument
from linattn_verify.interpreter import InterpreterPatchError, _guard, bounds

pytestmark = pytest.mark.interpret


@pytest.fixture
def clean() -> Iterator[None]:
    """Start with no patch applied and put back whatever was applied before."""
    before = interpreter.disable()
    yield
    interpreter.disable()
    if before:
        interpreter.enable(patches=before)


def test_enable_sets_triton_interpret_without_cuda(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert interpreter.enable(patches=()) == []
    assert interpreter.enabled() == []
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_enable_patches_nothing_on_cuda(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert interpreter.enable() == []
    assert interpreter.enabled() == []
    assert "TRITON_INTERPRET" not in os.environ


def test_enable_is_idempotent_and_disable_restores(clean: None) -> None:
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.__dict__["_bench"]
    assert interpreter.enable(patches=["bounds", "autotune"]) == ["autotune", "bounds"]
    patched = Autotuner.__dict__["_bench"]
    assert patched is not original
    assert interpreter.enable(patches=["autotune"]) == ["autotune"]
    assert Autotuner.__dict__["_bench"] is patched
    assert interpreter.enabled() == ["autotune", "bounds"]
    assert interpreter.enable() == list(interpreter.PATCHES)
    assert interpreter.disable() == list(interpreter.PATCHES)
    assert Autotuner.__dict__["_bench"] is original
    assert interpreter.enabled() == []


def test_unknown_patch_names_are_rejected(clean: None) -> None:
    with pytest.raises(InvalidArgument, match="'nope'"):
        interpreter.enable(patches=["autotune", "nope"])
    with pytest.raises(InvalidArgument, match="type=str"):
        interpreter.enable(patches="autotune")


@pytest.mark.parametrize("version", [(3, 6, 0), (3, 10, 0)], ids=["3.6", "3.10"])
def test_version_outside_range_raises(
    clean: None, monkeypatch: pytest.MonkeyPatch, version: tuple[int, int, int]
) -> None:
    monkeypatch.setattr(_guard, "triton_version", lambda: version)
    installed = ".".join(map(str, version))
    for patch in interpreter.PATCHES:
        with pytest.raises(
            InterpreterPatchError, match=rf"'{patch}' was written for triton >=3\.7,<3\.10"
        ) as info:
            interpreter.enable(patches=[patch])
        assert (info.value.installed, info.value.supported) == (installed, ">=3.7,<3.10")
        assert isinstance(info.value, RuntimeError)
    assert interpreter.enabled() == []


@pytest.mark.parametrize("version", [(3, 7, 0), (3, 8, 1), (3, 9, 0)], ids=["3.7", "3.8", "3.9"])
def test_every_patch_accepts_the_last_three_minor_releases(
    monkeypatch: pytest.MonkeyPatch, version: tuple[int, int, int]
) -> None:
    monkeypatch.setattr(_guard, "triton_version", lambda: version)
    for patch in interpreter.PATCHES:
        module = importlib.import_module(f"linattn_verify.interpreter.{patch}")
        # The range only: the internals are those of the Triton actually installed.
        _guard.check(patch, module.VERSIONS, ())


def test_missing_internals_raise_and_apply_nothing(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = "triton.runtime.interpreter.InterpreterBuilder.create_no_such_thing"
    monkeypatch.setattr(bounds, "REQUIRES", (*bounds.REQUIRES, missing))
    with pytest.raises(InterpreterPatchError, match="'bounds' cannot be applied") as info:
        interpreter.enable(patches=["autotune", "bounds"])
    assert missing in str(info.value)
    # Checked before anything was changed: autotune, listed first, was not applied either.
    assert interpreter.enabled() == []


def test_versioned_internals_are_required_only_on_their_versions(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = "triton.runtime.interpreter.InterpreterBuilder.create_no_such_thing"
    found = _guard.triton_version()[:2]
    here = _guard.Versioned(missing, (found, (found[0], found[1] + 1)))
    elsewhere = _guard.Versioned(missing, ((3, 0), (3, 1)))
    monkeypatch.setattr(bounds, "REQUIRES", (*bounds.REQUIRES, elsewhere))
    assert interpreter.enable(patches=["bounds"]) == ["bounds"]
    interpreter.disable()
    monkeypatch.setattr(bounds, "REQUIRES", (*bounds.REQUIRES, here))
    with pytest.raises(InterpreterPatchError, match="'bounds' cannot be applied") as info:
        interpreter.enable(patches=["bounds"])
    assert missing in str(info.value)
    assert _guard.required([here, elsewhere, "a.b"], found) == [missing, "a.b"]
