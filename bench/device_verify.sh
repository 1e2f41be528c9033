#!/usr/bin/env bash
# One device call that re-proves the tree after CPU-side changes and fills the gaps of earlier runs:
#   build; ctest -L gpu without gpu_backward; gpu_backward with every tensor-core variant swept
#   (FW_BWD_TC_SWEEP=1); compute-sanitizer on the backward (default variants and the wgmma ones); gpu_backward --bench (every variant's
#   timing); naive vs flash peak device memory at L = 16k (FW_VERIFY_SKIP_PEAK=1 skips it); the extended energy table last
#   (FW_ENERGY_PART=ext, ~4 min; FW_VERIFY_SKIP_ENERGY=1 skips it).
# About 8 minutes on one H100/H200. Logs: $OUT/verify.log (short results), $OUT/verify_logs.tar.gz,
# $OUT/peak_mem.json, and $OUT/energy/ from bench/device_energy.sh.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out-device}
mkdir -p "$OUT"
BUILD=${FW_BUILD_DIR:-build}
. bench/steps.sh "$OUT/verify.log" "$OUT/verify_logs.tar.gz"

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$LOGS/nvidia-smi.txt"
echo "tree: src sha1 $(find src include -type f | sort | xargs cat | sha1sum | cut -c1-12) (the device copy's .git can be stale)"

build_step "$BUILD"

step "ctest -L gpu (all but gpu_backward, which runs swept below)"
(cd "$BUILD" && ctest -L gpu -E gpu_backward --timeout 240 -V) > "$LOGS/ctest_gpu.log" 2>&1 || status=1
grep -E "tests passed|tests failed|passed, [0-9]+ failed|Test +#|^FAIL" "$LOGS/ctest_gpu.log" | tail -20

step "gpu_backward, every tensor-core variant (FW_BWD_TC_SWEEP=1)"
FW_BWD_TC_SWEEP=1 timeout 300 "$BUILD/gpu_backward" > "$LOGS/gpu_backward_sweep.log" 2>&1
rc=$?; [ $rc = 0 ] || status=1
grep -E "^FAIL" "$LOGS/gpu_backward_sweep.log" | head -20
tail -1 "$LOGS/gpu_backward_sweep.log"; echo "gpu_backward sweep: exit $rc"

step "compute-sanitizer (gpu_backward --quick; default variants, then the wgmma ones)"
for var in "" 5 6 7 8 9 10; do
    for tool in memcheck racecheck; do
        FW_CUDA_BWD_TC_VARIANT=$var timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/gpu_backward" --quick > "$LOGS/bwd_sanitizer_$tool$var.log" 2>&1
        rc=$?; [ $rc = 0 ] || status=1
        echo "variant ${var:-default} $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, [0-9]+ failed' "$LOGS/bwd_sanitizer_$tool$var.log" | tr '\n' ' ')"
    done
done

step "gpu_backward --bench 5 (bf16; every variant)"
FW_BWD_BENCH_MINL=1024 timeout 200 "$BUILD/gpu_backward" --bench 5 > "$LOGS/bwd_bench.log" 2>&1 || status=1
cat "$LOGS/bwd_bench.log" | tail -30

[ "${FW_VERIFY_SKIP_PEAK:-0}" = 1 ] || step "peak device memory, cuda-naive vs cuda-flash, L = 16k"
[ "${FW_VERIFY_SKIP_PEAK:-0}" = 1 ] || for L in 4096 16384; do
    timeout 120 "$BUILD/flashwatt" bench --device cuda --backend cuda-naive,cuda-flash --batch 1 --heads 16 \
        --seqlen $L --head-dim 128 --dtype bf16 --energy 0 --warmup 2 --reps 5 --max-ref-s 0 \
        --json "$LOGS/peak_mem_$L.json" 2>&1 | tail -4
done
cat "$LOGS"/peak_mem_*.json > "$OUT/peak_mem.json" 2>/dev/null

if [ "${FW_VERIFY_SKIP_ENERGY:-0}" != 1 ]; then
    step "extended energy table (bench/device_energy.sh, FW_ENERGY_PART=ext)"
    FW_ENERGY_PART=ext FW_BUILD_DIR="$BUILD" OUT="$OUT" bash bench/device_energy.sh > "$LOGS/energy.log" 2>&1 || status=1
    tail -40 "$LOGS/energy.log"
fi
echo "device_verify.sh: exit $status"
