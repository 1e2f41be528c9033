#!/bin/bash
# Where one kernel's warps stall, instruction by instruction: Nsight Compute's SourceCounters (sampled warp
# states per SASS instruction) of one launch of the kernels matching REGEX in `gpu_cuda_f32 --bench` at seed
# length L, exported as CSV for bench/ncu_source.py.
#   usage (GPU machine, after bench/device_f32.sh built BUILD):
#     bash bench/ncu_source.sh BUILD 'ff32_ws_kernel<\(bool\)1, \(int\)0, \(bool\)1, \(bool\)1>' 512 wsps
#   then, anywhere:  python3 bench/ncu_source.py $OUT/src_wsps.csv
set -u
BUILD=$1 REGEX=$2 L=$3 TAG=$4
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
FW_F32_BENCH_ONLY=seed:$L timeout 300 ncu --clock-control none --kernel-name-base demangled -k regex:"$REGEX" \
    --launch-skip "${FW_NCU_SKIP:-3}" --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -f -o "$OUT/src_$TAG" "$BUILD/gpu_cuda_f32" --bench > "$OUT/ncu_$TAG.log" 2>&1
echo "ncu rc=$?"
ncu --import "$OUT/src_$TAG.ncu-rep" --page source --csv --print-source sass > "$OUT/src_$TAG.csv" 2> "$OUT/src_$TAG.err"
echo "source page rc=$? ($(wc -l < "$OUT/src_$TAG.csv") lines)"
head -c 600 "$OUT/src_$TAG.err"
ncu --import "$OUT/src_$TAG.ncu-rep" --page details > "$OUT/ncu_$TAG.txt" 2>&1
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Stall" "$OUT/ncu_$TAG.txt" | head -20
