/* The f16/bf16 forward's default record (src/backends/cuda/fwd/heuristics.cu: fw_fwd_default) on the host, no GPU
 * needed, for a Hopper (compute capability 9.0) and an Ampere device description: at head dim 64 the persistent
 * warp-specialised kernel, 128-row tiles up to 1024 queries or keys and three consumer warpgroups (192 rows, 96 keys)
 * above where their rounds of the grid pay; at head dim 128 ping-pong consumers up to 1024 queries and the plain
 * two-warpgroup kernel above; where the tiles do not fill the machine, from 1024 queries, persistent without a
 * causal-like mask and one block a tile with one, and mma.sync records below; mma.sync off Hopper and at other
 * padded head dims (96, 256); and that FW_CUDA_FLASH_CONFIG names any record that runs. The GPU tests run the
 * kernels each choice names (tests/attention: configs, persistent). */
#include <stdint.h>
#include <string.h>
#include "fw_check.h"
#include "fw_harness.h"

#ifndef FW_HAVE_CUDA
int main(void)
{
    fwt_skip("test_fwd_plan: built without CUDA: the CUDA forward is not compiled in");
    return fwt_finish("test_fwd_plan", 0.0);
}
#else
#include "backends/cuda/fwd/heuristics.h"

#include "fake_problem.h"

/* shared memory a block may opt into: 227 KB on an H100, 163 KB on an A100 */
static const fw_cuda_device_info HOPPER = {9, 0, 232448, 132}, AMPERE = {8, 0, 166912, 108};

/* A dense bf16 forward, causal or not. */
static fw_problem dense(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int causal)
{
    fw_problem p = fake_dense(B, H, H, Lq, Lk, D, FW_BF16, 0);
    p.window_left = FW_UNBOUNDED;
    p.window_right = causal ? 0 : FW_UNBOUNDED;
    p.diag_offset = causal ? Lk - Lq : 0;
    p.has_window = causal;
    p.causal = causal;
    return p;
}

/* The default for p on di with knobs k is the record called `record`. */
static void expect(const char *what, const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k,
                   const char *record)
{
    const fw_fwd_record *r = fw_fwd_default(p, di, k);
    const char *name = r ? r->name : "(none)";
    fwt_case(!strcmp(name, record), "%s: %s (want %s)", what, name, record);
}

/* The default for p on di is an mma.sync record (one that runs from compute capability 8.0). */
static void expect_mma(const char *what, const fw_problem *p, const fw_cuda_device_info *di)
{
    const fw_fwd_record *r = fw_fwd_default(p, di, &fw_knobs_defaults);
    fwt_case(r && r->kernel == FW_FWD_MMA, "%s: %s (want an mma.sync record)", what, r ? r->name : "(none)");
}

static void hopper_d64(void)
{
    const fw_knobs *k = &fw_knobs_defaults;
    for (int causal = 0; causal <= 1; causal++) {
        const char *c = causal ? "causal" : "no mask";
        char what[128];
        fw_problem p = dense(32, 16, 512, 512, 64, causal);
        snprintf(what, sizeof what, "D 64, L 512, %s: persistent, 128-row tiles", c);
        expect(what, &p, &HOPPER, k, "wsp-bm128-bn128-s3");
        p = dense(16, 16, 1024, 1024, 64, causal);
        snprintf(what, sizeof what, "D 64, L 1024, %s: persistent, 128-row tiles", c);
        expect(what, &p, &HOPPER, k, "wsp-bm128-bn128-s3");
        p = dense(8, 16, 2048, 2048, 64, causal);
        snprintf(what, sizeof what, "D 64, L 2048, %s: persistent, three consumer warpgroups", c);
        expect(what, &p, &HOPPER, k, "wsp-bm192-bn96-s4");
        p = dense(1, 16, 16384, 16384, 64, causal);
        snprintf(what, sizeof what, "D 64, L 16384, %s: persistent, three consumer warpgroups", c);
        expect(what, &p, &HOPPER, k, "wsp-bm192-bn96-s4");
    }
    /* few rounds of the grid: the busiest block's work decides (an H200 sweep's faster tiling; speed-up over the
     * other in brackets) */
    static const struct {
        int64_t B, H, L;
        int causal;
        const char *record;
    } rounds[] = {
        {1, 16, 2048, 0, "wsp-bm128-bn128-s3"}, /* 176 tiles of 192 rows, two rounds, against 256 of 128 (1.26x) */
        {2, 8, 2048, 0, "wsp-bm128-bn128-s3"},  /* (1.31x) */
        {1, 8, 4096, 0, "wsp-bm128-bn128-s3"},  /* (1.28x) */
        {1, 16, 4096, 0, "wsp-bm192-bn96-s4"},  /* (1.05x) */
        {2, 8, 2048, 1, "wsp-bm128-bn128-s3"},  /* (1.16x) */
        {1, 8, 6144, 1, "wsp-bm128-bn128-s3"},  /* (1.09x) */
        {2, 16, 2048, 1, "wsp-bm192-bn96-s4"},  /* (1.06x) */
        {4, 32, 2048, 0, "wsp-bm192-bn96-s4"},  /* 1408 tiles of 192 rows: over four rounds (1.04x) */
    };
    for (size_t i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        char what[128];
        snprintf(what, sizeof what, "D 64, B %lld H %lld L %lld%s: the faster tiling in few rounds",
                 (long long)rounds[i].B, (long long)rounds[i].H, (long long)rounds[i].L, rounds[i].causal ? " causal" : "");
        fw_problem q = dense(rounds[i].B, rounds[i].H, rounds[i].L, rounds[i].L, 64, rounds[i].causal);
        expect(what, &q, &HOPPER, k, rounds[i].record);
    }
    fw_problem p = dense(4, 16, 8192, 1024, 64, 0);
    expect("D 64, 8192 queries on 1024 keys: 128-row tiles", &p, &HOPPER, k, "wsp-bm128-bn128-s3");
    p = dense(4, 16, 1024, 8192, 64, 0);
    expect("D 64, 1024 queries on 8192 keys: 128-row tiles", &p, &HOPPER, k, "wsp-bm128-bn128-s3");
    p = dense(4, 16, 1025, 1025, 40, 1);
    expect("D 40 (64's records), L 1025: three consumer warpgroups", &p, &HOPPER, k, "wsp-bm192-bn96-s4");
}

