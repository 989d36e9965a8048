# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One judge of reruns, for every family: bit for bit where promised, else within B + B.

Also the cotangents real losses hand a backward (`COTANGENTS`) and their judging
(`judge_cotangent_layouts`), shared by both families' ``backward_takes_any_cotangent``.

A contract property runs a kernel again on the same values (a rerun, another memory layout,
NaN-poisoned allocations, another cotangent layout) and asks whether it got the same tensors.
`RunJudge` does that for a kernel of any family: the family supplies how to run it, its bounds
and the elements whose value is undefined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from linattn_properties._support import KernelFailure
from linattn_verify.compare import Comparison, Side, compare_bitwise, compare_pair
from linattn_verify.core.bound import TensorBound
from linattn_verify.core.memory import Layout, expanded, last_dim_strided, sliced, transposed

LAYOUT_PROMISE = ("deterministic", "layout_exact")
"""The promises under which another memory layout must give bit-identical results."""


class RunJudge:
    """Compares runs with a reference run: bit for bit where promised, else within B + B.

    Collects the comparisons, the findings (a failed run, a missing tensor), whether every run
    was bit-identical to the reference, and the flags of the promises that would have been
    broken by runs whose bits differed within the bound (``loose``).

    Args:
        subject: The kernel's name, for the messages.
        capabilities: Its declared capabilities (the promises ``run`` names are read there).
        reference: The reference run's tensors by name (``o``, ``final_state``, ``dq``, ...).
        run: ``(problem, **options) -> tensors by name`` of one run; raises `KernelFailure`.
        bounds: The bound of each tensor of the reference's problem and cotangents (asked for
            only when bits differ).
        undefined: The elements whose value the kernel may choose, by tensor (not compared).
    """

    def __init__(
        self,
        subject: str,
        capabilities: Any,
        reference: Mapping[str, torch.Tensor],
        *,
        run: Callable[..., Mapping[str, torch.Tensor]],
        bounds: Callable[[], Mapping[str, TensorBound]],
        undefined: Callable[[], Mapping[str, torch.Tensor]] = dict,
    ) -> None:
        self.subject, self.capabilities, self.reference = subject, capabilities, reference
        self._run, self._bounds_of, self._undefined_of = run, bounds, undefined
        self._bounds: Mapping[str, TensorBound] | None = None
        self._undefined: Mapping[str, torch.Tensor] | None = None
        self.bit_identical = True
        self.comparisons: list[Comparison] = []
        self.findings: list[str] = []
        self.notes: list[str] = []
        self.loose: list[str] = []

    def run(
        self,
        problem: Any,
        condition: str,
        *,
        promised: tuple[str, ...] = ("deterministic",),
        during: Callable[[], AbstractContextManager[Any]] = nullcontext,
        **options: Any,
    ) -> None:
        """Run the kernel on ``problem`` (inside ``during()``) and judge the run.

        ``condition`` says what changed, for the messages; ``promised`` names the capabilities
        under which this run must be bit-identical to the reference (all of them declared:
        bitwise; else within B + B); ``options`` go to the family's runner.
        """
        exact = all(getattr(self.capabilities, name) for name in promised)
        try:
            with during():
                tensors = self._run(problem, **options)
        except KernelFailure as exc:
            self.findings.append(f"run {condition}: {exc}")
            return
        for name, expected in self.reference.items():
            actual = tensors.get(name)
            if actual is None:
                self.findings.append(f"{name} missing from the run {condition}")
                continue
            bitwise = compare_bitwise(
                name,
                actual,
                expected,
                subject=self.subject,
                condition=condition,
                undefined=self.undefined().get(name),
            )
            self.bit_identical &= bitwise.ok
            bound = None if bitwise.ok or exact else self._bound(name)
            if bound is None:
                if not (bitwise.ok or exact):
                    self.notes.append(f"{name}: no error bound, judged bit for bit")
                self.comparisons.append(bitwise)
                continue
            for promise in promised:
                flag = f"--{promise.replace('_', '-')}"
                if not getattr(self.capabilities, promise) and flag not in self.loose:
                    self.loose.append(flag)
            # Two runs of one problem, each within its bound B of the exact value.
            self.comparisons.append(
                compare_pair(
                    name,
                    Side.of(f"{self.subject} {condition}", actual, bound),
                    Side.of("the reference run", expected, bound),
                    bound.reference,
                )
            )

    def absorb(self, other: RunJudge) -> None:
        """Take in another judge's comparisons, findings, notes and loose promises."""
        self.bit_identical &= other.bit_identical
        self.comparisons += other.comparisons
        self.findings += other.findings
        self.notes += other.notes
        self.loose += [flag for flag in other.loose if flag not in self.loose]

    def undefined(self) -> Mapping[str, torch.Tensor]:
        """The elements the kernel may return as it likes (asked for once)."""
        if self._undefined is None:
            self._undefined = self._undefined_of()
        return self._undefined

    def _bound(self, name: str) -> TensorBound | None:
        if self._bounds is None:
            self._bounds = self._bounds_of()
        return self._bounds.get(name)


