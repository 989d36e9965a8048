# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run one built-in kernel on one generated case and score it against the oracle."""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import torch

from linattn_verify.compare import Verdict, check_against_oracle
from linattn_verify.recipe import PrecisionRecipe
from linattn_verify.strategies import ProblemSpec, random_cotangents
from linattn_verify.tolerance import cotangent_loss


def environment() -> dict[str, str]:
    """Describe where the run happens: device, Triton mode, versions."""
    import linattn_kernels

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {
        "device": device,
        "triton_mode": "interpreter" if linattn_kernels.INTERPRETING else "compiled",
        "torch": torch.__version__,
        "triton": version("triton"),
        "linattn_verify": version("linattn-verify"),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }


def run_builtin(form: str, spec: ProblemSpec, *, backward: bool) -> Verdict:
    """Run ``triton/<form>`` on the case ``spec`` and compare everything with the oracle."""
    from linattn_kernels.linear_attn import FORMS, precision_recipes

    problem = spec.build()
    recipe = PrecisionRecipe.from_dict(precision_recipes[form](problem.q.dtype))
    kernel = FORMS[form]
    p, leaves = problem.with_grad_leaves() if backward else (problem, {})
    initial: Any = p.initial_state
    if p.normalize and p.initial_state is not None:
        initial = (p.initial_state, p.initial_key_sum)
    with torch.set_grad_enabled(backward):
        o, final = kernel(
            p.q,
            p.k,
            p.v,
            p.g,
            scale=p.scale,
            normalize=p.normalize,
            eps=p.eps,
            feature_map=p.feature_map,
            initial_state=initial,
            output_final_state=p.output_final_state or backward,
            cu_seqlens=p.cu_seqlens,
        )
    grads = do = d_final = None
    if backward:
        do, d_final = random_cotangents(problem, spec.seed + 1)
        loss = cotangent_loss(o, final, do, d_final)
        values = torch.autograd.grad(loss, list(leaves.values()))
        grads = dict(zip(leaves, values, strict=True))
    if not problem.output_final_state:
        final = None
    return check_against_oracle(
        problem,
        _detach(o),
        _detach(final),
        recipe=recipe,
        grads=grads,
        do=do,
        d_final_state=d_final,
        name=f"triton/{form}",
    )


def _detach(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(t.detach() for t in x)
    return None if x is None else x.detach()


def verify_case(form: str, spec: ProblemSpec, *, backward: bool) -> dict[str, Any]:
    """Run one case and return its JSON record (scores per tensor, the verdict, the case)."""
    verdict = run_builtin(form, spec, backward=backward)
    worst = verdict.worst
    return {
        "form": form,
        "dtype": spec.dtype,
        "spec": repr(spec),
        "case": verdict.case,
        "ok": verdict.ok,
        "worst_r": 0.0 if worst is None else max(worst.max_r, worst.max_eta or 0.0),
        "worst_tensor": "" if worst is None else worst.name,
        "tensors": {
            c.name: {
                "ok": c.ok,
                "max_r": c.max_r,
                "max_eta": c.max_eta,
                "max_rho": c.max_rho,
                "median_rho": c.median_rho,
                "unverifiable": c.unverifiable,
            }
            for c in verdict.comparisons
        },
        "contract_errors": list(verdict.contract_errors),
        "report": None if verdict.ok else verdict.report(),
    }
