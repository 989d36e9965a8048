#!/usr/bin/env bash
# The prepared GPU run, for a machine with one CUDA GPU and nothing to download from:
#   1. the CUDA benchmarks of our kernels against FLA's (benchmarks/test_*kernels.py -m gpu),
#   2. the float64 oracles' and bounds' cost on the CPU and the GPU (bound_cost.py),
#   3. our compiled Triton kernels through the whole catalogue (pytest -m gpu: tests/gpu).
# Python packages the machine lacks travel as wheels in .whl/ (the project's own wheel too:
# `python -m pip wheel --no-deps -w .whl .`), installed to a private directory. Results go to
# $OUT (default benchmarks/gpu/out): env.txt, the catalogue's verdicts per kernel, bench.json
# (pytest-benchmark; `python benchmarks/results.py --merge-json FILE` renders it).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-benchmarks/gpu/out}"
mkdir -p "$out"
export OUT="$out" PYTHONUNBUFFERED=1
wheels="${LINATTN_WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/linattn-site "$wheels"/*.whl || exit 1
    export PYTHONPATH=/tmp/linattn-site
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import sys, torch, triton; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$out/env.txt"
# Measured on one H100 (2026-11-27): a kernel's first round through the catalogue takes about
# 165 s, almost all of it Triton compiling each specialisation. The benchmarks run first (no
# lease had recorded them) and end at their --deadline by skipping what is left, so
# pytest-benchmark writes what it measured (a signal mid-benchmark makes it write nothing).
# CATALOGUE_K selects kernels of tests/gpu by pytest -k (default: all, training paths first);
# the catalogue step is stopped with SIGINT, so pytest still prints its summary.
bench="${BENCH_SECONDS:-300}"
catalogue="${CATALOGUE_SECONDS:-330}"
timeout -s INT "$((bench + 90))" python3 -m pytest benchmarks/test_kernels.py \
    benchmarks/test_delta_kernels.py -m gpu --benchmark-only --deadline "$bench" \
    --benchmark-json="$out/bench.json" -q -p no:xdist -p no:cacheprovider \
    -W ignore::UserWarning -W ignore::DeprecationWarning -W ignore::FutureWarning 2>&1 |
    tee "$out/bench.log" | tail -60
timeout "$((${BOUND_SECONDS:-50} + 30))" python3 benchmarks/gpu/bound_cost.py "$out/bound_cost.json" \
    --T 1024 4096 16384 --seconds "${BOUND_SECONDS:-50}" 2>&1 | tee "$out/bound_cost.log"
timeout -s INT "$catalogue" python3 -m pytest -m gpu tests/gpu -k "${CATALOGUE_K:-}" \
    -p no:cacheprovider -q -rA --show-capture=no -W ignore::UserWarning \
    -W ignore::DeprecationWarning -W ignore::FutureWarning 2>&1 | grep -v DEBUG |
    tee "$out/catalogue.log" | tail -40
