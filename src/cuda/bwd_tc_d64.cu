/* cuda-flash tensor-core backward, head_dim 8..64 (zero-padded to 64), f16 and bf16. See bwd_tc.cuh.
 * Variants: (index, BM query rows per step, W warps of the dK/dV kernel, WQ warps and BNQ keys of the
 * deterministic dQ kernel); the first is the default. */
#include "bwd_tc.cuh"

#define FW_BWD_TC_LIST_64(X, D) X(D, 0, 64, 8, 4, 64) X(D, 1, 64, 4, 4, 64) X(D, 2, 128, 8, 4, 128)
FW_BWD_TC_DEFINE(64, FW_BWD_TC_LIST_64)
