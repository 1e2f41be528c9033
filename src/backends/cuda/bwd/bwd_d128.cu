/* CUDA backward, head-dim bucket 128 (head_dim 65..128, zero-padded to 128): the dK/dV and dQ kernels
 * for f32, f16 and bf16. See bwd_kernel.cuh. */
#include "backends/cuda/bwd/bwd_kernel.cuh"

FW_BWD_DEFINE(128)
