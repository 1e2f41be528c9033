/* The CUDA backward's choice of dQ mode and kernels (src/backends/cuda/bwd/heuristics.cu: fw_bwd_recompute_plan)
 * on the host, no GPU needed, for a Hopper (compute capability 9.0) and an Ampere device description: where the
 * default fuses dQ into the dK/dV kernel (16-bit, head dim <= 128, any number of keys, dense or ragged: the atomic
 * mode's producer-warpgroup records), where it keeps the deterministic pipeline (a deterministic context,
 * FW_CUDA_BWD_DQ=deterministic, a record forced by FW_CUDA_BWD_CONFIG; a fuse record, whose dK/dV kernel adds dQ up
 * by atomics, only in the atomic mode), that off Hopper and for f32 nothing is fused, and that a device with less
 * shared memory gets a record that fits it (an A100's 163 KB, 99 KB on compute capability 8.6/8.9) or a refusal that
 * says so, never a launch that cannot start. The GPU tests run the kernels each choice names (tests/attention
 * backward, test_varlen_backward). */
#include <stdint.h>
#include <string.h>
#include "fw_check.h"
#include "fw_harness.h"

#ifndef FW_HAVE_CUDA
int main(void)
{
    fwt_skip("test_bwd_plan: built without CUDA: the CUDA backward is not compiled in");
    return fwt_finish("test_bwd_plan", 0.0);
}
#else
#include "backends/cuda/bwd/heuristics.h"

#include "fake_problem.h"

/* shared memory a block may opt into: 227 KB on an H100, 163 KB on an A100, 99 KB on compute capability 8.6 and 8.9 */
static const fw_cuda_device_info HOPPER = {9, 0, 232448, 132}, AMPERE = {8, 0, 166912, 108}, ADA = {8, 9, 101376, 128},
                                 SMALL = {8, 0, 49152, 16}; /* no such card: below every CUDA-core record */

/* A dense bf16 backward. */
static fw_problem dense(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D)
{
    return fake_dense(B, H, Hkv, Lq, Lk, D, FW_BF16, 1);
}

/* A ragged batch of `seqs` sequences packed into total_q / total_k rows, the longest max_q / max_k. */
static fw_problem ragged(int64_t seqs, int64_t total_q, int64_t total_k, int64_t max_q, int64_t max_k, int64_t D)
{
    fw_problem p = dense(1, 8, 8, total_q, total_k, D);
    p.kind = FW_CALL_VARLEN;
    p.batch = seqs;
    p.seqlen_q = max_q;
    p.seqlen_k = max_k;
    p.total_q = total_q;
    p.total_k = total_k;
    p.cu_seqlens_q = (const int32_t *)ADDR(0x900000);
    p.cu_seqlens_k = (const int32_t *)ADDR(0x910000);
    return p;
}

/* The plan the defaults make for p on di with knobs k: its mode and record are `atomic` and `record`. */
static void expect(const char *what, const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k, int atomic,
                   const char *record)
{
    fw_bwd_plan plan;
    char why[256] = "";
    const fw_status st = fw_bwd_recompute_plan(p, NULL, di, k, &plan, why, sizeof why);
    const char *name = st == FW_OK && plan.record ? plan.record->name : "(none)";
    const int fused = st == FW_OK && plan.record && plan.atomic && fw_bwd_fuses_dq(plan.record);
    const int want_fused = atomic && !strncmp(record, "ws-", 3);
    fwt_case(st == FW_OK && !plan.materialize && plan.atomic == atomic && !strcmp(name, record) && fused == want_fused,
             "%s: %s:%s (want %s:%s)%s%s", what, st == FW_OK && plan.atomic ? "atomic" : "deterministic", name,
             atomic ? "atomic" : "deterministic", record, why[0] ? "; " : "", why);
}

/* No plan for p on di: FW_ERR_UNSUPPORTED with a reason that names the shared memory. */
static void expect_unsupported(const char *what, const fw_problem *p, const fw_cuda_device_info *di)
{
    fw_bwd_plan plan;
    char why[256] = "";
    const fw_status st = fw_bwd_recompute_plan(p, NULL, di, &fw_knobs_defaults, &plan, why, sizeof why);
    fwt_case(st == FW_ERR_UNSUPPORTED && fwt_contains(why, "shared memory"), "%s: %s (%s)", what, fw_status_string(st),
             why);
}

