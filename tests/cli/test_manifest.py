# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Kernel manifests (`linattn_verify.cli.manifest`) and ``soak --manifest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linattn_verify.cli import main
from linattn_verify.cli.manifest import load_manifest
from linattn_verify.errors import InvalidArgument

KERNEL = """
from linattn_verify.linear_attn.reference_kernels import float32_reference

reference = float32_reference("recurrent")

def plain(q, k, v, *, scale=None, initial_state=None, output_final_state=False):
    return reference(q, k, v, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state)
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "kernels.py").write_text(KERNEL)
    return tmp_path


def write(folder: Path, body: str) -> Path:
    path = folder / "mine.toml"
    path.write_text(body)
    return path


def test_entries_are_named_after_the_manifest_and_resolved_beside_it(folder: Path) -> None:
    path = write(
        folder,
        '[[kernel]]\nname = "plain"\ntarget = "kernels.py:plain"\n'
        'flags = ["--form", "recurrent", "--causal-exact"]\nci = true\n',
    )
    (entry,) = load_manifest(path)
    assert entry.name == "mine/plain"
    assert entry.target == f"{folder / 'kernels.py'}:plain"
    assert entry.ci
    kernel = entry.kernel()
    assert kernel.name == "mine/plain"
    assert kernel.capabilities.causal_exact


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('[[kernel]]\nname = "a"\ntarget = "x.py:f"\n', "'flags' is missing"),
        ('[[kernel]]\nname = "a"\ntarget = "x.py:f"\nflags = []\ncolour = 1\n', "unknown keys"),
        ('[[kernel]]\nname = "a"\ntarget = "x.py:f"\nflags = "--form"\n', "expected flags"),
        ('[[kernel]]\nname = "a"\ntarget = "x.py:f"\nflags = ["--budget", "9"]\n', "steer"),
        (
            '[[kernel]]\nname = "a"\ntarget = "x.py:f"\nflags = []\n'
            '[[kernel]]\nname = "a"\ntarget = "y.py:f"\nflags = []\n',
            "duplicate names",
        ),
        ("title = 'nothing'\n", "no \\[\\[kernel\\]\\] tables"),
        ("[[kernel\n", "cannot be read"),
    ],
)
def test_a_malformed_manifest_is_refused_naming_the_entry(
    folder: Path, body: str, match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        load_manifest(write(folder, body))


def test_a_declaration_error_names_the_manifest_entry(folder: Path) -> None:
    path = write(
        folder,
        '[[kernel]]\nname = "plain"\ntarget = "kernels.py:plain"\nflags = ["--varlen"]\n',
    )
    (entry,) = load_manifest(path)
    with pytest.raises(InvalidArgument, match=r"manifest kernel 'mine/plain'.*cu_seqlens"):
        entry.kernel()


def test_soak_visits_the_manifest_kernels(folder: Path, tmp_path: Path) -> None:
    path = write(
        folder,
        '[[kernel]]\nname = "plain"\ntarget = "kernels.py:plain"\n'
        'flags = ["--form", "recurrent", "--deterministic", "--causal-exact"]\n',
    )
    state = tmp_path / "soak.sqlite"
    argv = ["soak", "--manifest", str(path), "--properties", "outputs_match_oracle"]
    argv += ["--state", str(state), "--max-visits", "2", "--chunk-examples", "3"]
    assert main(argv) == 0
    exported = tmp_path / "soak.json"
    assert main(["soak", "--export", str(exported), "--state", str(state)]) == 0
    pairs = json.loads(exported.read_text())["pairs"]
    assert [(p["kernel"], p["property"]) for p in pairs] == [("mine/plain", "outputs_match_oracle")]
    assert pairs[0]["visits"] == 2
