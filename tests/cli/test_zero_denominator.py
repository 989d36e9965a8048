# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`check --zero-denominator`: a kernel declares what it returns where the exact result is 0/0.

The kernel below is correct: normalized linear attention with eps = 0 that divides the way IEEE
arithmetic does, so a row whose query is 0 gives 0/0 = NaN. The exact result is undefined there,
so it passes declared ``ieee`` (its NaN is the declared value) and ``any`` (nothing is judged
there), and fails declared ``zero``: one root cause, reported as one finding however many
properties it breaks.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import EXIT_FAILED, EXIT_OK, main
from linattn_verify.linear_attn.kernel import Capabilities
from linattn_verify.linear_attn.recipe import PrecisionRecipe
from linattn_verify.linear_attn.targets import KernelSource
from linattn_verify.registry import FULL

KERNEL = textwrap.dedent(
    """
    import torch

    from linattn_verify.linear_attn.reference_kernels import float32_reference

    _unnormalized = float32_reference("recurrent")


    def ieee_normalized(q, k, v, g=None, *, scale=None, initial_state=None,
                        output_final_state=False, cu_seqlens=None):
        # N and Z as two unnormalized runs (Z: values 1, initial state z_0), then N / Z with no
        # guard: eps = 0, and 0/0 = NaN as IEEE division gives it.
        S0 = z0 = None
        if initial_state is not None:
            S0, z0 = initial_state
            z0 = z0[..., None]
        kw = dict(scale=scale, output_final_state=output_final_state, cu_seqlens=cu_seqlens)
        N, S = _unnormalized(q, k, v, g, initial_state=S0, **kw)
        Z, z = _unnormalized(q, k, torch.ones_like(v[..., :1]), g, initial_state=z0, **kw)
        o = (N.float() / Z.float()).to(q.dtype)
        return o, ((S, z[..., 0]) if output_final_state else None)
    """
)


@pytest.fixture
def target(tmp_path: Path) -> str:
    path = tmp_path / "ieee_kernel.py"
    path.write_text(KERNEL)
    return f"{path}:ieee_normalized"


def _check(target: str, convention: str, report: Path) -> tuple[int, dict[str, Any]]:
    code = main(
        [
            "check",
            target,
            "--normalized",
            "--eps",
            "0",
            "--zero-denominator",
            convention,
            "--form",
            "recurrent",
            "--dtypes",
            "float32",
            "--budget",
            "4",
            "--max-seq-len",
            "8",
            "--report",
            str(report),
        ]
    )
    document: dict[str, Any] = json.loads((report / "run.json").read_text())
    return code, document


def _undefined_counts(document: dict[str, Any]) -> list[int]:
    return [
        c["counts"]["undefined"]
        for case in document["cases"]
        for c in case["comparisons"]
        if c["counts"]["undefined"]
    ]


@pytest.mark.parametrize("convention", ["ieee", "any"])
def test_an_ieee_kernel_passes_when_it_declares_ieee_or_any(
    convention: str, target: str, tmp_path: Path
) -> None:
    code, document = _check(target, convention, tmp_path / convention)
    failed = [v["message"] for v in document["verdicts"] if v["status"] == "failed"]
    assert code == EXIT_OK, failed
    assert document["kernels"][0]["capabilities"]["zero_denominator"] == convention
    # The search met rows whose exact denominator is 0: counted as undefined, not judged.
    assert _undefined_counts(document)
    assert not document["failures"]


def test_the_same_kernel_declared_zero_fails_with_one_finding(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = _check(target, "zero", tmp_path / "zero")
    assert code == EXIT_FAILED
    failed = [v["property"] for v in document["verdicts"] if v["status"] == "failed"]
    assert len(failed) >= 2, "the 0/0 row breaks several properties"
    # The per-property verdicts stay as they are; the findings group them.
    [finding] = document["failures"]
    assert sorted(finding["properties"]) == sorted(failed)
    assert (
        "on rows whose exact denominator is 0, where it declared zero_denominator='zero'"
        in (finding["message"])
    )
    # A declared convention the output breaks: the declaration may be what is wrong.
    assert finding["kind"] == "declaration"
    out = capsys.readouterr().out
    assert out.index("Explained by the declaration") < out.index("Finding 1")
    assert f"Finding 1 ({len(failed)} properties: " in out
    assert "Finding 2" not in out
    assert f"{len(failed)} failed (1 finding, 1 explained by the declaration)" in out
    # The report's failures section shows the finding under one heading naming its properties.
    report = (tmp_path / "zero" / "report.md").read_text().splitlines()
    [title] = [line for line in report if line.startswith("### 1. ")]
    assert all(p.replace("_", "\\_") in title for p in finding["properties"]), title


def test_a_kernel_source_keeps_its_convention_and_old_sources_read_as_zero() -> None:
    source = KernelSource(
        target="k.py:fn",
        capabilities=Capabilities(normalize=(True,), zero_denominator="ieee"),
        recipe=PrecisionRecipe(),
    )
    document = source.to_json()
    assert document["capabilities"]["zero_denominator"] == "ieee"
    assert KernelSource.from_json(document) == source
    # Saved before kernels declared one: checked then under the convention the harness imposed.
    del document["capabilities"]["zero_denominator"]
    assert KernelSource.from_json(document).capabilities.zero_denominator == "zero"


def test_who_declares_what() -> None:
    assert Capabilities().zero_denominator == "any"  # a third-party kernel: nothing imposed
    assert FULL.zero_denominator == "zero"  # our kernels and the torch references


def test_an_unknown_convention_is_a_usage_error(target: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", target, "--normalized", "--zero-denominator", "nan"])
    assert info.value.code == 2
