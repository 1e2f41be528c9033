#!/bin/bash
# Where `wg1`'s time goes (docs/PERF-gpu-f32.md, Run 10, run fa): on the GPU machine, from the repository root, with
# the kernel of commit 46b068b that the trace patch is against (git checkout 46b068b -- src/cuda/flash_f32_wg.cuh),
# builds bench/device_f32.sh's tree with docs/runs/f32_wg1_trace.patch, runs the short shapes once each and prints
# bench/trace_wg1.py's reading of each trace.
set -u
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
export FW_F32_TRACE_FILE=$OUT/tr FW_F32_TRACE_COLD=1
FW_F32_PATCH=docs/runs/f32_wg1_trace.patch FW_F32_BENCH_ONLY=seed:128 bash bench/device_f32.sh > $OUT/run_seed128.txt 2>&1
tail -3 $OUT/run_seed128.txt
for c in seed003-b1:128 seed003-b32:128 seed:256 seed003-b1:512; do
  FW_BUILD_DIR=/tmp/fw_f32_src/build FW_F32_BENCH_ONLY=$c bash bench/device_f32.sh > $OUT/run_${c/:/_}.txt 2>&1
done
grep -h 'wg1\|default' $OUT/run_*.txt | grep -v exact
for f in $OUT/tr.*; do python3 bench/trace_wg1.py $f; done