LAYOUTS: tuple[tuple[Layout, str], ...] = (
    (transposed, "with transposed-stride inputs"),
    (sliced, "with inputs sliced from larger tensors"),
    (last_dim_strided, "with the inputs' last dim strided"),
)
"""The input layouts ``contract_holds`` (both families) runs: the same values, other strides."""


def judge_input_layouts(
    judge: RunJudge,
    problem: Any,
    *,
    relayout: Callable[[Any, Layout], Any],
    expand_heads: Callable[[Any], Any | None],
    dense: Callable[[Any], Any],
    judge_of: Callable[[Any, Any], RunJudge],
) -> None:
    """Judge ``problem`` in every `LAYOUTS` layout, and with one head expanded over the others.

    The layouts against ``judge``'s reference; the expanded problem (``expand_heads``, `None`
    with one head) against its own ``dense`` contiguous run, forward only. Everything goes into
    ``judge``.

    Args:
        judge: The judge of ``problem``'s runs.
        problem: The problem (contiguous inputs).
        relayout: ``(problem, layout) -> problem``: the family's problem with its inputs laid
            out.
        expand_heads: The family's problem with head 0's inputs expanded, or `None`.
        dense: ``problem -> run`` of the family's runner, forward.
        judge_of: ``(problem, run) -> RunJudge`` of the family, against that run.
    """
    for how, condition in LAYOUTS:
        judge.run(relayout(problem, how), condition, promised=LAYOUT_PROMISE)
    shared = expand_heads(problem)
    if shared is None:
        return
    try:
        reference = dense(relayout(shared, lambda x: x.contiguous()))
    except KernelFailure as exc:
        judge.findings.append(f"run with one head's inputs copied to every head: {exc}")
        return
    heads = judge_of(shared, reference)
    heads.run(shared, "with one head's inputs expanded (stride 0)", promised=LAYOUT_PROMISE)
    judge.absorb(heads)


COTANGENTS: tuple[tuple[float | None, Layout, str], ...] = (
    (1.0, expanded, "the cotangent o.sum() gives (ones, every stride 0)"),
    (None, transposed, "a transposed-stride cotangent"),
    (0.0, expanded, "a zero cotangent (every stride 0)"),
)
"""The cotangents ``backward_takes_any_cotangent`` (both families) hands the backward: a
constant (`None`: the case's random cotangents) and how it is laid out."""


def constant_cotangents(
    cotangents: tuple[torch.Tensor, Any], value: float
) -> tuple[torch.Tensor, Any]:
    """``cotangents`` (do and the final state's, a tensor or a pair) filled with ``value``."""
    do, d_final = cotangents
    if isinstance(d_final, tuple):
        return torch.full_like(do, value), tuple(torch.full_like(d, value) for d in d_final)
    return torch.full_like(do, value), None if d_final is None else torch.full_like(d_final, value)


def judge_cotangent_layouts(
    problem: Any,
    drawn: tuple[torch.Tensor, Any],
    *,
    dense: Callable[[tuple[torch.Tensor, Any]], Any],
    judge: Callable[[Any, tuple[torch.Tensor, Any]], RunJudge],
) -> RunJudge:
    """Run each of `COTANGENTS` dense and laid out; one judge of all three comparisons.

    Args:
        problem: The problem (contiguous inputs).
        drawn: The case's random cotangents (do and the final state's).
        dense: ``cotangents -> run``: the family's backward run on dense cotangents (a
            `KernelFailure` it raises fails the property as it is).
        judge: ``(run, cotangents) -> RunJudge`` of the family, against that run.
    """
    judges = []
    for value, layout, condition in COTANGENTS:
        cotangents = drawn if value is None else constant_cotangents(drawn, value)
        one = judge(dense(cotangents), cotangents)
        one.run(
            problem,
            f"with {condition}",
            promised=LAYOUT_PROMISE,
            cotangents=cotangents,
            cotangent_layout=layout,
        )
        judges.append(one)
    first, *rest = judges
    for other in rest:
        first.absorb(other)
    return first


__all__ = [
    "COTANGENTS",
    "LAYOUTS",
    "LAYOUT_PROMISE",
    "RunJudge",
    "constant_cotangents",
    "judge_cotangent_layouts",
    "judge_input_layouts",
]
