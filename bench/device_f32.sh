#!/bin/bash
# Device script of the float32 CUDA backends (cuda-naive, cuda-tiled, cuda-flash-f32): one call on the
# GPU machine builds, tests, sanitizes and times, and prints a short table last.
#   usage, from the repository root on the GPU machine:  bash bench/device_f32.sh
#   FW_F32_PATCH=some.patch bash bench/device_f32.sh   tests and times a candidate
#   revision of the flash-f32 kernels (applied to the script's private copy of the tree only).
# Full logs go under $OUT (the device tool's folder), or /tmp/fw_f32_out.
set -u
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
BUILD=${FW_BUILD_DIR:-${BUILD:-build-dev-f32}}
DUMP=/tmp/fw_f32_dump
date -u | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv 2>&1 | tee -a "$OUT/gpu.txt"
t0=$(date +%s)
SRC=.
if [ -z "${FW_BUILD_DIR:-}" ] && [ "${FW_F32_ONLY:-1}" = 1 ]; then
    # Build only what this script tests: a copy of the tree where cuda-flash (tensor cores, another
    # helper's kernels) is its placeholder, so the build takes a minute, not five.
    SRC=/tmp/fw_f32_src
    rm -rf "$SRC"; mkdir -p "$SRC"
    cp -r CMakeLists.txt include src tests bench tools "$SRC"/ 2>/dev/null
    [ -d harness ] && cp -r harness "$SRC"/
    rm -f "$SRC"/src/backends/cuda/generated/fwd_*.cu "$SRC"/src/backends/cuda/fwd/*.cu
    cat > "$SRC/src/backends/cuda/fwd/cuda_flash.cu" <<'STUB'
#include "backends/cuda/common/cuda_common.h"
static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    (void)p;
    return fw_why(why, why_len, "cuda-flash is not built in this f32-only device build");
}
static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)p; (void)cfg; (void)ex;
    return FW_ERR_NOT_IMPLEMENTED;
}
extern "C" const fw_backend fw_backend_cuda_flash = {
    "cuda-flash", "stub", FW_DEVICE_CUDA, fw_cuda_available, supports_, NULL, forward_, NULL,
};
STUB
    BUILD=$SRC/build
    # FW_F32_PATCH=some.patch: try a candidate kernel revision in the copy only.
    if [ -n "${FW_F32_PATCH:-}" ]; then
        patch -d "$SRC" -p1 < "$FW_F32_PATCH" > "$OUT/patch.log" 2>&1 || { cat "$OUT/patch.log"; exit 1; }
        echo "applied $FW_F32_PATCH"
    fi
fi
if [ -n "${FW_BUILD_DIR:-}" ] && [ -x "$BUILD/gpu_cuda_f32" ]; then
    echo "using the build in $BUILD (built by bench/device.sh)"
else
cmake -S "$SRC" -B "$BUILD" -DFLASHWATT_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS="-Xptxas -v" \
    > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
make -C "$BUILD" -j16 flashwatt gpu_cuda_f32 >> "$OUT/build.log" 2>&1 ||
    { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
fi
echo "ptxas: $(grep -c 'bytes spill' "$OUT/build.log") kernels reported, nonzero spills:"
grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | sort | uniq -c | head
# C75xx: ptxas serialised a kernel's wgmmas (too few registers for their pipeline: 3xtf32 wg1 +28% at L = 128 when
# it happened, docs/PERF-gpu-f32.md)
echo "ptxas wgmma serialisations (C75xx): $(grep -c 'C75[0-9][0-9]' "$OUT/build.log")"
grep -o "C75[0-9][0-9].*function '[^']*'" "$OUT/build.log" | sort -u | head

# FW_F32_PROFILE="kernel regex": Nsight Compute on the seed L=2048 (or FW_F32_PROFILE_L) launches of those
# kernels instead of the rest (e.g. FW_F32_PROFILE='ff32_ws_kernel<\(bool\)1>', demangled names); log in $OUT/ncu.txt.
if [ -n "${FW_F32_PROFILE:-}" ]; then
    FW_F32_BENCH_ONLY=seed:${FW_F32_PROFILE_L:-2048} timeout 400 ncu --clock-control none --kernel-name-base demangled \
        -k regex:"$FW_F32_PROFILE" --launch-count "${FW_F32_PROFILE_N:-2}" --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section InstructionStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        "$BUILD/gpu_cuda_f32" --bench > "$OUT/ncu.txt" 2>&1
    echo "ncu rc=$?"
    grep -iE "ff32_w|Duration|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|stall|No Eligible|L2 Cache Throughput|L1/TEX Cache|Compute \(SM\)|Memory Throughput|Active Warps Per|Eligible Warps|Shared|Pipe" "$OUT/ncu.txt" | head -100
    exit 0
fi
# FW_F32_BENCH_ONLY=tag:L (e.g. seed:2048): that benchmark case alone, no tests or sanitizers (experiments).
if [ -n "${FW_F32_BENCH_ONLY:-}" ]; then
    timeout 300 "$BUILD/gpu_cuda_f32" --bench > "$OUT/bench_c.log" 2>&1
    echo "bench rc=$?"
    grep RESULT "$OUT/bench_c.log" | grep -v " tag " | awk '{printf "%-6s %-15s %-6s %-22s %9s ms %7s TF %s graph %s\n", $5, $8, $9, $10, $11, $12, $13, $15}'
    exit 0
fi
timeout 120 stdbuf -oL "$BUILD/gpu_cuda_f32" > "$OUT/test.log" 2>&1
rc=$?
echo "correctness rc=$rc ($(grep -c ' ok ' "$OUT/test.log") ok lines); failures:"
grep -E "FAIL|failures" "$OUT/test.log" | head -40
# a hang (a kernel that never finishes) would also hang the sanitizers and the benchmark
[ $rc = 124 ] && { echo "the correctness run timed out; last lines:"; tail -3 "$OUT/test.log"; exit 1; }

# the sanitizers on the small case, the persistent kernels held to 2 blocks (several query blocks each), the
# split-KV kernel's key ranges at 3 (ranges of unequal length, empty ones where the mask leaves few tiles), its
# first tile staged (K, Q, V waited for one by one; the first pass takes the automatic choice: mostly not staged) and
# half its blocks starting 500 cycles late (the staggered start: automatic only where the blocks fill the SMs)
{
    S="env FW_CUDA_PERSIST_BLOCKS=2 FW_F32_KV_SPLITS=3 FW_F32_WG1_STAGE0=1 FW_F32_DELAY=500 compute-sanitizer"
    echo "== memcheck"; timeout 150 $S --tool memcheck "$BUILD/gpu_cuda_f32" --small 2>&1 | grep -E "=====|failures" | head -40
    echo "== racecheck"; timeout 300 $S --tool racecheck "$BUILD/gpu_cuda_f32" --small 2>&1 | grep -E "=====|failures" | head -40
    echo "== synccheck"; timeout 100 $S --tool synccheck "$BUILD/gpu_cuda_f32" --small 2>&1 | grep -E "=====|failures" | head -40
    echo "== every case, persistent kernels at 3 blocks, split-KV at 3 ranges, wg1's first tile staged, half the blocks late"
    FW_CUDA_PERSIST_BLOCKS=3 FW_F32_KV_SPLITS=3 FW_F32_WG1_STAGE0=1 FW_F32_DELAY=500 timeout 120 "$BUILD/gpu_cuda_f32" 2>&1 | grep -E "FAIL|failures"
} > "$OUT/sanitizer.log" 2>&1
grep -E "ERROR SUMMARY|==|failures" "$OUT/sanitizer.log"

rm -rf "$DUMP"; mkdir -p "$DUMP"
timeout 300 "$BUILD/gpu_cuda_f32" --bench "$DUMP" > "$OUT/bench_c.log" 2>&1
echo "bench rc=$?"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_f32.py "$DUMP" > "$OUT/bench_torch.log" 2>&1
echo "torch rc=$?"; grep -v RESULT "$OUT/bench_torch.log" | tail -5
rm -rf "$DUMP"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$OUT/gpu.txt" 2>&1
# summary: tag L D causal backend precision config ms TFLOP/s max_abs (all rows in summary.txt;
# printed: the fastest configuration of each backend/precision per shape)
grep -h RESULT "$OUT/bench_c.log" "$OUT/bench_torch.log" | grep -v " tag " |
    awk '{printf "%-11s L%-5s D%-3s c%s %-15s %-6s %-22s %9s ms %7s TF %s graph %s\n", $2, $5, $6, $7, $8, $9, $10, $11, $12, $13, $15}' |
    sort -k1,1 -k2,2V -k3,3 -k4,4 -k8,8n > "$OUT/summary.txt"
awk '{k=$1" "$2" "$3" "$4" "$5" "$6; if (!(k in seen)) {seen[k]=1; print}}' "$OUT/summary.txt"
echo "== each backend's own choice and torch efficient: ms per call (host waits), graph = device time per call"
grep -E " (default|-) " "$OUT/summary.txt" | grep -E "^seed" | grep -E "cuda-flash-f32|torch-efficient"
