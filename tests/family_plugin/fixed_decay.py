# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""A third family in one file: plain linear attention with a fixed decay of 1/2.

o_t = s q_t^T S_t with S_t = S_{t-1} / 2 + k_t v_t^T (no gate input, no normalizer, no state in or
out), in the calling convention ``fn(q, k, v) -> o``. It plugs into linattn-verify as a third-party
package would: a `Family` subclass, its cases, kernels and one property, named by three entry
points (`tests/family_plugin/test_third_family.py` installs them as a distribution's metadata):

    [linattn_verify.families]              fixed_decay = "fixed_decay:FixedDecayFamily"
    [linattn_verify.properties.fixed_decay] fixed_decay = "fixed_decay:catalogue"
    [linattn_verify.kernels]               fixed_decay = "fixed_decay:kernels"
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from linattn_verify.compare import compare
from linattn_verify.core import Family
from linattn_verify.core.bound import TensorBound
from linattn_verify.core.loading import load_kernel_function
from linattn_verify.results import PropertyResult, judged_status
from linattn_verify.typing import torch_dtype

NAME = "fixed_decay"
DECAY = 0.5  # a power of two: the decay multiplies exactly


@dataclass(frozen=True)
class Problem:
    """The tensors of one call: q, k ``[B, T, H, K]``, v ``[B, T, H, V]``."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    family: ClassVar[str] = NAME

    def inputs(self) -> dict[str, torch.Tensor]:
        """The inputs by name."""
        return {"q": self.q, "k": self.k, "v": self.v}


@dataclass(frozen=True)
class Case:
    """A replayable case: its shape, dtype and seed."""

    B: int
    T: int
    H: int
    K: int
    V: int
    dtype: str
    seed: int
    family: ClassVar[str] = NAME

    def build(self) -> Problem:
        """Normal q, k, v from the seed, in the case's dtype."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = torch_dtype(self.dtype)

        def draw(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen).to(dtype)

        B, T, H = self.B, self.T, self.H
        return Problem(draw(B, T, H, self.K), draw(B, T, H, self.K), draw(B, T, H, self.V))

    def describe(self) -> str:
        """The case on one line (valid Python)."""
        return repr(self)

    def repro(self) -> str:
        """How to rebuild the inputs."""
        return f"{self!r}.build()"


@dataclass(frozen=True)
class Capabilities:
    """What a kernel of the family takes."""

    dtypes: tuple[str, ...] = ("float32",)
    backward: bool = False


@dataclass(frozen=True)
class Recipe:
    """How a kernel rounds: float32 products and sums in any order."""

    accumulation: str = "float32"


@dataclass(frozen=True)
class Kernel:
    """A kernel of the family: ``fn(q, k, v) -> o``."""

    name: str
    fn: Callable[..., torch.Tensor]
    capabilities: Capabilities = field(default_factory=Capabilities)
    recipe: Recipe = field(default_factory=Recipe)
    source: dict[str, Any] | None = None
    form: str = "recurrent"
    family: ClassVar[str] = NAME

    def precision_recipe(self, dtype: torch.dtype) -> Recipe:
        """The same recipe for every dtype."""
        del dtype
        return self.recipe

    def call(self, problem: Problem) -> torch.Tensor:
        """Run the kernel on a problem."""
        return self.fn(problem.q, problem.k, problem.v)


def _recurrence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scale = q.shape[-1] ** -0.5
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])  # [B, H, K, V]
    out = []
    for t in range(q.shape[1]):
        S = DECAY * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1) if out else v.new_zeros(v.shape)


def recurrent_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The family's kernel, in float32."""
    return _recurrence(q.float(), k.float(), v.float()).to(q.dtype)


