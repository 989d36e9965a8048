# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Let multi-config ``@triton.autotune`` kernels run under the interpreter.

Gap: `Autotuner.run` benchmarks every surviving config through ``Autotuner._bench``, which
times the launch with the GPU driver's benchmarker; under the interpreter there is no driver,
so the first launch of any kernel with two or more configs fails with "0 active drivers".

Fix: replace only ``Autotuner._bench`` with a fake timer that gives every config the same time
without launching it. `Autotuner.run` keeps doing everything else: the per-key cache (one pick
per key, dtype signature included), ``early_config_prune`` and ``perf_model`` pruning, the pick
(``min`` over equal timings keeps the first config that survives pruning, in pruning's order),
the ``reset_to_zero`` reset after the pick, and the chosen config's ``pre_hook`` before the real
launch. Replacing ``run`` instead, or pruning to one config, would skip part of that flow.

Why a deterministic pick rather than wall-clock timing: interpreter timings say nothing about a
GPU, would make the pick (and with it tile sizes and summation order) change from run to run,
breaking bit-identical reruns, and would multiply the cost of the first call by the number of
configs. Not launching the rejected configs leaves the arguments as a real benchmark does:
``reset_to_zero`` tensors end zeroed by the reset after the pick, and ``restore_value`` tensors
end restored. Configs other than the first are never executed on a CPU; verify them on a GPU.

Versions: ``Autotuner._bench`` has the same signature and conflict check in triton 3.7, 3.8 and
3.9. ``run`` differs around it without changing the pick: from 3.8 it skips ``_bench`` when
pruning leaves one config (3.7 times that one config too, with the same result here).
"""

from __future__ import annotations

from typing import Any

from linattn_verify.interpreter._guard import Restorer, check

NAME = "autotune"
VERSIONS = ((3, 7), (3, 10))
"""The Triton versions this patch was written for: >=3.7, <3.10."""
REQUIRES = ("triton.runtime.autotuner.Autotuner._bench", "triton.runtime.autotuner.Autotuner.run")
"""The internals it replaces (``_bench``) or relies on calling it (``run``)."""

FAKE_TIMING = (0.0, 0.0, 0.0)
"""What every config "measures": equal, so the pick is the first surviving config."""


def _fake_bench(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
    """Stand in for ``Autotuner._bench``: validate like it, launch nothing, time every config 0."""
    del self, args
    # The real method rejects meta-parameters given both by the caller and by a config before it
    # launches anything; keep that error, it is a bug in the caller on a GPU too.
    conflicts = meta.keys() & config.kwargs.keys()
    if conflicts:
        raise ValueError(
            f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you "
            "don't re-define auto-tuned symbols."
        )
    return list(FAKE_TIMING)


def apply() -> Restorer:
    """Replace ``Autotuner._bench`` with the fake timer."""
    check(NAME, VERSIONS, REQUIRES)
    from triton.runtime.autotuner import Autotuner

    restorer = Restorer()
    restorer.set(Autotuner, "_bench", _fake_bench)
    return restorer