static void hopper_defaults(void)
{
    const fw_knobs *k = &fw_knobs_defaults;
    fw_problem p = dense(4, 16, 16, 4096, 4096, 128);
    expect("D 128, 4096 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm64-dq-ws-bn64");
    p = dense(64, 16, 16, 256, 256, 128);
    expect("D 128, 256 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm64-dq-ws-bn64");
    p = dense(2, 32, 8, 100, 8192, 96);
    expect("D 96 (128's records), GQA 32/8, 8192 keys, 100 queries: dQ fused", &p, &HOPPER, k, 1, "ws-bm64-dq-ws-bn64");
    p = dense(4, 32, 32, 4096, 4096, 64);
    expect("D 64, 4096 keys: dQ fused, 128 query rows a step", &p, &HOPPER, k, 1, "ws-bm128-dq-ws-bn128");
    p = dense(1, 4, 4, 300, 5000, 40);
    expect("D 40 (64's records), 5000 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm128-dq-ws-bn128");
    p = dense(16, 32, 32, 1024, 1024, 64);
    expect("D 64, 1024 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm128-dq-ws-bn128");
    p.deterministic = 1;
    expect("D 64, 1024 keys, a deterministic context: the deterministic pipeline's short form", &p, &HOPPER, k, 0,
           "wg-bm128-dq-wg-bn128");
    p = dense(16, 32, 32, 2048, 2048, 64);
    p.deterministic = 1;
    expect("D 64, 2048 keys, a deterministic context: deterministic", &p, &HOPPER, k, 0, "ws-bm64-dq-ws-bn128");
    p = dense(1, 16, 16, 16384, 16384, 128);
    p.deterministic = 1;
    expect("D 128, 16384 keys, a deterministic context: deterministic", &p, &HOPPER, k, 0, "wg-bm64-ovl-dq-ws-bn64");
    p = ragged(16, 33785, 33785, 4096, 4096, 128);
    expect("ragged, D 128, longest sequence 4096 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm64-dq-ws-bn64");
    p = ragged(16, 33785, 33785, 4096, 4096, 64);
    expect("ragged, D 64, longest sequence 4096 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm128-dq-ws-bn128");
    p = ragged(16, 20000, 20000, 2048, 2048, 128);
    expect("ragged, D 128, longest sequence 2048 keys: dQ fused", &p, &HOPPER, k, 1, "ws-bm64-dq-ws-bn64");
    p.deterministic = 1;
    expect("ragged, D 128, a deterministic context: deterministic", &p, &HOPPER, k, 0, "wg-bm64-ovl-dq-ws-bn64");
    p = ragged(16, 20000, 20000, 2048, 2048, 64);
    p.deterministic = 1;
    expect("ragged, D 64, a deterministic context: deterministic", &p, &HOPPER, k, 0, "ws-bm64-dq-ws-bn128");
}

static void hopper_knobs(void)
{
    fw_knobs det = fw_knobs_defaults, atomic = fw_knobs_defaults, forced = fw_knobs_defaults;
    det.cuda_bwd_atomic = 0;
    atomic.cuda_bwd_atomic = 1;
    snprintf(forced.cuda_bwd_config, sizeof forced.cuda_bwd_config, "wg-bm64-ovl-dq-ws-bn64");
    fw_problem p = dense(2, 16, 16, 8192, 8192, 128);
    expect("FW_CUDA_BWD_DQ=deterministic, 8192 keys: deterministic", &p, &HOPPER, &det, 0, "wg-bm64-ovl-dq-ws-bn64");
    expect("FW_CUDA_BWD_CONFIG names a record, 8192 keys: that record, deterministic", &p, &HOPPER, &forced, 0,
           "wg-bm64-ovl-dq-ws-bn64");
    p = dense(16, 16, 16, 1024, 1024, 128);
    expect("FW_CUDA_BWD_DQ=atomic, D 128, 1024 keys: dQ fused", &p, &HOPPER, &atomic, 1, "ws-bm64-dq-ws-bn64");
    p = dense(16, 32, 32, 1024, 1024, 64);
    expect("FW_CUDA_BWD_DQ=atomic, D 64, 1024 keys: dQ fused", &p, &HOPPER, &atomic, 1, "ws-bm128-dq-ws-bn128");
    p = ragged(3, 500, 700, 300, 400, 64);
    expect("FW_CUDA_BWD_DQ=atomic, ragged D 64: dQ fused", &p, &HOPPER, &atomic, 1, "ws-bm128-dq-ws-bn128");
    /* a fuse record has no deterministic mode: the knob names it for the atomic one, a configuration for the other
     * is refused */
    fw_knobs fused = fw_knobs_defaults;
    snprintf(fused.cuda_bwd_config, sizeof fused.cuda_bwd_config, "ws-bm128-dq-ws-bn128");
    p = dense(16, 32, 32, 2048, 2048, 64);
    expect("FW_CUDA_BWD_CONFIG names a fuse record, D 64, 2048 keys: that record, dQ fused", &p, &HOPPER, &fused, 1,
           "ws-bm128-dq-ws-bn128");
    p.deterministic = 1;
    expect("FW_CUDA_BWD_CONFIG names a fuse record, a deterministic context: the deterministic default", &p, &HOPPER,
           &fused, 0, "ws-bm64-dq-ws-bn128");
    fw_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "bwd-deterministic:ws-bm128-dq-ws-bn128");
    fw_bwd_plan plan;
    char why[256] = "";
    const fw_status st = fw_bwd_recompute_plan(&p, &cfg, &HOPPER, &fw_knobs_defaults, &plan, why, sizeof why);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(why, "atomic mode only"),
             "configuration bwd-deterministic:ws-bm128-dq-ws-bn128: refused (%s: %s)", fw_status_string(st), why);
    snprintf(cfg.name, sizeof cfg.name, "bwd-atomic:ws-bm128-dq-ws-bn128");
    const fw_status sa = fw_bwd_recompute_plan(&p, &cfg, &HOPPER, &fw_knobs_defaults, &plan, why, sizeof why);
    fwt_case(sa == FW_OK && plan.atomic && plan.record && !strcmp(plan.record->name, "ws-bm128-dq-ws-bn128"),
             "configuration bwd-atomic:ws-bm128-dq-ws-bn128: that record, atomic (%s)", fw_status_string(sa));
}

