# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One progress display for every long command (``run``, ``check``, ``drift``, ``soak``).

A bar with the count done of the total, the failures so far, the time spent and the time left
(rich's progress display, on stderr, so stdout stays clean for ``--json`` and pipes). Per-item
lines are printed only when asked for (``-v``): by default a command shows one bar, not a wall
of text. On a stream that is not a terminal (CI logs, a captured pipe) the bar is drawn once,
when it finishes, instead of being redrawn.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

from linattn_verify.errors import InvalidArgument


class Progress:
    """A progress bar with counts, failures so far and time left; a context manager.

    Args:
        label: What is being counted down, e.g. ``"run"``.
        total: How many items there are, or `None` when unknown (a budget in seconds instead:
            the bar then shows the time spent against ``budget``).
        verbose: Print each item's line (``advance(line=...)``) above the bar. Default: `False`.
        stream: Where to draw. Default: `None` (stderr).
        unit: What an item is called. Default: ``"cases"``.
        budget: Seconds the command may take, for a bar that counts time. Default: `None`.
        left: The seconds left, when the command knows better than a rate over recent items
            (``run``: `linattn_verify.run_clock.GroupClock`), or `None` while unknown.
            Default: `None`: rich's estimate from the recent rate.

    Raises:
        InvalidArgument: naming the malformed argument.
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        verbose: bool = False,
        stream: IO[str] | None = None,
        unit: str = "cases",
        budget: float | None = None,
        left: Callable[[], float | None] | None = None,
    ) -> None:
        if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
            raise InvalidArgument(f"Expected an int >= 0 or None but got total={total!r}.")
        if total is not None and total < 0:
            raise InvalidArgument(f"Expected an int >= 0 or None but got total={total!r}.")
        if left is not None and not callable(left):
            raise InvalidArgument(f"Expected a callable or None but got left={left!r}.")
        if budget is not None and not budget > 0:
            raise InvalidArgument(f"Expected seconds > 0 or None but got budget={budget!r}.")
        from rich.console import Console

        self.label = label
        self.total = total
        self.verbose = bool(verbose)
        self.unit = unit
        self.budget = budget
        self.left = left
        self.done = 0
        self.failed = 0
        self.console = Console(file=stream if stream is not None else sys.stderr)
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        counted = self.budget is None
        # Done of a total ("3/10 cases"); against a budget, or with no total, a count.
        of_total = counted and self.total is not None
        columns: list[Any] = [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn() if of_total else TextColumn("{task.fields[count]}"),
            TextColumn(self.unit if of_total else ""),
            TextColumn("{task.fields[failures]}"),
            TimeElapsedColumn(),
        ]
        if of_total or not counted:
            # Time left is known from a total or a budget; an open-ended count has none.
            left = _Left(self.left) if self.left is not None else TimeRemainingColumn()
            columns += [TextColumn("left"), left]
        self._bar = RichProgress(*columns, console=self.console, transient=False)
        self._bar.start()
        total = self.budget if not counted else self.total
        self._task = self._bar.add_task(
            self.label, total=total, failures=self._failures(), count=self._count()
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._tick()
            self._bar.stop()
            self._bar = None

    def _failures(self) -> str:
        if not self.failed:
            return "no failures"
        return f"[red]{self.failed} failed[/red]"

    def _count(self) -> str:
        return f"{self.done} {self.unit}"

    def _tick(self) -> None:
        if self._bar is None:
            return
        completed = (
            min(time.monotonic() - self._started, self.budget)
            if self.budget is not None
            else self.done
        )
        self._bar.update(
            self._task, completed=completed, failures=self._failures(), count=self._count()
        )

    def advance(self, n: int = 1, *, failed: int | bool = 0, line: str | None = None) -> None:
        """Count ``n`` items done, ``failed`` of them failed; print ``line`` when verbose.

        Work past a planned total (``run``'s side-by-side cases) grows the total with it, so
        the bar never shows more done than there is.
        """
        self.done += n
        if self.total is not None and self.done > self.total:
            self.grow(self.done - self.total)
        self.failed += int(failed)
        if line is not None and self.verbose:
            self.print(line)
        self._tick()

    def grow(self, n: int) -> None:
        """Add ``n`` items to the total (work found along the way)."""
        if self.total is not None:
            self.total += n
            if self._bar is not None and self.budget is None:
                self._bar.update(self._task, total=self.total)

    def settle(self) -> None:
        """Make the total what was done: the plan was an estimate (cases a draw did not make).

        A bar that counts items then ends full; a bar that counts time is left as it is.
        """
        if self.total is not None and self.budget is None:
            self.total = self.done
            if self._bar is not None:
                self._bar.update(self._task, total=self.total)
        self._tick()

    def print(self, text: str) -> None:
        """Print ``text`` above the bar (as it is: no markup is interpreted)."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _Left(estimate: Callable[[], float | None]) -> Any:
    """A rich column showing ``estimate()`` seconds as H:MM:SS (``-:--:--`` while unknown)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Left(ProgressColumn):
        def render(self, task: Any) -> Text:
            seconds = estimate()
            if seconds is None:
                return Text("-:--:--", style="progress.remaining")
            whole = round(max(seconds, 0.0))
            hms = f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
            return Text(hms, style="progress.remaining")

    return Left()


__all__ = ["Progress"]
