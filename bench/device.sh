#!/usr/bin/env bash
# One device call runs everything GPU-side: build (Release, make -j16), the gpu ctest label,
# compute-sanitizer memcheck + racecheck on a small cuda-flash run, bench/device_f32.sh (the f32
# CUDA backends' script) when it exists, and the PyTorch SDPA comparison (bench/torch_sdpa.py:
# every SDPA backend, every flashwatt CUDA backend and every cuda-flash configuration on the same
# tensors, same process). Short table printed last.
#
#   bash bench/device.sh            everything
#   env knobs: FW_SKIP_F32=1 (skip bench/device_f32.sh), FW_SKIP_TESTS=1 (no ctest/sanitizers),
#              FW_SWEEP=1 (also gpu_cuda_flash --bench: the configuration sweep from C, slower:
#              it draws host-side inputs per shape), FW_TORCH_ARGS (default "--configs --check"),
#              FW_CTEST_REGEX (only these gpu tests), FW_BUILD_DIR (default build), FW_SKIP_TORCH=1,
#              FW_WITH_PYTEST=1, FW_WITH_BWD=1, FW_WITH_ENERGY=1 (bench/device_bwd.sh, bench/device_energy.sh)
# Logs: $OUT/device.log (everything), $OUT/torch_sdpa.json, $OUT/logs.tar.gz (each step's log).
# $OUT returns at most 8 files, so the per-step logs travel in one archive.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out-device}
mkdir -p "$OUT"
BUILD=${FW_BUILD_DIR:-build}
export FW_BUILD_DIR=$BUILD
. bench/steps.sh "$OUT/device.log" "$OUT/logs.tar.gz"

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv | tee "$LOGS/nvidia-smi.txt"
nvcc --version | tail -2

build_step "$BUILD"

if [ "${FW_SKIP_TESTS:-0}" != 1 ]; then
    step "ctest -L gpu"
    (cd "$BUILD" && ctest -L gpu -R "${FW_CTEST_REGEX:-.}" -V --timeout ${FW_CTEST_TIMEOUT:-240}) > "$LOGS/ctest_gpu.log" 2>&1 || status=1
    grep -E "FAIL|tests passed|tests failed|passed, [0-9]+ failed|Test +#" "$LOGS/ctest_gpu.log" | tail -40

    step "compute-sanitizer (gpu_cuda_flash --quick)"
    for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/gpu_cuda_flash" --quick > "$LOGS/sanitizer_$tool.log" 2>&1
        rc=$?
        echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, [0-9]+ failed' "$LOGS/sanitizer_$tool.log" | tr '\n' ' ')"
        [ $rc = 0 ] || status=1
    done
fi

if [ -f bench/device_f32.sh ] && [ "${FW_SKIP_F32:-0}" != 1 ]; then
    step "bench/device_f32.sh"
    # its logs go into logs.tar.gz (f32/): $OUT brings back at most 8 files
    mkdir -p "$LOGS/f32"
    OUT="$LOGS/f32" FW_BUILD_DIR="$BUILD" bash bench/device_f32.sh || status=1
fi

if [ "${FW_SWEEP:-0}" = 1 ]; then
    step "cuda-flash configuration sweep (FA grid, bf16)"
    "$BUILD/gpu_cuda_flash" --bench 20 > "$LOGS/sweep.log" 2>&1 || status=1
    cat "$LOGS/sweep.log"
fi

if [ "${FW_WITH_PYTEST:-0}" = 1 ]; then
    step "pytest python/tests (NumPy and torch CUDA paths)"
    FLASHWATT_LIBRARY="$ROOT/$BUILD/libflashwatt.so" timeout 240 python3 -m pytest -q python/tests > "$LOGS/pytest.log" 2>&1 || status=1
    tail -5 "$LOGS/pytest.log"
    step "python/examples/gpt_block.py"
    PYTHONPATH="$ROOT/python" FLASHWATT_LIBRARY="$ROOT/$BUILD/libflashwatt.so" timeout 120 python3 python/examples/gpt_block.py > "$LOGS/gpt_block.log" 2>&1 || status=1
    tail -25 "$LOGS/gpt_block.log"
fi

if [ "${FW_WITH_BWD:-0}" = 1 ]; then
    step "bench/device_bwd.sh"
    FW_BUILD_DIR="$BUILD" bash bench/device_bwd.sh || status=1
fi

if [ "${FW_WITH_ENERGY:-0}" = 1 ]; then
    step "bench/device_energy.sh"
    FW_BUILD_DIR="$BUILD" bash bench/device_energy.sh || status=1
fi

if [ "${FW_SKIP_TORCH:-0}" != 1 ]; then
step "PyTorch SDPA vs flashwatt (bench/torch_sdpa.py)"
PYTHONUNBUFFERED=1 FLASHWATT_LIBRARY="$ROOT/$BUILD/libflashwatt.so" \
    python3 bench/torch_sdpa.py --json "$OUT/torch_sdpa.json" ${FW_TORCH_ARGS:---configs --check} > "$LOGS/torch_sdpa.log" 2>&1 || status=1
cat "$LOGS/torch_sdpa.log"   # ends with its short summary table
fi
echo "device.sh: exit $status"
