# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Third-party corpus functions on the cases that once looked like their defects.

performer-pytorch's ``causal_linear_attention_noncuda`` keeps its running sums and its
normalizer in the input dtype. In fp16, on a long sequence of positive features (what FAVOR+
produces), q·Σk passes 65504: the denominator overflows to inf, and the backward forms
inf·0 = NaN, so gradients whose exact values are finite come out NaN (found by ``check``'s size
reach at T = 1024, K = V = 128). That is what its declared arithmetic (``--accumulation input``)
does, not a defect of the implementation: those elements are unverifiable
(docs/error-model.md §8.3), every other element is judged and holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from linattn_properties.oracle import gradients_match_oracle

from linattn_verify.cli.manifest import ManifestEntry, load_manifest
from linattn_verify.linear_attn.strategies import ProblemSpec

HERE = Path(__file__).parent

LONG_POSITIVE_FP16 = ProblemSpec(
    B=1, T=1024, H=2, K=128, V=128, dtype="float16", feature_map="identity", normalize=True,
    eps=1e-6, scale=1.0, values="positive", decay="none", initial_state=False,
    output_final_state=False, segments=None, seed=1889808280,
)  # fmt: skip

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def performer() -> ManifestEntry:
    (entry,) = [
        e for e in load_manifest(HERE / "linear_attn.toml") if e.name.endswith("performer_pytorch")
    ]
    return entry


def test_performer_fp16_overflow_is_unverifiable_under_its_declared_arithmetic() -> None:
    result = gradients_match_oracle(LONG_POSITIVE_FP16, performer().kernel())
    assert result.status == "held", result.report()
    by_name = {c.tensor: c.counts for c in result.comparisons}
    # The overflowing rows are excused, not the whole case: early rows of o are still judged.
    assert 0 < by_name["o"].unverifiable < by_name["o"].numel
    assert by_name["dq"].unverifiable == by_name["dq"].numel


def test_performer_fp16_overflow_fails_a_kernel_declared_to_accumulate_in_fp32() -> None:
    # The same function declared with fp32 sums (untruthfully) cannot explain its inf: the
    # excuse belongs to the declared arithmetic, not to fp16 inputs.
    entry = performer()
    flags = list(entry.flags)
    at = flags.index("--accumulation")
    del flags[at : at + 2]
    at = flags.index("--division-dtype")
    del flags[at : at + 2]
    fp32_sums = replace(entry, flags=tuple(flags))
    result = gradients_match_oracle(LONG_POSITIVE_FP16, fp32_sums.kernel())
    assert result.status == "failed", result.report()


LAT_TARGET = "linear_attention_transformer.linear_attention_transformer:causal_linear_attn"
LAT_FLAGS = [
    "--layout", "heads-first", "--query-feature-map", "softmax", "--feature-map", "exp",
    "--normalized", "--normalizer", "clamp", "--eps", "1e-3", "--scale", "fixed",
    "--seq-len-multiple", "64", "--deterministic", "--dtypes", "fp32",
]  # fmt: skip
"""What linear-attention-transformer 0.19.1's ``causal_linear_attn(q, k, v, kv_mask=None,
bucket_size=None, eps=1e-3)`` declares itself to compute, read off its source: heads-first, a
softmax over each query's features then K^-1/2, exp of each key, max(q·z, eps), T a multiple
of its default bucket of 64, o alone."""


def test_linear_attention_transformer_defects_are_named_one_finding_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Declared truthfully, its causal attention has two defects of its own:
    # * each bucket of 64 tokens reads only the earlier buckets' keys (its context is shifted by
    #   a whole bucket), so on one bucket o is 0 everywhere;
    # * it reshapes v with the query's head dim, so V != K raises.
    pytest.importorskip("linear_attention_transformer")
    from linattn_verify.cli import EXIT_FAILED, main

    report = tmp_path / "report"
    # 12 s: both defects are reached (the crash by 7 s) with two other checks on the 2 cores.
    flags = [*LAT_FLAGS, "--budget", "12", "--max-head-dim", "8", "--report", str(report)]
    code = main(["check", LAT_TARGET, *flags, "--no-render"])
    out = capsys.readouterr().out
    assert code == EXIT_FAILED
    assert "(2 findings)" in out, out[out.find("Finding 1") :][:3000]
    assert "o is 0 at every element" in out
    assert "raised RuntimeError: shape" in out
