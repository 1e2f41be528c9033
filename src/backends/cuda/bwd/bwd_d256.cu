/* CUDA backward, head-dim bucket 256 (head_dim 129..256, zero-padded to 256): the dK/dV and dQ kernels
 * for f32, f16 and bf16. See bwd_kernel.cuh. */
#include "backends/cuda/bwd/bwd_kernel.cuh"

FW_BWD_DEFINE(256)
