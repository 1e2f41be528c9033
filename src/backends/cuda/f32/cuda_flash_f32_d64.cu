/* cuda-flash-f32, head-dim bucket 64 (head_dim in (32, 64], zero-padded to 64). See flash_f32_kernel.cuh.
 * Entry 0 of each table is the default (the fastest measured: H100, docs/PERF-gpu-f32.md; the tensor-core
 * modes' wgmma kernels, entries 0-4, run on compute capability 9.0 only: elsewhere the first mma.sync entry is). */
#include "backends/cuda/f32/flash_f32_kernel.cuh"
#include "backends/cuda/f32/flash_f32_wg.cuh"

static const ff32_cfg_info exact_cfgs[] = {
    {"bm128-bn64-tm8-kv1", 128, 64, 4, 0, 0},
    {"bm64-bn64-tm4-kv1", 64, 64, 4, 0, 2}, /* L=128 (128 query blocks of 128 rows on 132 SMs): 16% faster */
    {"bm128-bn32-tm8-kv1", 128, 32, 4, 0, 0},
    {"bm64-bn64-tm4", 64, 64, 4, 0, 0},
    {"bm64-bn32-tm4", 64, 32, 4, 0, 0},
    /* B=1, L=128 and 512 (16 and 64 query blocks of 64 rows on 132 SMs): 26% and 23% faster than bm64 */
    {"bm32-bn64-tm2-kv1", 32, 64, 4, 0, 1},
};
static const ff32_cfg_info tc_cfgs[] = {
    {"wsf-bm128-bn64", 128, 64, 12, 1, 0},
    {"wg-bm128-bn64", 128, 64, 8, 1, 0},
    {"ws-bm128-bn64", 128, 64, 12, 1, 0},
    {"wsp-bm128-bn64", 128, 64, 12, 1, 0},
    {"wsps-bm128-bn64", 128, 64, 12, 1, 0},
    {"bm128-bn64-w4", 128, 64, 4, 0, 0},
    {"bm128-bn32-w4", 128, 32, 4, 0, 0},
    {"bm64-bn64-w4", 64, 64, 4, 0, 0},
    {"bm64-bn32-w4", 64, 32, 4, 0, 0},
    {"wg1-bm64-bn64", 64, 64, 4, 1, 0}, /* one warpgroup a block, two blocks an SM */
};

int ff32_configs_d64(int variant, const ff32_cfg_info **table)
{
    if (variant == 0) {
        *table = exact_cfgs;
        return (int)(sizeof exact_cfgs / sizeof exact_cfgs[0]);
    }
    *table = tc_cfgs;
    return (int)(sizeof tc_cfgs / sizeof tc_cfgs[0]);
}

cudaError_t ff32_launch_d64(int variant, int cfg, const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k)
{
    if (variant == 0) {
        switch (cfg) {
        case 0: return ff32_launch_exact<64, 128, 64, 8, 2, true>(a, batch, s, k); /* Q·Kᵀ loop unrolled by 2: 1-2% faster than 4 */
        case 1: return ff32_launch_exact<64, 64, 64, 4, 4, true>(a, batch, s, k);
        case 2: return ff32_launch_exact<64, 128, 32, 8, 4, true>(a, batch, s, k);
        case 3: return ff32_launch_exact<64, 64, 64, 4, 4, false>(a, batch, s, k);
        case 4: return ff32_launch_exact<64, 64, 32, 4, 4, false>(a, batch, s, k);
        case 5: return ff32_launch_exact<64, 32, 64, 2, 4, true>(a, batch, s, k);
        default: return cudaErrorInvalidValue;
        }
    }
    const bool split = variant == 2;
    switch (cfg) {
    case 0: return split ? ff32_launch_ws<true, 2>(a, batch, s, k) : ff32_launch_ws<false, 2>(a, batch, s, k);
    case 1: return split ? ff32_launch_wg<true>(a, batch, s) : ff32_launch_wg<false>(a, batch, s);
    case 2: return split ? ff32_launch_ws<true>(a, batch, s, k) : ff32_launch_ws<false>(a, batch, s, k);
    case 3: return split ? ff32_launch_ws<true, 0, true>(a, batch, s, k) : ff32_launch_ws<false, 0, true>(a, batch, s, k);
    case 4: return split ? ff32_launch_ws<true, 0, true, true>(a, batch, s, k) : ff32_launch_ws<false, 0, true, true>(a, batch, s, k);
    case 5: return split ? ff32_launch_tc<64, 64, 2, true>(a, batch, s) : ff32_launch_tc<64, 64, 2, false>(a, batch, s);
    case 6: return split ? ff32_launch_tc<64, 32, 2, true>(a, batch, s) : ff32_launch_tc<64, 32, 2, false>(a, batch, s);
    case 7: return split ? ff32_launch_tc<64, 64, 1, true>(a, batch, s) : ff32_launch_tc<64, 64, 1, false>(a, batch, s);
    case 8: return split ? ff32_launch_tc<64, 32, 1, true>(a, batch, s) : ff32_launch_tc<64, 32, 1, false>(a, batch, s);
    case 9: return split ? ff32_launch_wg1<true>(a, batch, s, k) : ff32_launch_wg1<false>(a, batch, s, k);
    default: return cudaErrorInvalidValue;
    }
}
