#!/bin/bash
# What `wg1`'s structure costs before its splits and softmax (docs/PERF-gpu-f32.md "Run 14"), one device call: the
# kernels built with docs/runs/f32_wg1_floor.patch (measurement only: FW_F32_FLOOR=1 skips the softmax, 2 also the K
# and Vᵀ splits, 3 also the products, leaving the copies, Q and P in registers, the barriers and the store), each cut
# timed beside the whole kernel (0) in three rounds, PyTorch's `efficient` on the same inputs (bench/device_f32_try.sh),
# then the memory-only kernel.
#   usage (repository root, GPU machine):  bash bench/device_f32_floor.sh seed:128 seed003-b32:128 ...
set -u
FW_F32_PATCH=docs/runs/f32_wg1_floor.patch FW_TRY_ROWS='^$' FW_TRY_ROUNDS=3 FW_TRY_TORCH=1 \
    FW_TRY_ENVS='FW_F32_FLOOR=0;FW_F32_FLOOR=1;FW_F32_FLOOR=2;FW_F32_FLOOR=3' bash bench/device_f32_try.sh "$@"
make -C /tmp/fw_f32_src/build -j16 memory_floor > /dev/null 2>&1 && /tmp/fw_f32_src/build/memory_floor
