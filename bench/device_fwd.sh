#!/usr/bin/env bash
# The forward kernels on the device, in one call: build; gpu_cuda_flash (every compiled configuration,
# the wgmma ones included on compute capability 9.0); the whole gpu_cuda_flash suite again with each
# wgmma configuration forced as the default (FW_CUDA_FLASH_CONFIG); compute-sanitizer memcheck and
# racecheck on the wgmma kernels; then bench/torch_sdpa.py on the FA grid: SDPA flash and cudnn, the
# default cuda-flash and the wgmma configurations, same tensors, same process.
# About 4 minutes on one H100/H200.   env: FW_FWD_TORCH_ARGS (default "--configs --cfg-match wg --check
# --sdpa flash,cudnn"), FW_FWD_SKIP_TEST=1.
# Logs: $OUT/fwd.log (short results last), $OUT/fwd_logs.tar.gz, $OUT/fwd_torch.json.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out-device}
mkdir -p "$OUT"
BUILD=${FW_BUILD_DIR:-build}
. bench/steps.sh "$OUT/fwd.log" "$OUT/fwd_logs.tar.gz"

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv | tee "$LOGS/nvidia-smi.txt"
echo "tree: src sha1 $(find src include -type f | sort | xargs cat | sha1sum | cut -c1-12) (the device copy's .git can be stale)"

build_step "$BUILD"

WG_CFGS="wg-bm128-bn128-s3 ws-bm128-bn128-s3 ws-bm128-bn128-s3-pp"
if [ "${FW_FWD_SKIP_TEST:-0}" != 1 ]; then
    step "gpu_cuda_flash (every configuration)"
    timeout 240 "$BUILD/gpu_cuda_flash" > "$LOGS/gpu_cuda_flash.log" 2>&1 || status=1
    grep -E "^FAIL" "$LOGS/gpu_cuda_flash.log" | head -20; tail -1 "$LOGS/gpu_cuda_flash.log"
    for cfg in $WG_CFGS; do
        step "gpu_cuda_flash, the whole suite with $cfg as the default"
        FW_CUDA_FLASH_CONFIG=$cfg timeout 240 "$BUILD/gpu_cuda_flash" > "$LOGS/gpu_cuda_flash_$cfg.log" 2>&1 || status=1
        grep -E "^FAIL" "$LOGS/gpu_cuda_flash_$cfg.log" | head -20; tail -1 "$LOGS/gpu_cuda_flash_$cfg.log"
    done
    step "gpu_cuda_flash, the whole suite without wgmma kernels (FW_CUDA_FLASH_WG=0: the mma.sync defaults)"
    FW_CUDA_FLASH_WG=0 timeout 240 "$BUILD/gpu_cuda_flash" > "$LOGS/gpu_cuda_flash_nowg.log" 2>&1 || status=1
    grep -E "^FAIL" "$LOGS/gpu_cuda_flash_nowg.log" | head -20; tail -1 "$LOGS/gpu_cuda_flash_nowg.log"
    step "compute-sanitizer on the wgmma kernels (gpu_cuda_flash --quick)"
    for cfg in $WG_CFGS; do
        for tool in memcheck racecheck; do
            FW_CUDA_FLASH_CONFIG=$cfg timeout 180 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/gpu_cuda_flash" --quick > "$LOGS/san_${tool}_$cfg.log" 2>&1
            rc=$?; [ $rc = 0 ] || status=1
            echo "$cfg $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, [0-9]+ failed' "$LOGS/san_${tool}_$cfg.log" | tr '\n' ' ')"
        done
    done
fi

step "PyTorch SDPA vs cuda-flash (bench/torch_sdpa.py ${FW_FWD_TORCH_ARGS:---configs --cfg-match w --check --sdpa flash,cudnn})"
PYTHONUNBUFFERED=1 FLASHWATT_LIBRARY="$ROOT/$BUILD/libflashwatt.so" timeout 300 \
    python3 bench/torch_sdpa.py --json "$OUT/fwd_torch.json" --fw cuda-flash ${FW_FWD_TORCH_ARGS:---configs --cfg-match w --check --sdpa flash,cudnn} \
    > "$LOGS/torch_sdpa.log" 2>&1 || status=1
grep -v "^#" "$LOGS/torch_sdpa.log" | grep -E "err|unsupported" | awk '{print $1,$2,$3,$4,$5,$6, $NF}' | head -60
sed -n '/# summary/,$p' "$LOGS/torch_sdpa.log"
echo "device_fwd.sh: exit $status"
