/* CUDA backward, head-dim bucket 64 (head_dim 1..64, zero-padded to 64): the dK/dV and dQ kernels
 * for f32, f16 and bf16. See bwd_kernel.cuh. */
#include "backends/cuda/bwd/bwd_kernel.cuh"

FW_BWD_DEFINE(64)
