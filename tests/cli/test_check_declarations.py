# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``check``'s declarations: what is read off a kernel's signature, and what is declared.

Every test builds the kernel as ``check`` does (its parser, then the family's
``source_from_args``), without searching: a declaration the signature cannot take is a usage
error before any search.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from linattn_verify.cli import build_parser, main
from linattn_verify.cli._args import family_in
from linattn_verify.core.family import family_named
from linattn_verify.errors import InvalidArgument

KERNELS = """
def linear_no_scale(q, k, v, *, initial_state=None, output_final_state=False):
    raise AssertionError("not called")

def delta_no_l2norm(q, k, v, g, beta, *, scale=None, initial_state=None,
                    output_final_state=False):
    raise AssertionError("not called")

def two_args(x, y):
    raise AssertionError("not called")


def strided_state(q, k, v, *, scale=None, output_final_state=False):
    # Correct, but S_T is one torch reduction over T, whose order follows the strides.
    B, T, H, K = q.shape
    s = K**-0.5 if scale is None else scale
    qf, kf, vf = q.float(), k.float(), v.float()
    S = (kf[..., :, None] * vf[..., None, :]).cumsum(1)
    o = s * (qf[..., :, None] * S).sum(-2)
    final = (kf[..., :, None] * vf[..., None, :]).sum(1) if output_final_state else None
    return o.to(q.dtype), final


def half_key_sum(q, k, v, *, scale=None, output_final_state=False):
    # Normalized; returns z_T in the input dtype, as FLA's normalized kernels do.
    B, T, H, K = q.shape
    s = K**-0.5 if scale is None else scale
    qf, kf, vf = q.float(), k.float(), v.float()
    S = (kf[..., :, None] * vf[..., None, :]).cumsum(1)
    z = kf.cumsum(1)
    o = (s * (qf[..., :, None] * S).sum(-2)) / (s * (qf * z).sum(-1, keepdim=True))
    if not output_final_state:
        return o.to(q.dtype), None
    return o.to(q.dtype), (S[:, -1], z[:, -1].to(q.dtype))
"""


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("targets") / "kernels.py"
    path.write_text(KERNELS)
    return path


def source(argv: list[str]) -> Any:
    # As main does: the parser has the flags of the family the command line names.
    args = build_parser(family_in(argv)).parse_args(["check", *argv])
    return family_named(args.family).source_from_args(args, on_cuda=False)


def test_a_kernel_without_scale_applies_its_own(targets: Path) -> None:
    src = source([f"{targets}:linear_no_scale"])
    cap = src.capabilities
    assert (cap.takes_scale, cap.scales, cap.varlen) == (False, ("default",), False)
    assert any("no scale parameter" in note for note in src.inferred)
    assert source([f"{targets}:linear_no_scale", "--scale", "one"]).capabilities.scales == ("one",)


DELTA_RECURRENT = ["--family", "delta", "--gates", "scalar", "--form", "recurrent"]


def test_a_delta_kernel_without_the_l2norm_keyword_is_checked_without_it(targets: Path) -> None:
    src = source([f"{targets}:delta_no_l2norm", *DELTA_RECURRENT])
    assert src.capabilities.l2norm_qk == (False,)
    assert any("use_qk_l2norm_in_kernel" in note for note in src.inferred)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["{t}:linear_no_scale", "--varlen"], "no parameter 'cu_seqlens'"),
        (["{t}:linear_no_scale", "--scale", "arg"], "no parameter 'scale'"),
        (
            ["{t}:delta_no_l2norm", *DELTA_RECURRENT, "--l2norm", "on"],
            "no parameter 'use_qk_l2norm_in_kernel'",
        ),
        (["{t}:two_args"], "cannot be called as fn"),
        (["{t}:linear_no_scale", "--decay", "scalar"], "cannot be called as fn"),
    ],
)
def test_a_declaration_the_signature_cannot_take_is_refused(
    targets: Path, argv: list[str], match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        source([a.format(t=targets) for a in argv])


def test_the_cli_exits_2_naming_the_parameter_before_any_search(
    targets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", f"{targets}:two_args", "--budget", "3600"]) == 2
    err = capsys.readouterr().err
    assert "cannot be called as fn(q, k, v" in err
    assert "Traceback" not in err


def test_exactness_promises_are_declared_by_flags(targets: Path) -> None:
    cap = source([f"{targets}:linear_no_scale"]).capabilities
    assert (cap.deterministic, cap.causal_exact, cap.layout_exact) == (False, False, False)
    flags = ["--deterministic", "--causal-exact", "--layout-exact", "--final-state-dtype", "input"]
    cap = source([f"{targets}:linear_no_scale", *flags]).capabilities
    assert (cap.deterministic, cap.causal_exact, cap.layout_exact) == (True, True, True)
    assert cap.final_state_dtype == "input"


def test_bits_that_differ_within_the_bound_are_within_rounding_not_failed(
    targets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from linattn_properties._testing import example_spec
    from linattn_properties.contract import contract_holds

    from linattn_verify.cli.check import _print_within_rounding
    from linattn_verify.results import PropertyVerdict

    spec = example_spec(B=2, T=13, K=5, V=7, decay="none", initial_state=False, seed=3)
    kernel = source([f"{targets}:strided_state", "--form", "recurrent", "--deterministic"]).load()
    result = contract_holds(spec, kernel, backward=False)
    assert result.status == "within_rounding", result.report()
    assert "--layout-exact" in (result.reason or "")
    verdict = PropertyVerdict(kernel.name, "contract_holds", "held").counted(result).settled()
    assert (verdict.status, verdict.within_rounding, verdict.ok) == ("within_rounding", 1, True)
    _print_within_rounding([verdict], sys.stdout)
    out = capsys.readouterr().out
    assert "Within rounding, not bit-exact" in out
    assert "contract_holds: 1 of 1 examples" in out
    assert "--layout-exact" in out


def test_a_state_in_the_input_dtype_is_declared_or_refused(targets: Path) -> None:
    from linattn_properties._testing import example_spec
    from linattn_properties.contract import contract_holds

    spec = example_spec(
        dtype="float16", normalize=True, decay="none", initial_state=False, T=9, feature_map="relu"
    )
    flags = ["--normalized", "--feature-map", "relu", "--no-initial-state", "--form", "recurrent"]
    undeclared = source([f"{targets}:half_key_sum", *flags]).load()
    result = contract_holds(spec, undeclared, backward=False)
    assert result.status == "failed"
    assert "--final-state-dtype input" in (result.reason or "")
    declared = source([f"{targets}:half_key_sum", *flags, "--final-state-dtype", "input"]).load()
    assert contract_holds(spec, declared, backward=False).status in ("held", "within_rounding")
