/* cuda-flash tensor-core backward, head_dim 8..64 (zero-padded to 64), f16 and bf16. See bwd_tc.cuh.
 * Variants X(D, index, BM, W, QS, WQ, MTQ, BNQ): the dK/dV kernel's query rows per step, warps and query
 * sub-tile; the deterministic dQ kernel's warps, m16 tiles per warp and keys per step. Defaults:
 * FW_BWD_TC_ATOM_DEFAULT_64 for atomic dQ, FW_BWD_TC_DET_DEFAULT_64 for deterministic (bwd_tc.cuh). */
#include "backends/cuda/bwd/bwd_tc.cuh"

#define FW_BWD_TC_LIST_64(X, D) X(D, 0, 64, 4, 32, 4, 2, 32) X(D, 1, 64, 8, 32, 4, 2, 64) X(D, 2, 64, 4, 64, 4, 2, 32) \
    X(D, 3, 64, 8, 64, 4, 1, 64) X(D, 4, 64, 8, 0, 4, 2, 32) \
    X(D, 5, 64, 8, -1, 4, 2, 32) \
    X(D, 6, 64, 8, -1, -1, 2, 64) \
    X(D, 7, 128, 8, -1, -1, 2, 128) \
    X(D, 8, 64, 8, -2, -1, 2, 128) \
    X(D, 9, 64, 8, -2, -2, 2, 128) \
    X(D, 10, 64, 8, -4, -2, 2, 128)
FW_BWD_TC_DEFINE(64, FW_BWD_TC_LIST_64)
