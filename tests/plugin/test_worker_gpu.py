# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One GPU per pytest-xdist worker: the selection (pure functions) and the pinning end to end."""

from __future__ import annotations

import pytest

from linattn_verify.pytest_plugin import pin_worker_gpu, visible_devices, worker_device

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("worker_id", "devices", "expected"),
    [
        ("gw0", ["0", "1"], "0"),
        ("gw1", ["0", "1"], "1"),
        ("gw2", ["0", "1"], "0"),
        ("gw5", ["4", "6", "7"], "7"),
        # One GPU or none: every worker shares what there is.
        ("gw1", ["0"], None),
        ("gw1", [], None),
        # Not a worker, or not a worker id xdist makes.
        (None, ["0", "1"], None),
        ("master", ["0", "1"], None),
    ],
)
def test_worker_device_deals_gpus_round_robin(
    worker_id: str | None, devices: list[str], expected: str | None
) -> None:
    assert worker_device(worker_id, devices) == expected


def test_visible_devices_prefers_the_environment_over_the_query() -> None:
    def never() -> list[str]:
        raise AssertionError("nvidia-smi must not be asked when CUDA_VISIBLE_DEVICES is set")

    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, 3,GPU-abc"}, never) == ["2", "3", "GPU-abc"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}, never) == []
    assert visible_devices({}, lambda: ["0", "1"]) == ["0", "1"]


def test_pin_worker_gpu_sets_one_device_for_a_worker_only() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "0,1,2"}
    assert pin_worker_gpu(env) == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"

    def never() -> list[str]:
        raise AssertionError("a process outside xdist must not query the GPUs")

    plain = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert pin_worker_gpu(plain, never) is None
    assert plain == {"CUDA_VISIBLE_DEVICES": "0,1"}
    single = {"PYTEST_XDIST_WORKER": "gw1"}
    assert pin_worker_gpu(single, lambda: ["0"]) is None
    assert "CUDA_VISIBLE_DEVICES" not in single


def test_each_xdist_worker_sees_its_own_gpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The conftest records what it sees at import: the pin must precede every conftest, which
    # is where torch (and CUDA) would first be initialised.
    pytester.makeconftest(
        """
        import os

        worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        with open(f"conftest-{worker}.txt", "w") as f:
            f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
        """
    )
    pytester.makepyfile(
        """
        import os
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_record(i):
            with open(f"test-{os.environ['PYTEST_XDIST_WORKER']}.txt", "w") as f:
                f.write(os.environ["CUDA_VISIBLE_DEVICES"])
        """
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    # When this test itself runs under xdist, the nested run must not think it is a worker.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "load")
    result.assert_outcomes(passed=4)
    seen = {p.stem: p.read_text() for p in pytester.path.glob("*-*.txt")}
    # The controller keeps both; which worker ran which test is xdist's choice.
    assert {k: v for k, v in seen.items() if k.startswith("conftest")} == {
        "conftest-controller": "5,7",
        "conftest-gw0": "5",
        "conftest-gw1": "7",
    }
    ran = {k.removeprefix("test-"): v for k, v in seen.items() if k.startswith("test-")}
    assert ran
    assert ran == {worker: seen[f"conftest-{worker}"] for worker in ran}
