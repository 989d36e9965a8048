# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""End-to-end tests of the pytest plugin: options, fixtures, markers, and a light import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

KERNEL_TEST = """
def test_kernel(linattn_kernel):
    assert linattn_kernel.name
"""

FAILING_TEST = """
from linattn_verify.results import PropertyResult
from linattn_verify.running import check_property
from linattn_verify.linear_attn.strategies import ProblemSpec

SPEC = ProblemSpec(1, 3, 1, 2, 2, "float32", "identity", False, 0.0, None, "normal", "none",
                   False, False, None, 0)


def always_fails(spec, kernel):
    return PropertyResult("always_fails", kernel.name, spec.describe(), "failed", reason="boom")


def test_fails(linattn_kernel, linattn_failures_dir):
    with open("seen_dir.txt", "w") as f:
        f.write(str(linattn_failures_dir))
    check_property(always_fails, SPEC, linattn_kernel)
"""


@pytest.fixture(autouse=True)
def _kernels_imported_outside() -> None:
    """Import the kernels (and triton) before any in-process run.

    pytester's in-process runs drop the modules they imported when they end; re-importing
    triton's extension in the next run crashes the interpreter. Imported here, they stay.
    """
    from linattn_verify.registry import registered_kernels

    registered_kernels()


def _collected(result: pytest.RunResult) -> list[str]:
    return re.findall(r"test_kernel\[([^\]]+)\]", result.stdout.str())


def test_kernels_option_collects_only_matching_kernels(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(KERNEL_TEST)
    result = pytester.runpytest("--linattn-kernels", "torch/*", "--collect-only", "-q")
    assert result.ret == 0
    collected = _collected(result)
    assert sorted(collected) == ["torch/chunk", "torch/parallel", "torch/recurrent"]


def test_kernels_option_takes_several_patterns_and_defaults_to_all(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(KERNEL_TEST)
    two = _collected(pytester.runpytest("--linattn-kernels", "torch/chunk, triton/chunk",
                                        "--collect-only", "-q"))  # fmt: skip
    assert sorted(two) == ["torch/chunk", "triton/chunk"]
    every = _collected(pytester.runpytest("--collect-only", "-q"))
    assert {"torch/chunk", "triton/chunk", "triton/recurrent"} <= set(every)


def test_kernels_option_rejects_patterns_that_match_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(KERNEL_TEST)
    result = pytester.runpytest("--linattn-kernels", "nope/*")
    assert result.ret != 0
    assert "No registered kernel matches" in result.stdout.str() + result.stderr.str()
    empty = pytester.runpytest("--linattn-kernels", " , ")
    assert empty.ret != 0
    assert "expected comma-separated glob patterns" in empty.stderr.str()


def test_failures_option_receives_the_failing_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAILING_TEST)
    result = pytester.runpytest("--linattn-kernels", "torch/recurrent", "--linattn-failures", "out")
    result.assert_outcomes(failed=1)
    saved = pytester.path / "out" / "always_fails-torch_recurrent.json"
    assert saved.is_file()
    assert saved.with_suffix(".pt").is_file()
    assert (pytester.path / "seen_dir.txt").read_text() == str(pytester.path / "out")
    result.stdout.fnmatch_lines([f"*Replay: linattn-verify replay {saved}*"])


def test_failures_default_to_the_rootdir(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAILING_TEST)
    result = pytester.runpytest("--linattn-kernels", "torch/parallel")
    result.assert_outcomes(failed=1)
    assert (pytester.path / ".linattn-failures" / "always_fails-torch_parallel.json").is_file()


def test_help_lists_the_options_with_their_defaults(pytester: pytest.Pytester) -> None:
    text = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert "linattn-verify: kernels under test and failures:" in text
    assert "--linattn-kernels=PATTERNS" in text
    assert "Default: ('*',)" in text
    assert "--linattn-failures=DIR" in text
    assert "Default: '.linattn-failures'" in text


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.slow
        def test_slow():
            pass
        """
    )
    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)
    markers = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.gpu:" in markers
    assert "@pytest.mark.slow:" in markers


def test_gpu_tests_are_skipped_without_cuda(pytester: pytest.Pytester) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: gpu tests run here")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_on_gpu():
            raise AssertionError("must not run without CUDA")

        def test_anywhere():
            pass
        """
    )
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no CUDA device*"])


def test_markers_with_arguments_are_rejected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu(2)
        def test_two_gpus():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret != 0
    assert "the gpu marker takes no arguments" in result.stderr.str()