static void hopper_d128(void)
{
    const fw_knobs *k = &fw_knobs_defaults;
    fw_problem p = dense(32, 16, 512, 512, 128, 1);
    expect("D 128, L 512, causal: ping-pong consumers", &p, &HOPPER, k, "ws-bm128-bn128-s3-pp");
    p = dense(16, 16, 1024, 1024, 128, 0);
    expect("D 128, L 1024: ping-pong consumers", &p, &HOPPER, k, "ws-bm128-bn128-s3-pp");
    p = dense(4, 16, 4096, 4096, 128, 1);
    expect("D 128, L 4096, causal: one block a tile", &p, &HOPPER, k, "ws-bm128-bn128-s3");
    p = dense(2, 32, 8192, 8192, 112, 0);
    expect("D 112 (128's records), L 8192: one block a tile", &p, &HOPPER, k, "ws-bm128-bn128-s3");
}

static void knobs_and_elsewhere(void)
{
    fw_knobs forced = fw_knobs_defaults;
    snprintf(forced.cuda_flash_config, sizeof forced.cuda_flash_config, "ws-bm192-bn96-s4");
    fw_problem p = dense(16, 16, 1024, 1024, 64, 0);
    expect("FW_CUDA_FLASH_CONFIG=ws-bm192-bn96-s4, L 1024: that record", &p, &HOPPER, &forced, "ws-bm192-bn96-s4");
    snprintf(forced.cuda_flash_config, sizeof forced.cuda_flash_config, "wsp-bm128-bn128-s3");
    p = dense(1, 16, 16384, 16384, 64, 0);
    expect("FW_CUDA_FLASH_CONFIG=wsp-bm128-bn128-s3, L 16384: that record", &p, &HOPPER, &forced, "wsp-bm128-bn128-s3");
    expect_mma("A100, D 64, L 16384: mma.sync", &p, &AMPERE);
    expect("A100, D 64, L 16384, FW_CUDA_FLASH_CONFIG names an sm_90a record: not that record", &p, &AMPERE, &forced,
           fw_fwd_default(&p, &AMPERE, &fw_knobs_defaults)->name);
    /* fewer 128-row tiles than the 132 SMs: the wgmma kernels from 1024 queries, mma.sync's smaller tiles below */
    p = dense(1, 8, 2048, 2048, 64, 0);
    expect("D 64, 128 tiles on 132 SMs: persistent", &p, &HOPPER, &fw_knobs_defaults, "wsp-bm128-bn128-s3");
    p = dense(1, 2, 4096, 4096, 64, 1);
    expect("D 64, 64 tiles on 132 SMs, causal: one block a tile", &p, &HOPPER, &fw_knobs_defaults, "ws-bm128-bn128-s3");
    p = dense(1, 2, 4096, 4096, 128, 0);
    expect("D 128, 64 tiles on 132 SMs, no mask: persistent", &p, &HOPPER, &fw_knobs_defaults, "wsp-bm128-bn128-s3");
    p = dense(1, 2, 4096, 4096, 128, 1);
    expect("D 128, 64 tiles on 132 SMs, causal: one block a tile", &p, &HOPPER, &fw_knobs_defaults, "ws-bm128-bn128-s3");
    p = dense(1, 8, 1024, 1024, 128, 0);
    expect("D 128, 64 tiles of L 1024 on 132 SMs: ping-pong consumers", &p, &HOPPER, &fw_knobs_defaults, "ws-bm128-bn128-s3-pp");
    p = dense(1, 16, 512, 512, 64, 0);
    expect_mma("D 64, 64 tiles of L 512 on 132 SMs: mma.sync's smaller tiles", &p, &HOPPER);
    p = dense(1, 8, 2048, 2048, 64, 0);
    expect_mma("A100, D 64, L 2048, 128 tiles: mma.sync", &p, &AMPERE);
    p = dense(4, 16, 4096, 4096, 96, 0);
    expect_mma("D 96: mma.sync", &p, &HOPPER);
    p = dense(4, 16, 4096, 4096, 256, 0);
    expect_mma("D 256: mma.sync", &p, &HOPPER);
}

int main(void)
{
    hopper_d64();
    hopper_d128();
    knobs_and_elsewhere();
    return fwt_finish("test_fwd_plan", 0.0);
}
#endif
