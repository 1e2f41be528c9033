#!/bin/bash
# What `wg1`'s structure costs before its splits and softmax (docs/PERF-gpu-f32.md "Run 14"), one device call: the
# kernels built with docs/runs/f32_wg1_floor.patch (measurement only: FW_F32_FLOOR=1 skips the softmax, 2 also the K
# and Vᵀ splits, 3 also the products, leaving the copies, Q and P in registers, the barriers and the store), each cut
# timed beside the whole kernel (0) in rounds, PyTorch's `efficient` on the same inputs, and the memory-only kernel.
#   usage (repository root, GPU machine):  bash bench/device_f32_floor.sh seed:128 seed003-b32:128 ...
set -u
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
B=/tmp/fw_f32_src/build
D=/tmp/fw_f32_floor_dump
FW_F32_PATCH=docs/runs/f32_wg1_floor.patch OUT=$OUT/build FW_F32_BENCH_ONLY=none:0 bash bench/device_f32.sh \
    > "$OUT/build.txt" 2>&1
grep -E "applied|build:|rc=" "$OUT/build.txt" | head -4
make -C "$B" -j16 memory_floor > /dev/null 2>&1 && "$B/memory_floor" | tee "$OUT/memory_floor.txt"
timeout 150 "$B/gpu_cuda_f32" > "$OUT/test.log" 2>&1
echo "correctness (cut 0) rc=$? ($(grep -c ' ok ' "$OUT/test.log") ok lines)"
for c in "$@"; do
    rm -rf "$D"; mkdir -p "$D"
    for r in 1 2 3; do
        for cut in 0 1 2 3; do
            log="$OUT/bench_${c/:/}_cut${cut}_r$r.log"
            FW_F32_FLOOR=$cut FW_F32_BENCH_ONLY=$c timeout 120 "$B/gpu_cuda_f32" --bench "$D" > "$log" 2>&1
            grep RESULT "$log" | grep -E "(tf32|3xtf32) +default" |
                awk -v c="$c" -v k="$cut" -v r="$r" '{printf "%-15s cut %s round %s %-6s %9s ms graph %s err %s\n", c, k, r, $9, $11, $15, $13}'
        done
    done
    PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_f32.py "$D" > "$OUT/torch_${c/:/}.log" 2>&1
    grep RESULT "$OUT/torch_${c/:/}.log" | grep efficient |
        awk -v c="$c" '{printf "%-15s torch-efficient %9s ms graph %s err %s\n", c, $11, $15, $13}'
done
rm -rf "$D"
tar czf "$OUT/floor_logs.tgz" -C "$OUT" --remove-files $(cd "$OUT" && ls | grep -v floor_logs.tgz)