def test_report_header_shows_the_selection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--linattn-kernels", "torch/*")
    result.stdout.fnmatch_lines(["linattn-verify kernels: torch/*, failures: *.linattn-failures"])


def test_importing_the_plugin_imports_neither_torch_nor_triton() -> None:
    code = (
        "import sys\n"
        "import linattn_verify.pytest_plugin, linattn_verify.failures\n"
        "heavy = sorted({'torch', 'triton'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    # A fresh interpreter: this process has imported torch long ago.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


CATALOGUE_FAILURE_TEST = """
from dataclasses import replace

from linattn_properties.oracle import outputs_match_oracle
from linattn_verify.registry import get_kernel
from linattn_verify.running import check_property
from linattn_verify.linear_attn.strategies import ProblemSpec

SPEC = ProblemSpec(1, 4, 1, 2, 2, "float32", "identity", False, 0.0, None, "normal", "none",
                   False, False, None, 3)
REFERENCE = get_kernel("torch/recurrent")


def off_by_one(*args, **kwargs):
    o, state = REFERENCE.fn(*args, **kwargs)
    return o + 1, state


BROKEN = replace(REFERENCE, name="bug/off_by_one", fn=off_by_one)


def test_catalogue_property():
    check_property(outputs_match_oracle, SPEC, BROKEN)
"""


def test_a_failing_property_test_prints_what_check_prints(pytester: pytest.Pytester) -> None:
    # The project's tests and `linattn-verify check` share one runner (`check_property`): the
    # failure a test prints is the report, the repro and the replay line a `check` user reads.
    pytester.makepyfile(CATALOGUE_FAILURE_TEST)
    result = pytester.runpytest("--linattn-failures", "out")
    result.assert_outcomes(failed=1)
    saved = pytester.path / "out" / "outputs_match_oracle-bug_off_by_one.json"
    result.stdout.fnmatch_lines(
        [
            "*outputs_match_oracle FAILED for bug/off_by_one [ProblemSpec(B=1, T=4*",
            "*bug/off_by_one o is not close to the float64 oracle!*",
            "*Mismatched elements (score > 1): 8 / 8 (100.0%)*",
            "*Repro: from linattn_verify.linear_attn.strategies import ProblemSpec; problem = *",
            f"*Replay: linattn-verify replay {saved}*",
        ]
    )


HEADROOM_TEST = """
import json

from linattn_properties.oracle import outputs_match_oracle
from linattn_verify.registry import get_kernel
from linattn_verify.running import check_property
from linattn_verify.linear_attn.strategies import ProblemSpec

SPECS = [
    ProblemSpec(1, T, 1, 2, 2, "float32", "identity", False, 0.0, None, "normal", "none",
                False, True, None, T)
    for T in (3, 5)
]


def _run(name):
    kernel = get_kernel(name)
    scores = []
    for spec in SPECS:
        worst = max(
            (c for c in check_property(outputs_match_oracle, spec, kernel).comparisons
             if c.reference == "oracle"),
            key=lambda c: c.deciding,
        )
        scores.append((worst.deciding, worst.tensor))
    with open(name.replace("/", "_") + ".json", "w") as f:
        json.dump(max(scores), f)


def test_recurrent():
    _run("torch/recurrent")


def test_chunk():
    _run("torch/chunk")
"""

TITLE = "linattn-verify: worst headroom per kernel"


def _section(text: str) -> list[str]:
    """The lines of the headroom section (after its title, up to pytest's closing line)."""
    lines = text.splitlines()
    (start,) = [i for i, line in enumerate(lines) if TITLE in line]
    section = []
    for line in lines[start + 1 :]:
        if line.startswith("=") or not line.strip():
            break
        section.append(line)
    return section


def _expected(path: Path, kernel: str) -> tuple[float, str]:
    score, tensor = json.loads((path / (kernel.replace("/", "_") + ".json")).read_text())
    return float(score), str(tensor)


def _check_section(result: pytest.RunResult, path: Path) -> None:
    section = _section(result.stdout.str())
    rows = [line for line in section if line.startswith("torch/")]
    assert [row.split()[0] for row in rows] == sorted(
        ["torch/recurrent", "torch/chunk"], key=lambda k: -_expected(path, k)[0]
    ), "one line per kernel, worst first"
    for row in rows:
        kernel = row.split()[0]
        score, tensor = _expected(path, kernel)
        match = re.search(r" r (\S+) +headroom (\S+)x +(.*)$", row)
        assert match, row
        assert float(match[1]) == pytest.approx(score, rel=1e-2)
        assert float(match[2]) == pytest.approx(2 / score, rel=0.1)
        assert match[3] == f"outputs_match_oracle, {tensor}, float32"


def test_a_session_ends_with_the_worst_headroom_per_kernel(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    from linattn_verify.pytest_plugin import _HEADROOM, Headroom

    outer = request.config.stash.get(_HEADROOM, Headroom())
    before = dict(outer.worst)
    pytester.makepyfile(HEADROOM_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    _check_section(result, pytester.path)
    # The session nested in this one (in-process) collected for itself alone.
    assert outer.worst == before


def test_no_section_when_no_property_ran(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(KERNEL_TEST)
    result = pytester.runpytest("--linattn-kernels", "torch/chunk")
    result.assert_outcomes(passed=1)
    assert TITLE not in result.stdout.str()


def test_the_section_merges_what_xdist_workers_saw(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When this suite itself runs under xdist, these would make the nested run a worker.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(HEADROOM_TEST)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    # Each test ran on a worker of its own (--dist load hands them out one by one).
    _check_section(result, pytester.path)


def test_a_nan_score_ranks_worst_and_has_no_headroom() -> None:
    from linattn_verify.pytest_plugin import Headroom

    headroom = Headroom()
    where = {"property": "p", "tensor": "o", "dtype": "bfloat16"}
    headroom.merge({"a/k": {"r": 0.5, **where}, "b/k": {"r": 1.5, **where}})
    headroom.merge({"a/k": {"r": float("nan"), **where}, "b/k": {"r": 0.1, **where}})
    lines = headroom.lines()
    assert [line.split()[0] for line in lines[:2]] == ["a/k", "b/k"]
    assert "headroom 0x" in lines[0]
    assert "r 1.5 " in lines[1], "a worker's lower score does not replace the worst"
    assert Headroom().lines() == []
