/* GPU test of cuda-flash (f16/bf16 FlashAttention-2 on tensor cores) against the float64 reference,
 * with the contract tolerance (2x the input-dtype computation's error + 1e-5).
 *
 *   gpu_cuda_flash            the suite: FlashAttention's (Lq, Lk) pairs x head dims 40 (padded),
 *                             64, 80, 96, 128, 256 x causal, rotating f16/bf16, BHSD/BSHD, MHA/GQA/MQA;
 *                             windows, padded rows, NaN, large logits, every compiled configuration,
 *                             and the refusals (f32, head_dim 36, unaligned rows).
 *   gpu_cuda_flash --quick    a handful of small cases (for compute-sanitizer)
 *   gpu_cuda_flash --bench [reps]   the FA grid (16k tokens, hidden 2048, D 64/128, L 512..16384,
 *                             bf16, causal and not), every configuration: median ms and TFLOP/s.
 * Exit 77 where there is no CUDA device. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv, strdup */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"
#include "flashwatt.h"

#ifdef FW_HAVE_CUDA
#include <cuda_runtime.h>
#endif

typedef struct tcase {
    fw_case c;
    char label[160];
    const char *config; /* NULL: the default; else a config name run through the backend table */
    int nan_k;          /* plant a NaN in k */
    float big;          /* > 0: scale q and k by this (large logits) */
    int expect_unsupported;
    double cost;
} tcase;

static tcase *cases;
static int ncases, cap;

