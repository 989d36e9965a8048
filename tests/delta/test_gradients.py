# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The float64 reference forms are differentiable: gradcheck in every input."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from linattn_verify.delta import delta_chunked, delta_recurrent

NAMES = ("q", "k", "v", "beta", "g", "initial_state")


def tiny(problem_factory, gate, l2norm):
    problem = problem_factory(gate=gate, l2norm=l2norm, B=1, T=5, H=1, K=3, V=2, seed=37)
    # Keep beta and g away from the domain's edges so the finite differences stay inside it.
    beta = 0.2 + 0.6 * problem.beta
    g = None if problem.g is None else problem.g - 0.1
    return dataclasses.replace(problem, beta=beta, g=g)


@pytest.mark.parametrize("l2norm", [False, True], ids=["raw", "l2norm"])
@pytest.mark.parametrize("gate", ["scalar", "vector"])
@pytest.mark.parametrize(
    "form", [delta_recurrent, lambda p: delta_chunked(p, chunk_size=2)], ids=["recurrent", "chunk2"]
)
def test_gradcheck(problem_factory, form, gate, l2norm):
    problem = tiny(problem_factory, gate, l2norm)
    leaves = tuple(getattr(problem, n).detach().clone().requires_grad_(True) for n in NAMES)

    def run(*tensors):
        p = dataclasses.replace(problem, **dict(zip(NAMES, tensors, strict=True)))
        o, S = form(p)
        return o, S

    assert torch.autograd.gradcheck(run, leaves)


def test_gradients_reach_every_input(problem_factory):
    problem = tiny(problem_factory, "vector", False)
    leaves = {n: getattr(problem, n).detach().clone().requires_grad_(True) for n in NAMES}
    o, S = delta_recurrent(dataclasses.replace(problem, **leaves))
    (o.square().sum() + S.square().sum()).backward()
    for name, leaf in leaves.items():
        assert leaf.grad is not None, name
        assert bool(leaf.grad.abs().sum() > 0), name
