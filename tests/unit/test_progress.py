# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""`linattn_verify.progress.Progress`: one bar, item lines only when verbose, honest totals."""

from __future__ import annotations

import io

import pytest

from linattn_verify.errors import InvalidArgument
from linattn_verify.progress import Progress


def _drawn(**kwargs: object) -> tuple[Progress, io.StringIO]:
    stream = io.StringIO()
    return Progress("run", stream=stream, **kwargs), stream  # type: ignore[arg-type]


def test_item_lines_are_printed_only_when_verbose() -> None:
    for verbose in (False, True):
        bar, stream = _drawn(total=2, verbose=verbose)
        with bar:
            bar.advance(line="case one")
            bar.advance(line="case two")
        text = stream.getvalue()
        assert ("case one" in text) is verbose
        assert ("case two" in text) is verbose
        # The bar itself is drawn either way (once, at the end, on a stream that is no terminal).
        assert "2/2 cases" in text


def test_the_bar_counts_done_and_failed() -> None:
    bar, stream = _drawn(total=10)
    with bar:
        bar.advance(3)
        bar.advance(failed=True)
        bar.advance(2, failed=2)
    assert (bar.done, bar.failed) == (6, 3)
    text = stream.getvalue()
    assert "6/10 cases" in text
    assert "3 failed" in text


def test_a_bar_without_failures_says_so() -> None:
    bar, stream = _drawn(total=1)
    with bar:
        bar.advance()
    assert "no failures" in stream.getvalue()


def test_settle_ends_the_bar_at_what_was_done() -> None:
    # A plan of 10 cases of which the draws made 4, then 2 more found on the way.
    bar, stream = _drawn(total=10)
    with bar:
        bar.advance(4)
        bar.grow(2)
        assert bar.total == 12
        bar.advance(2)
        bar.settle()
    assert bar.total == 6
    assert "6/6 cases" in stream.getvalue()


def test_a_budget_bar_counts_items_against_time() -> None:
    bar, stream = _drawn(total=None, unit="examples", budget=60.0)
    with bar:
        bar.advance(7)
        bar.settle()
    # The items are counted, not set against a total: time is what runs out.
    assert bar.total is None
    assert "7 examples" in stream.getvalue()


def test_printed_text_is_not_read_as_markup() -> None:
    bar, stream = _drawn(total=1, verbose=True)
    with bar:
        bar.advance(line="[red]ProblemSpec(T=3)[/red]")
    assert "[red]ProblemSpec(T=3)[/red]" in stream.getvalue()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"total": -1}, "total=-1"),
        ({"total": 2.5}, "total=2.5"),
        ({"total": True}, "total=True"),
        ({"total": None, "budget": 0}, "budget=0"),
        ({"total": None, "budget": -3.0}, "budget=-3.0"),
    ],
)
def test_malformed_arguments_are_rejected_by_name(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named.replace(".", r"\.")):
        Progress("run", **kwargs)  # type: ignore[arg-type]


def test_an_open_ended_bar_counts_without_a_time_left() -> None:
    bar, stream = _drawn(total=None, unit="examples")
    with bar:
        bar.advance(4)
    text = stream.getvalue()
    assert "4 examples" in text
    assert "/?" not in text
    assert "left" not in text
