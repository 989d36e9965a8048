# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One probe of where the harness runs: package versions, the device, the Triton mode.

`package_version` imports nothing; `environment` imports torch and the kernels (call it only
where a kernel will run anyway), so the pytest plugin can use the first without loading torch.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from importlib import metadata


@cache
def package_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``"not installed"``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """Python and the versions that decide a result: this package, torch, triton, hypothesis."""
    found = {"python": platform.python_version()}
    for name in ("linattn-verify", "torch", "triton", "hypothesis"):
        found[name] = package_version(name)
    return found


def environment() -> dict[str, str]:
    """Describe where kernels run: device, Triton mode, versions."""
    import linattn_kernels
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {
        "device": device,
        "triton_mode": "interpreter" if linattn_kernels.INTERPRETING else "compiled",
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "linattn_verify": package_version("linattn-verify"),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }


__all__ = ["environment", "package_version", "versions"]
