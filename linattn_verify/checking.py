# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Check a third-party kernel: load it, describe it, search the property catalogue within a budget.

`load_target` turns ``package.module:function`` or ``path/to/file.py:function`` into a callable;
`check_kernel` runs every per-kernel property the declared capabilities allow under Hypothesis
(shrinking failures to a minimal case, saved for ``linattn-verify replay``), splitting a
wall-clock budget between them. A kernel that raises, returns the wrong thing, returns NaN or
hangs past the per-call timeout fails a property; it never crashes the check.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from linattn_verify.errors import InvalidArgument, PropertyViolation
from linattn_verify.kernel import Kernel


class KernelTimeout(RuntimeError):
    """A kernel call ran past the per-call timeout."""


def load_target(target: str) -> Callable[..., Any]:
    """Import ``package.module:function`` or ``path/to/file.py:function`` and return the function.

    Raises:
        InvalidArgument: naming the target and what went wrong (bad form, missing file or
            module, missing or non-callable attribute, an exception while importing).
    """
    if not isinstance(target, str) or target.count(":") != 1 or target.endswith(":"):
        raise InvalidArgument(
            f"Got TARGET={target!r}, but it must be 'package.module:function' or "
            "'path/to/file.py:function'."
        )
    where, name = target.split(":")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise InvalidArgument(f"Got TARGET={target!r}, but {path} is not a file.")
            spec = importlib.util.spec_from_file_location(f"_linattn_target_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise InvalidArgument(f"Got TARGET={target!r}, but {path} cannot be imported.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except InvalidArgument:
        raise
    except Exception as exc:
        raise InvalidArgument(
            f"Got TARGET={target!r}, but importing {where} raised {type(exc).__name__}: {exc}"
        ) from None
    fn = module
    for part in name.split("."):
        if not hasattr(fn, part):
            raise InvalidArgument(f"Got TARGET={target!r}, but {where} has no attribute {name!r}.")
        fn = getattr(fn, part)
    if not callable(fn):
        raise InvalidArgument(f"Got TARGET={target!r}, but {name} is not callable.")
    return fn


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise `KernelTimeout` in this (main) thread after ``seconds``; a no-op elsewhere."""
    usable = hasattr(signal, "setitimer") and _in_main_thread() and seconds > 0

    def on_alarm(signum: int, frame: Any) -> None:
        raise KernelTimeout(f"the kernel call ran past the per-call timeout of {seconds:g} s")

    if not usable:
        yield
        return
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def with_timeout(kernel: Kernel, seconds: float) -> Kernel:
    """Return ``kernel`` whose calls raise `KernelTimeout` after ``seconds`` (main thread, Unix).

    Triton's interpreter runs kernels as Python, so the alarm interrupts a hung kernel there; a
    compiled GPU kernel that hangs inside the driver would need a subprocess instead.
    """
    fn = kernel.fn

    def timed(*args: Any, **kwargs: Any) -> Any:
        with _alarm(seconds):
            return fn(*args, **kwargs)

    return replace(kernel, fn=timed)


@dataclass
class PropertyOutcome:
    """What the search found for one property."""

    property: str
    ok: bool
    examples: int
    seconds: float
    message: str = ""
    failure_file: str | None = None
    first_failure_seconds: float | None = None
    skipped: int = 0


@dataclass
class CheckReport:
    """The outcome of `check_kernel`."""

    kernel: str
    outcomes: list[PropertyOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every property held on every example tried."""
        return all(o.ok for o in self.outcomes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kernel": self.kernel,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "properties": [o.__dict__ for o in self.outcomes],
        }


def check_kernel(
    kernel: Kernel,
    properties: Mapping[str, Callable[..., Any]],
    *,
    budget: float,
    seed: int = 0,
    max_seq_len: int = 32,
    max_head_dim: int = 16,
    failures_dir: Path,
    progress: Callable[[str], None] = lambda line: None,
) -> CheckReport:
    """Search every property for a counterexample, splitting ``budget`` seconds between them.

    Each property runs in rounds of Hypothesis searches (seeded from ``seed`` and the round) until
    its share of the budget is spent or a failure is found; a failure is shrunk to a minimal case
    and saved in ``failures_dir``.
    """
    from linattn_verify.strategies import kernel_specs

    if budget <= 0 or not math.isfinite(budget):
        raise InvalidArgument(f"Got budget={budget!r}, but the budget must be a positive number.")
    report = CheckReport(kernel=kernel.name)
    started = time.perf_counter()
    names = list(properties)
    for index, name in enumerate(names):
        share = (budget - (time.perf_counter() - started)) / (len(names) - index)
        prop_started = time.perf_counter()
        outcome = PropertyOutcome(property=name, ok=True, examples=0, seconds=0.0)
        strategy = kernel_specs(kernel, max_seq_len=max_seq_len, max_head_dim=max_head_dim)
        round_ = 0
        while outcome.ok and (round_ == 0 or time.perf_counter() - prop_started < share):
            _search_round(
                properties[name],
                kernel,
                strategy,
                seed * 1000 + round_,
                5 * (round_ + 1),
                outcome,
                failures_dir,
                started,
            )
            round_ += 1
        outcome.seconds = round(time.perf_counter() - prop_started, 3)
        report.outcomes.append(outcome)
        status = (
            "FAILED" if not outcome.ok else "n/a" if outcome.skipped == outcome.examples else "held"
        )
        progress(
            f"  {name:32s} {status:6s} {outcome.examples:4d} examples {outcome.seconds:6.1f} s"
        )
    report.seconds = time.perf_counter() - started
    return report


def _search_round(
    prop: Callable[..., Any],
    kernel: Kernel,
    strategy: Any,
    seed: int,
    examples: int,
    outcome: PropertyOutcome,
    failures_dir: Path,
    started: float,
) -> None:
    """One Hypothesis search of ``examples`` cases; records a (shrunk) failure in ``outcome``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from linattn_verify.failures import check as run_check

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(spec=strategy)
    def search(spec: Any) -> None:
        outcome.examples += 1
        result = run_check(prop, spec, kernel, directory=failures_dir)
        outcome.skipped += int(result.skipped is not None)

    try:
        search()
    except PropertyViolation as exc:
        outcome.ok = False
        outcome.first_failure_seconds = round(time.perf_counter() - started, 3)
        outcome.message = str(exc)
        tail = str(exc).rsplit("Replay: linattn-verify replay ", 1)
        outcome.failure_file = tail[1].strip() if len(tail) == 2 else None


__all__ = [
    "CheckReport",
    "KernelTimeout",
    "PropertyOutcome",
    "check_kernel",
    "load_target",
    "with_timeout",
]
