#!/bin/bash
# session experiment: consumer ping-pong in ff32_ws_kernel (FW_CUDA_F32_PP=1) vs off, one build
set -u
FW_F32_BENCH_ONLY=none:0 bash bench/device_f32.sh > $OUT/build.txt 2>&1
B=/tmp/fw_f32_src/build/gpu_cuda_f32
FW_CUDA_F32_PP=1 timeout 120 $B > $OUT/test_pp.log 2>&1; echo "tests with pp: rc=$? $(grep failures $OUT/test_pp.log)"
FW_CUDA_F32_PP=1 FW_CUDA_PERSIST_BLOCKS=3 timeout 120 $B 2>&1 | grep failures
for t in racecheck synccheck; do FW_CUDA_F32_PP=1 FW_CUDA_PERSIST_BLOCKS=2 timeout 150 compute-sanitizer --tool $t $B --small 2>&1 | grep -E "SUMMARY|failures"; done
for r in 1 2; do for L in 512 1024 2048; do for pp in 0 1; do
  FW_CUDA_F32_PP=$pp FW_F32_BENCH_ONLY=seed:$L timeout 200 $B --bench > $OUT/r${r}_pp${pp}_$L.log 2>&1
  grep RESULT $OUT/r${r}_pp${pp}_$L.log | grep -E "tf32 (tf32-|3xtf32-)?(ws|wsf|wsp)-|tf32 default" | awk -v r=$r -v pp=$pp '{print "r"r, "pp"pp, $5, $9, $10, $11, $15, $13}'
done; done; done
