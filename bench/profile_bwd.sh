#!/usr/bin/env bash
# Nsight Compute on the backward kernels (tensor-core dK/dV in both dQ modes, the deterministic dQ
# kernel) and, for comparison, PyTorch's FlashAttention-2 backward on the same shape: bf16 causal,
# 16k tokens, hidden 2048, one (D, L). Expects a build (bench/device.sh) in $FW_BUILD_DIR.
#   bash bench/profile_bwd.sh [D] [L]      (default 128 4096)
# Logs: $OUT/profile/ncu_fw.txt, ncu_fa2.txt. Clocks left alone (--clock-control none).
set -u
cd "$(dirname "$0")/.."
D=${1:-128}
L=${2:-4096}
BUILD=${FW_BUILD_DIR:-build}
OUT=${OUT:-out-device}
mkdir -p "$OUT/profile"
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
FW_BWD_BENCH_ONLY=$D:$L timeout 240 ncu --clock-control none $SECTIONS -k regex:"dkdv_kernel|dq_kernel" --launch-count 5 \
    "$BUILD/gpu_backward" --bench 1 > "$OUT/profile/ncu_fw.txt" 2>&1
echo "ncu flashwatt: exit $?"
cat > /tmp/fa2_bwd.py <<PYEOF
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
L, D = $L, $D
B, H = 16384 // L, 2048 // D
q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(torch.randn_like(q))
torch.cuda.synchronize()
PYEOF
timeout 240 ncu --clock-control none $SECTIONS -k regex:"flash_bwd" --launch-count 3 python3 /tmp/fa2_bwd.py > "$OUT/profile/ncu_fa2.txt" 2>&1
echo "ncu fa2: exit $?"
for f in "$OUT/profile/ncu_fw.txt" "$OUT/profile/ncu_fa2.txt"; do
    echo "== $f"
    grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Block Limit|Dynamic Shared|L1/TEX Hit|Mem Pipes|Executed Ipc A" "$f" | head -120
done
