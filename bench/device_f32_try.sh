#!/bin/bash
# Quick look at candidate configurations on the GPU machine (one device call): bench/device_f32.sh's build (one
# benchmark case), the correctness program twice (automatic choices; wg1's first tile staged), then the benchmark
# cases given, each once per environment setting in FW_TRY_ENVS (";"-separated, "-" = none), rows matching
# FW_TRY_ROWS (an egrep pattern over the configuration names) and the defaults. FW_TRY_ROUNDS=n: the settings n times
# over; FW_TRY_TORCH=1: then PyTorch's `efficient` on the same inputs, each case. FW_F32_PATCH: as in device_f32.sh.
#   usage (repository root, GPU machine):  FW_TRY_ENVS="-;FW_F32_WG1_STAGE0=1" bash bench/device_f32_try.sh seed:128 ...
set -u
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
B=/tmp/fw_f32_src/build
OUT=$OUT/build FW_F32_BENCH_ONLY=none:0 bash bench/device_f32.sh > "$OUT/build.txt" 2>&1
grep -E "build:|spill|rc=" "$OUT/build.txt" | head -4
timeout 150 "$B/gpu_cuda_f32" > "$OUT/test.log" 2>&1
echo "correctness rc=$? ($(grep -c ' ok ' "$OUT/test.log") ok lines)"; grep -E "FAIL|failures" "$OUT/test.log" | head -20
FW_F32_WG1_STAGE0=1 timeout 150 "$B/gpu_cuda_f32" > "$OUT/test_staged.log" 2>&1
echo "staged rc=$?"; grep -E "FAIL|failures" "$OUT/test_staged.log" | head -20
IFS=';' read -r -a envs <<< "${FW_TRY_ENVS:--}"
D=/tmp/fw_f32_try_dump
dump=(); [ "${FW_TRY_TORCH:-0}" = 1 ] && dump=("$D") # the inputs, for PyTorch
for c in "$@"; do
    k=0
    rm -rf "$D"; mkdir -p "$D"
    for r in $(seq "${FW_TRY_ROUNDS:-1}"); do
        for ev in "${envs[@]}"; do
            [ "$ev" = - ] && ev=
            k=$((k + 1))
            log="$OUT/bench_${c/:/}_${k}_${ev//[^A-Za-z0-9]/}.log"
            env $ev FW_F32_BENCH_ONLY=$c timeout 120 "$B/gpu_cuda_f32" --bench "${dump[@]}" > "$log" 2>&1
            grep RESULT "$log" | grep -v " tag " | grep -E "${FW_TRY_ROWS:-wg}|default" |
                awk -v c="$c" -v ev="${ev:--}" '{printf "%-15s %-40s %-6s %-24s %9s ms graph %s err %s\n", c, ev, $9, $10, $11, $15, $13}'
        done
    done
    if [ "${FW_TRY_TORCH:-0}" = 1 ]; then
        PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_f32.py "$D" > "$OUT/torch_${c/:/}.log" 2>&1
        grep RESULT "$OUT/torch_${c/:/}.log" | grep efficient |
            awk -v c="$c" '{printf "%-15s %-40s %-6s %-24s %9s ms graph %s err %s\n", c, "-", "exact", "torch-efficient", $11, $15, $13}'
    fi
done
rm -rf "$D"
tar czf "$OUT/try_logs.tgz" -C "$OUT" --remove-files $(cd "$OUT" && ls | grep -v try_logs.tgz)
