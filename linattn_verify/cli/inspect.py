# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``linattn-verify replay FILE`` and ``linattn-verify list``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from linattn_verify.cli._args import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def replay_command(path: Path, *, manifests: Sequence[Path] = ()) -> int:
    """``linattn-verify replay FILE [--manifest M ...]``."""
    from linattn_verify.cli.manifest import manifest_kernels
    from linattn_verify.core.family import family_of
    from linattn_verify.errors import InvalidArgument
    from linattn_verify.failures import load_failure, replay
    from linattn_verify.registry import registered_kernels
    from linattn_verify.running import select_kernels

    try:
        kernels = registered_kernels()
        saved = load_failure(path)
        if saved.kernel.startswith("fla/"):
            # FLA's kernels are not registered (importing FLA costs seconds): as `run` does.
            kernels.update({k.name: k for k in select_kernels(["fla/*"])})
        # A manifest's kernel by its name, in this machine's checkout: the saved source names a
        # file by the path it had where the failure was found.
        kernels.update({k.name: k for k in manifest_kernels(manifests)})
        source = saved.kernel_source or {}
        location = str(source.get("target", "")).rpartition(":")[0]
        missing = location.endswith(".py") and not Path(location).is_file()
        if saved.kernel not in kernels and missing:
            raise InvalidArgument(
                f"Got a failure of kernel {saved.kernel!r}, saved as loaded from {location}, but "
                "there is no such file here (it was found on another machine, or moved): give "
                "the manifest that declares the kernel with --manifest FILE."
            )
        properties = family_of(saved.spec).properties()
        result = replay(path, properties=properties, kernels=kernels)
    except (InvalidArgument, FileNotFoundError, ValueError) as exc:
        print(f"linattn-verify replay: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(result.report())
    if result.ok:
        print(f"\nDoes not reproduce: {result.property} now holds for {result.kernel}.")
        return EXIT_OK
    print(f"\nReproduces: {result.property} still fails for {result.kernel}.")
    return EXIT_FAILED


def list_kernels() -> int:
    """``linattn-verify list``."""
    from linattn_verify.core.family import families
    from linattn_verify.running import select_kernels
    from linattn_verify.typing import torch_dtype

    print("families:")
    for family in families().values():
        print(f"  {family.name}: {family.description} ({len(family.properties())} properties)")
    for kernel in select_kernels(["*"]):
        name = kernel.name
        fn = kernel.fn
        print(f"{name}: {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}")
        print(f"  family: {kernel.family}")
        print(f"  capabilities: {kernel.capabilities}")
        for dtype in kernel.capabilities.dtypes:
            print(f"  recipe {dtype:9s} {kernel.precision_recipe(torch_dtype(dtype))}")
    return EXIT_OK