def written_before_decay(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A broken kernel: decays the state after adding token t, so o_t sees k_t v_t^T halved."""
    scale = q.shape[-1] ** -0.5
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    out = []
    for t in range(q.shape[1]):
        S = DECAY * (S + k[:, t, :, :, None] * v[:, t, :, None, :])
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1) if out else v.new_zeros(v.shape)


def outputs_match_oracle(case: Case, kernel: Kernel) -> PropertyResult:
    """o within the float64 oracle's bound: γ_n M with n = K T + 4 (any summation order)."""
    problem = case.build()
    try:
        o = kernel.call(problem)
    except Exception as exc:  # the kernel under test may raise anything
        reason = f"{kernel.name} raised {type(exc).__name__}: {exc}"
        return PropertyResult("outputs_match_oracle", kernel.name, case.describe(), "failed",
                              reason=reason)  # fmt: skip
    wide = problem.inputs()
    reference = _recurrence(*(wide[n].double() for n in ("q", "k", "v")))
    magnitude = _recurrence(*(wide[n].double().abs() for n in ("q", "k", "v")))
    u, n = 2.0**-24, case.K * case.T + 4
    stored = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}[case.dtype]
    bound = n * u / (1 - n * u) * magnitude + stored * reference.abs()
    expected = TensorBound(
        "o", reference, bound, magnitude, torch.full_like(reference, float(n)), u,
        torch.ones_like(reference, dtype=torch.bool),
    )  # fmt: skip
    comparison = compare(o, expected, subject=kernel.name)
    return PropertyResult(
        "outputs_match_oracle", kernel.name, case.describe(), judged_status([comparison]),
        comparisons=(comparison,),
    )  # fmt: skip


def catalogue() -> dict[str, Callable[..., PropertyResult]]:
    """The family's properties (entry point ``linattn_verify.properties.fixed_decay``)."""
    return {"outputs_match_oracle": outputs_match_oracle}


def kernels() -> list[Kernel]:
    """The family's registered kernels (entry point ``linattn_verify.kernels``)."""
    return [Kernel("fixed_decay/recurrent", recurrent_kernel)]


@dataclass(frozen=True)
class Source:
    """A kernel given to ``check --family fixed_decay`` (and saved for ``replay``)."""

    target: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    recipe: Recipe = field(default_factory=Recipe)
    inferred: tuple[str, ...] = ()
    timeout: float = 60.0

    def load(self) -> Kernel:
        """Import the target."""
        return Kernel(self.target, load_kernel_function(self.target), source=self.to_json())

    def to_json(self) -> dict[str, Any]:
        """What `FixedDecayFamily.source_from_json` reads back."""
        return {"family": NAME, "target": self.target, "dtypes": list(self.capabilities.dtypes)}


class FixedDecayFamily(Family[Kernel, Case, Problem]):
    """Plain linear attention with a fixed decay of 1/2."""

    name: ClassVar[str] = NAME
    description: ClassVar[str] = "plain linear attention with a fixed decay of 1/2 (a test plug-in)"

    def case_type(self) -> type[Case]:
        """`Case`."""
        return Case

    def cases_for(
        self, kernel: Kernel, *, max_seq_len: int, max_head_dim: int, realistic: bool
    ) -> st.SearchStrategy[Case]:
        """Any shape within the limits, the kernel's dtypes."""
        del realistic
        dims = st.integers(1, max_head_dim)
        return st.builds(
            Case, B=st.integers(1, 2), T=st.integers(0, max_seq_len), H=st.integers(1, 2),
            K=dims, V=dims, dtype=st.sampled_from(kernel.capabilities.dtypes),
            seed=st.integers(0, 2**31 - 1),
        )  # fmt: skip

    def narrowed(self, kernel: Kernel, dtype: str, gates: Sequence[str]) -> Kernel | None:
        """``kernel`` in ``dtype`` (it takes no gate: any gate shape asked for is fine)."""
        del gates
        if dtype not in kernel.capabilities.dtypes:
            return None
        return replace(kernel, capabilities=replace(kernel.capabilities, dtypes=(dtype,)))

    def problem_from_tensors(self, tensors: Mapping[str, torch.Tensor], case: Case) -> Problem:
        """The saved tensors."""
        del case
        return Problem(tensors["q"], tensors["k"], tensors["v"])

    def source_from_json(self, document: Mapping[str, Any]) -> Source:
        """`Source.to_json`'s document."""
        dtypes = tuple(document.get("dtypes", ("float32",)))
        return Source(str(document["target"]), Capabilities(dtypes=dtypes))

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """None of its own: the decay is fixed."""

    def source_from_args(self, args: argparse.Namespace, *, on_cuda: bool) -> Source:
        """The target in the declared dtypes."""
        del on_cuda
        load_kernel_function(args.target)  # a target that cannot be loaded is a usage error
        return Source(args.target, Capabilities(dtypes=tuple(args.dtypes)))
