# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Run one registered kernel on one generated case through the oracle property, as a record."""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import torch

from linattn_verify.kernel import Kernel
from linattn_verify.registry import registered_properties
from linattn_verify.strategies import ProblemSpec


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


def verify_case(kernel: Kernel, spec: ProblemSpec, *, backward: bool) -> dict[str, Any]:
    """Judge ``kernel`` on ``spec`` (outputs, and gradients when ``backward``) as a JSON record.

    The judging is the catalogue's ``gradients_match_oracle`` / ``outputs_match_oracle``
    property, so `run` and the test suite score a case identically.
    """
    name = "gradients_match_oracle" if backward else "outputs_match_oracle"
    result = registered_properties()[name](spec, kernel)
    tensors: dict[str, dict[str, float]] = {}
    for key, value in result.scores.items():
        tensor, _, score = key.rpartition(".")
        if tensor:
            tensors.setdefault(tensor, {})[score] = value
    worst_tensor, worst = "", 0.0
    for tensor, by_name in tensors.items():
        tensor_worst = max(by_name.get("max_r", 0.0), by_name.get("max_eta", 0.0))
        if tensor_worst >= worst:
            worst_tensor, worst = tensor, tensor_worst
    return {
        "kernel": kernel.name,
        "dtype": spec.dtype,
        "spec": repr(spec),
        "case": result.case,
        "ok": result.ok,
        "skipped": result.skipped,
        "worst_r": worst,
        "worst_tensor": worst_tensor,
        "tensors": tensors,
        "report": None if result.ok else result.report(),
    }