static tcase *add(void)
{
    if (ncases == cap) {
        cap = cap ? 2 * cap : 256;
        cases = (tcase *)realloc(cases, (size_t)cap * sizeof *cases);
        if (!cases) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    tcase *t = &cases[ncases++];
    memset(t, 0, sizeof *t);
    t->c = fw_case_default();
    t->c.device.kind = FW_DEVICE_CUDA;
    t->c.device.index = 0;
    t->c.want_lse = 1;
    t->c.seed = 1000u + (uint64_t)ncases;
    return t;
}

static void describe(tcase *t)
{
    const fw_case *c = &t->c;
    snprintf(t->label, sizeof t->label, "B%lld H%lld/%lld Lq%lld Lk%lld D%lld %s %s%s wl%lld wr%lld pad%d%s%s%s%s",
             (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->seqlen_q,
             (long long)c->seqlen_k, (long long)c->head_dim, fw_dtype_name(c->dtype), c->layout_bshd ? "bshd" : "bhsd",
             c->params.causal ? " causal" : "", (long long)c->params.window_left, (long long)c->params.window_right,
             c->pad, t->config ? " cfg=" : "", t->config ? t->config : "", t->nan_k ? " nan" : "",
             t->big > 0 ? " big-logits" : "");
    t->cost = (double)c->batch * (double)c->heads * (double)c->seqlen_q * (double)c->seqlen_k * (double)c->head_dim;
}

static void build_suite(int quick)
{
    static const int pairs[][2] = {{113, 203}, {128, 217}, {1023, 1024}, {1024, 1023},
                                   {239, 1},   {1, 239},   {799, 3},     {4224, 4224}};
    static const int dims[] = {40, 64, 80, 96, 128, 256};
    int k = 0;
    if (quick) {
        static const int qd[] = {40, 64, 128};
        for (int i = 0; i < 3; i++)
            for (int causal = 0; causal < 2; causal++) {
                tcase *t = add();
                t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 1;
                t->c.seqlen_q = 113; t->c.seqlen_k = 203; t->c.head_dim = qd[i];
                t->c.dtype = causal ? FW_BF16 : FW_F16;
                t->c.layout_bshd = i & 1;
                t->c.params.causal = causal;
                describe(t);
            }
        return;
    }
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++, k++) {
                tcase *t = add();
                const int big = pairs[pi][0] > 2000;
                t->c.seqlen_q = pairs[pi][0];
                t->c.seqlen_k = pairs[pi][1];
                t->c.head_dim = dims[di];
                t->c.params.causal = causal;
                /* k = 2 * cell + causal: rotate dtype (per causal value), layout and MHA/GQA/MQA
                 * over the cells so that every combination shows up across the suite */
                const int cell = k >> 1;
                t->c.dtype = ((cell & 1) ^ causal) ? FW_BF16 : FW_F16;
                t->c.layout_bshd = (cell >> 1) & 1;
                const int gqa = (cell >> 2) % 3; /* 0 MHA, 1 GQA, 2 MQA */
                t->c.batch = big ? 1 : 2;
                t->c.heads = big ? (gqa ? 2 : 1) : (gqa ? 4 : 2);
                t->c.kv_heads = gqa == 0 ? t->c.heads : gqa == 1 ? t->c.heads / 2 : 1;
                describe(t);
            }
    /* sliding windows */
    {
        tcase *t = add();
        t->c.batch = 2; t->c.heads = 2; t->c.kv_heads = 2; t->c.seqlen_q = 1023; t->c.seqlen_k = 1024;
        t->c.head_dim = 64; t->c.dtype = FW_BF16; t->c.params.causal = 1; t->c.params.window_left = 128;
        describe(t);
        t = add();
        t->c.batch = 1; t->c.heads = 4; t->c.kv_heads = 1; t->c.seqlen_q = 500; t->c.seqlen_k = 700;
        t->c.head_dim = 128; t->c.dtype = FW_F16; t->c.params.window_left = 50; t->c.params.window_right = 70;
        t->c.layout_bshd = 1;
        describe(t);
        t = add();
        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 2; t->c.seqlen_q = 1; t->c.seqlen_k = 239;
        t->c.head_dim = 96; t->c.dtype = FW_BF16; t->c.params.window_left = 10; t->c.params.window_right = 0;
        describe(t);
        t = add(); /* Lq > Lk with a window: many rows see nothing */
        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 2; t->c.seqlen_q = 700; t->c.seqlen_k = 300;
        t->c.head_dim = 64; t->c.dtype = FW_F16; t->c.params.window_left = 33; t->c.params.window_right = 5;
        describe(t);
    }
    /* padded (non-contiguous) rows, 16-byte aligned */
    {
        tcase *t = add();
        t->c.batch = 2; t->c.heads = 3; t->c.kv_heads = 3; t->c.seqlen_q = 239; t->c.seqlen_k = 300;
        t->c.head_dim = 64; t->c.dtype = FW_BF16; t->c.pad = 8; t->c.layout_bshd = 1;
        describe(t);
        t = add();
        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 1; t->c.seqlen_q = 300; t->c.seqlen_k = 239;
        t->c.head_dim = 128; t->c.dtype = FW_F16; t->c.pad = 16; t->c.params.causal = 1;
        describe(t);
    }
    /* NaN in k; large logits */
    {
        tcase *t = add();
        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 2; t->c.seqlen_q = 200; t->c.seqlen_k = 300;
        t->c.head_dim = 64; t->c.dtype = FW_BF16; t->c.params.causal = 1; t->nan_k = 1;
        describe(t);
        t = add();
        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 2; t->c.seqlen_q = 256; t->c.seqlen_k = 256;
        t->c.head_dim = 128; t->c.dtype = FW_F16; t->big = 6.0f;
        describe(t);
    }
    /* every compiled configuration of every padded head dim, on a boundary-heavy shape */
    {
        static const int pd[] = {32, 64, 96, 128, 256};
        const fw_backend *b = fw_registry_find("cuda-flash");
        for (int i = 0; b && i < 5; i++)
            for (int causal = 0; causal < 2; causal++) {
                fw_problem p;
                memset(&p, 0, sizeof p);
                p.head_dim = pd[i];
                p.seqlen_q = 333; p.seqlen_k = 517; p.batch = 1; p.heads = 2;
                fw_config cfg[FW_MAX_CONFIGS];
                const int n = b->configs ? b->configs(&p, cfg, FW_MAX_CONFIGS) : 0;
                for (int j = 0; j < n; j++) {
                    if (!cfg[j].name[0]) continue;
                    for (int dt = 0; dt < 2; dt++) {
                        tcase *t = add();
                        t->c.batch = 1; t->c.heads = 2; t->c.kv_heads = 1;
                        t->c.seqlen_q = 333; t->c.seqlen_k = 517; t->c.head_dim = pd[i];
                        t->c.dtype = dt ? FW_BF16 : FW_F16; t->c.params.causal = causal;
                        t->c.layout_bshd = dt;
                        t->config = strdup(cfg[j].name);
                        describe(t);
                    }
                }
            }
    }
    /* refusals */
    {
        tcase *t = add();
        t->c.head_dim = 64; t->c.dtype = FW_F32; t->expect_unsupported = 1;
        describe(t);
        t = add();
        t->c.head_dim = 36; t->c.dtype = FW_F16; t->expect_unsupported = 1;
        describe(t);
        t = add();
        t->c.head_dim = 64; t->c.dtype = FW_BF16; t->c.pad = 3; t->expect_unsupported = 1;
        describe(t);
    }
}

static int by_cost_desc(const void *a, const void *b)
{
    const double x = ((const tcase *)a)->cost, y = ((const tcase *)b)->cost;
    return (x < y) - (x > y);
}

/* Runs one case; returns 1 on pass. Thread-safe (own context, own buffers). */
static int run_case(tcase *t, char *line, size_t len)
{
    fw_run r;
    char msg[512];
    fw_context *ctx = NULL;
    int ok = 0;
    fw_status st = fw_run_alloc(&r, &t->c, msg, sizeof msg);
    if (st != FW_OK) {
        snprintf(line, len, "%s: alloc failed: %s", t->label, msg);
        return 0;
    }
    if (fw_context_create(&ctx) != FW_OK || fw_context_set_backend(ctx, "cuda-flash") != FW_OK) {
        snprintf(line, len, "%s: context failed", t->label);
        fw_run_free(&r);
        return 0;
    }
    if (t->nan_k) fw_run_set_input(&r, 'k', 0, 1, 17, 3, NAN);
    if (t->big > 0) fw_run_scale_inputs(&r, t->big, t->big);
    fw_run_poison(&r);
    if (t->config) {
        const fw_backend *b = fw_registry_find("cuda-flash");
        fw_config cfg;
        memset(&cfg, 0, sizeof cfg);
        snprintf(cfg.name, sizeof cfg.name, "%s", t->config);
        fw_exec ex = {1, NULL, msg, sizeof msg, NULL};
        msg[0] = 0;
        st = b->forward(&r.problem, &cfg, &ex);
#ifdef FW_HAVE_CUDA
        if (st == FW_OK && cudaDeviceSynchronize() != cudaSuccess) {
            snprintf(msg, sizeof msg, "%s", cudaGetErrorString(cudaGetLastError()));
            st = FW_ERR_DEVICE;
        }
#endif
    } else {
        st = fw_run_forward(&r, ctx);
        snprintf(msg, sizeof msg, "%s", fw_context_last_error(ctx));
    }
    if (t->expect_unsupported) {
        ok = st == FW_ERR_UNSUPPORTED && msg[0];
        snprintf(line, len, "%s: refused as expected? status %s: %s", t->label, fw_status_string(st), msg);
    } else if (st != FW_OK) {
        snprintf(line, len, "%s: forward failed: %s: %s", t->label, fw_status_string(st), msg);
    } else {
        fw_errors e;
        st = fw_run_compare(&r, &e);
        if (st != FW_OK) {
            snprintf(line, len, "%s: compare failed: %s", t->label, fw_status_string(st));
        } else {
            ok = e.pass;
            snprintf(line, len, "%s: max_abs %.3g (tol %.3g, lowp %.3g) rel_l2 %.3g lse %.3g unwritten %ld stray %ld nan_mismatch %ld",
                     t->label, e.max_abs, e.tol, e.lowp_err, e.rel_l2, e.lse_max_abs, e.unwritten, e.stray,
                     e.nan_mismatch);
        }
    }
    fw_context_destroy(ctx);
    fw_run_free(&r);
    return ok;
}

static int bench(int reps)
{
    const fw_backend *b = fw_registry_find("cuda-flash");
    static const int dims[] = {64, 128};
    printf("%-4s %-6s %-3s %-6s %-22s %9s %9s\n", "D", "L", "c", "B", "config", "ms", "TFLOP/s");
    for (int di = 0; di < 2; di++)
        for (int L = 512; L <= 16384; L *= 2)
            for (int causal = 0; causal < 2; causal++) {
                fw_case c = fw_case_default();
                c.device.kind = FW_DEVICE_CUDA;
                c.dtype = FW_BF16;
                c.head_dim = dims[di];
                c.heads = c.kv_heads = 2048 / dims[di];
                c.batch = 16384 / L;
                c.seqlen_q = c.seqlen_k = L;
                c.params.causal = causal;
                c.seed = 7;
                fw_run r;
                char msg[512];
                if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
                    printf("alloc failed: %s\n", msg);
                    return 1;
                }
                fw_config cfg[FW_MAX_CONFIGS];
                const int n = b->configs(&r.problem, cfg, FW_MAX_CONFIGS);
                fw_context *ctx = NULL;
                fw_context_create(&ctx);
                fw_context_set_backend(ctx, "cuda-flash");
                for (int j = 0; j < n; j++) {
                    setenv("FW_CUDA_FLASH_CONFIG", cfg[j].name, 1);
                    double ms = 0;
                    fw_status st = fw_run_time(&r, ctx, 3, reps, &ms);
                    if (st != FW_OK) {
                        printf("%-4d %-6d %-3d %-6lld %-22s failed: %s\n", dims[di], L, causal, (long long)c.batch,
                               cfg[j].name, fw_context_last_error(ctx));
                        continue;
                    }
                    printf("%-4d %-6d %-3d %-6lld %-22s %9.4f %9.1f%s\n", dims[di], L, causal, (long long)c.batch,
                           cfg[j].name, ms, fw_run_flops(&r) / (ms * 1e-3) / 1e12, j == 0 ? "  (default)" : "");
                    fflush(stdout);
                }
                unsetenv("FW_CUDA_FLASH_CONFIG");
                fw_context_destroy(ctx);
                fw_run_free(&r);
            }
    return 0;
}

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    if (fw_cuda_device_count() < 1) {
        printf("gpu_cuda_flash: no CUDA device, skipped\n");
        return 77;
    }
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bench") == 0) return bench(i + 1 < argc ? atoi(argv[i + 1]) : 30);
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
    }
    build_suite(quick);
    qsort(cases, (size_t)ncases, sizeof *cases, by_cost_desc);
    int *okv = (int *)calloc((size_t)ncases, sizeof(int));
    char (*lines)[768] = (char (*)[768])calloc((size_t)ncases, 768);
    if (!okv || !lines) return 2;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < ncases; i++) okv[i] = run_case(&cases[i], lines[i], 768);
    for (int i = 0; i < ncases; i++) fwt_case(okv[i], "%s", lines[i]);
    free(okv);
    free(lines);
    return fwt_finish("gpu_cuda_flash", fw_now_seconds() - t0);
}
