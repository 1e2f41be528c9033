/* cpu_flash_bench: the CPU performance table of docs/PERF.md (cpu-flash vs cpu-naive).
 *
 *   cpu_flash_bench [--peak GFLOPS] [--reps N] [--threads T] [--L L] [--quick]
 *
 * Every case is checked against the float64 reference once (harness contract), then timed: the
 * median of N calls (default 10) after 2 warm-up calls, on fresh random inputs. GFLOP/s counts
 * 4·(visible pairs)·D·B·H (so causal counts about half of 4·L²·D·B·H). With --peak (from fma_peak)
 * it also prints the fraction of that peak and the floor time FLOPs/peak.
 *
 * On a shared machine the peak moves with the load, so every timed call is paired with an FMA
 * burst (fma_kernel.h, same threads) just before it: "paired" is the median over the calls of
 * (call GFLOP/s) / (burst GFLOP/s), the efficiency under whatever load there was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fma_kernel.h"
#include "fw_harness.h"

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bcase {
    const char *backend;
    int64_t H, L, D;
    fw_dtype dtype;
    int causal;
} bcase;

int main(int argc, char **argv)
{
    double peak = 0;
    int reps = 10, threads = 0, quick = 0;
    int64_t L = 2048;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak") && i + 1 < argc) peak = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--L") && i + 1 < argc) L = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--peak GFLOPS] [--reps N] [--threads T] [--L L] [--quick]\n", argv[0]);
            return 2;
        }
    }
    const bcase all[] = {
        {"cpu-flash", 8, L, 64, FW_F32, 0},  {"cpu-flash", 8, L, 128, FW_F32, 0},
        {"cpu-flash", 8, L, 64, FW_F16, 0},  {"cpu-flash", 8, L, 128, FW_F16, 0},
        {"cpu-flash", 8, L, 64, FW_BF16, 0}, {"cpu-flash", 8, L, 128, FW_BF16, 0},
        {"cpu-flash", 8, L, 64, FW_F32, 1},  {"cpu-flash", 8, L, 128, FW_F32, 1},
        {"cpu-naive", 8, L, 64, FW_F32, 0},  {"cpu-naive", 8, L, 128, FW_F32, 0},
    };
    const int n = quick ? 2 : (int)(sizeof all / sizeof all[0]);
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) return 1;
    fw_context_set_threads(ctx, threads);
    printf("cpu simd %s, threads %d (0 = all), median of %d after 2 warm-up, B=1\n", fw_cpu_simd_level(), threads, reps);
    const int nthreads = threads > 0 ? threads : omp_get_num_procs();
    const int level = fma_level();
    double sink = 0;
    printf("%-10s %3s %5s %4s %5s %-6s %10s %9s %7s %9s %8s %8s %s\n", "backend", "H", "L", "D", "dtype", "mask",
           "median_ms", "GFLOP/s", "%peak", "floor_ms", "burst", "paired", "check");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const bcase *b = &all[i];
        fw_case c = fw_case_default();
        c.batch = 1; c.heads = b->H; c.kv_heads = b->H; c.seqlen_q = b->L; c.seqlen_k = b->L;
        c.head_dim = b->D; c.dtype = b->dtype; c.params.causal = b->causal; c.seed = 1234 + (uint64_t)i;
        fw_run r;
        char msg[512];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
            printf("alloc failed: %s\n", msg);
            return 1;
        }
        fw_context_set_backend(ctx, b->backend);
        fw_errors e;
        memset(&e, 0, sizeof e);
        fw_status st = fw_run_poison(&r);
        if (st == FW_OK) st = fw_run_forward(&r, ctx);
        if (st == FW_OK) st = fw_run_compare(&r, &e);
        double ms = 0, burst = 0, paired = 0;
        if (st == FW_OK) st = fw_run_time(&r, ctx, 2, reps, &ms);
        if (st == FW_OK && level > 0) {
            /* paired: FMA burst of about the call's length, then the call */
            double *ratio = (double *)malloc((size_t)reps * 2 * sizeof(double)), *bursts = ratio + reps;
            const long iters = (long)(ms * 1e-3 * 2e9 / 6.0) + 1000; /* ~1/3 of the call at ~2 FMA/cycle, 3 GHz */
            for (int k = 0; k < reps && st == FW_OK && ratio; k++) {
                bursts[k] = fma_burst_gflops(nthreads, iters, level, &sink);
                const double t0 = fw_now_seconds();
                st = fw_attention_forward(ctx, &r.q, &r.k, &r.v, &r.o, r.lse, &r.c.params);
                const double t = fw_now_seconds() - t0;
                ratio[k] = fw_run_flops(&r) / t * 1e-9 / bursts[k];
            }
            if (ratio) {
                qsort(ratio, (size_t)reps, sizeof(double), cmp_double);
                qsort(bursts, (size_t)reps, sizeof(double), cmp_double);
                paired = ratio[reps / 2];
                burst = bursts[reps / 2];
            }
            free(ratio);
        }
        if (st != FW_OK) {
            printf("%s: %s (%s)\n", b->backend, fw_status_string(st), fw_context_last_error(ctx));
            bad = 1;
        } else {
            const double gf = fw_run_flops(&r) / (ms * 1e-3) * 1e-9;
            printf("%-10s %3lld %5lld %4lld %5s %-6s %10.2f %9.1f %6.1f%% %9.2f %8.1f %7.1f%% %s (max_abs %.2g tol %.2g)\n",
                   b->backend, (long long)b->H, (long long)b->L, (long long)b->D, fw_dtype_name(b->dtype),
                   b->causal ? "causal" : "-", ms, gf, peak > 0 ? 100.0 * gf / peak : 0.0,
                   peak > 0 ? fw_run_flops(&r) / (peak * 1e9) * 1e3 : 0.0, burst, 100.0 * paired,
                   e.pass ? "ok" : "FAIL", e.max_abs, e.tol);
            if (!e.pass) bad = 1;
        }
        fflush(stdout);
        fw_run_free(&r);
    }
    fw_context_destroy(ctx);
    if (sink == 12345.0) printf(" \n");
    return bad;
}