static void elsewhere(void)
{
    const fw_knobs *k = &fw_knobs_defaults;
    fw_problem p = dense(2, 16, 16, 8192, 8192, 128);
    expect("A100, D 128, 8192 keys: mma.sync, dQ by atomics (the 2-D kernel's 173 KB do not fit: the next record)", &p,
           &AMPERE, k, 1, "bm64-w8-dq-w4-mt2-bn32");
    expect("99 KB (8.9), D 128: the 32-row record, dQ by atomics", &p, &ADA, k, 1, "bm32-w4-dq-w4-mt2-bn32");
    p.deterministic = 1;
    expect("A100, D 128, deterministic: the 32-row record", &p, &AMPERE, k, 0, "bm32-w4-dq-w4-mt2-bn32");
    fw_problem rg = ragged(16, 33785, 33785, 4096, 4096, 128);
    expect("A100, ragged D 128: the first record that fits with ragged kernels", &rg, &AMPERE, k, 1, "bm32-w4-dq-w4-mt2-bn32");
    expect("99 KB (8.9), D 128, deterministic: no tensor-core record fits, the smaller CUDA-core tile", &p, &ADA, k, 0,
           "cores-bm32-bn32");
    p = dense(2, 16, 16, 8192, 8192, 64);
    expect("A100, D 64, 8192 keys: mma.sync, dQ by atomics", &p, &AMPERE, k, 1, "bm64-w4-qs32-dq-w4-mt2-bn32");
    expect("99 KB (8.9), D 64, 8192 keys: mma.sync, dQ by atomics", &p, &ADA, k, 1, "bm64-w4-qs32-dq-w4-mt2-bn32");
    p.deterministic = 1;
    expect("99 KB (8.9), D 64, deterministic", &p, &ADA, k, 0, "bm64-w4-qs32-dq-w4-mt2-bn32");
    p = dense(2, 8, 8, 8192, 8192, 64);
    p.dtype = FW_F32;
    expect("f32 (exact), 8192 keys: the CUDA cores", &p, &HOPPER, k, 1, "cores");
    expect("99 KB (8.9), f32 (exact): the smaller CUDA-core tile", &p, &ADA, k, 1, "cores-bm64-bn32");
    p.precision = FW_PRECISION_3XTF32;
    expect("f32 in 3xtf32, 8192 keys: the tf32 record, deterministic", &p, &HOPPER, k, 0, "tf32-bm64-w4-dq-mt2-bn32");
    p = dense(2, 4, 4, 8192, 8192, 200);
    expect("D 200, 8192 keys: the CUDA cores", &p, &HOPPER, k, 1, "cores");
    expect("99 KB (8.9), D 200: the smaller CUDA-core tile", &p, &ADA, k, 1, "cores-bm16-bn16");
    expect_unsupported("48 KB: no CUDA-core record fits", &p, &SMALL);
    fw_knobs small_tile = fw_knobs_defaults;
    snprintf(small_tile.cuda_bwd_config, sizeof small_tile.cuda_bwd_config, "cores-bm16-bn16");
    expect("FW_CUDA_BWD_CONFIG names a smaller CUDA-core record, D 200: that record", &p, &HOPPER, &small_tile, 1,
           "cores-bm16-bn16");
    p = dense(2, 8, 8, 8192, 8192, 64);
    p.dtype = FW_F32;
    snprintf(small_tile.cuda_bwd_config, sizeof small_tile.cuda_bwd_config, "cores-bm64-bn32");
    expect("FW_CUDA_BWD_CONFIG names a smaller CUDA-core record, f32 D 64: that record", &p, &HOPPER, &small_tile, 1,
           "cores-bm64-bn32");
}

int main(void)
{
    hopper_defaults();
    hopper_knobs();
    elsewhere();
    return fwt_finish("test_bwd_plan", 0.0);
}
#endif
