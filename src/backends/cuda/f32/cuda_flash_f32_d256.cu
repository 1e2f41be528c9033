/* cuda-flash-f32, head-dim bucket 256 (head_dim in (128, 256], zero-padded to 256). See flash_f32_kernel.cuh.
 * Entry 0 of each table is the default (the fastest measured: H100, docs/PERF-gpu-f32.md). */
#include "backends/cuda/f32/flash_f32_kernel.cuh"

static const ff32_cfg_info exact_cfgs[] = {
    {"bm32-bn32-tm2-kv1", 32, 32, 4, 0, 0},
    {"bm32-bn16-tm2", 32, 16, 4, 0, 0},
    {"bm32-bn16-tm2-kv1", 32, 16, 4, 0, 0},
};
static const ff32_cfg_info tc_cfgs[] = {
    {"bm64-bn32-w4", 64, 32, 4, 0, 0},
    {"bm64-bn16-w4", 64, 16, 4, 0, 0},
};

int ff32_configs_d256(int variant, const ff32_cfg_info **table)
{
    if (variant == 0) {
        *table = exact_cfgs;
        return (int)(sizeof exact_cfgs / sizeof exact_cfgs[0]);
    }
    *table = tc_cfgs;
    return (int)(sizeof tc_cfgs / sizeof tc_cfgs[0]);
}

cudaError_t ff32_launch_d256(int variant, int cfg, const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k)
{
    if (variant == 0) {
        switch (cfg) {
        case 0: return ff32_launch_exact<256, 32, 32, 2, 4, true>(a, batch, s, k);
        case 1: return ff32_launch_exact<256, 32, 16, 2, 4, false>(a, batch, s, k);
        case 2: return ff32_launch_exact<256, 32, 16, 2, 4, true>(a, batch, s, k);
        default: return cudaErrorInvalidValue;
        }
    }
    const bool split = variant == 2;
    switch (cfg) {
    case 0: return split ? ff32_launch_tc<256, 32, 1, true>(a, batch, s) : ff32_launch_tc<256, 32, 1, false>(a, batch, s);
    case 1: return split ? ff32_launch_tc<256, 16, 1, true>(a, batch, s) : ff32_launch_tc<256, 16, 1, false>(a, batch, s);
    default: return cudaErrorInvalidValue;
    }
}
