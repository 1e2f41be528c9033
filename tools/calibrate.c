/* What a backend's call will cost, from small calibration runs: flashwatt bench uses it to skip rows that would
 * take too long (--max-call-s, --max-ref-s) and to show progress on long ones. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "flashwatt.h"
#include "args.h"
#include "calibrate.h"
#include "fw_harness.h"

typedef struct calib {
    char backend[FW_NAME_MAX]; /* "" = the reference */
    fw_device_kind device;
    fw_dtype dtype;
    int64_t head_dim;
    int threads;
    double flops_per_s; /* 0 = could not calibrate */
} calib;

static calib calibs[256];
static int ncalib;

/* FLOP/s of one backend on shape s (warm calls, then the best of timed calls), or of the float64
 * reference comparison when backend is NULL (on the cpu). 0 when it cannot run. */
double fw_calib_measure(const char *backend, const fw_shape *s, fw_device dev, int warm, int timed)
{
    double rate = 0;
    fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_case c = fw_shape_case(s, backend ? dev : cpu, 12345, 0);
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) return 0;
    if (!backend) {
        fw_errors e;
        fw_run_poison(&r);
        const double t0 = fw_now_seconds();
        if (fw_run_compare(&r, &e) == FW_OK) rate = fw_run_flops(&r) / fmax(fw_now_seconds() - t0, 1e-6);
    } else {
        fw_context *ctx = NULL;
        int ok = fw_context_create(&ctx) == FW_OK && fw_context_set_backend(ctx, backend) == FW_OK &&
                 fw_context_set_threads(ctx, s->threads) == FW_OK &&
                 fw_run_supports(&r, backend, NULL, 0) == FW_OK;
        for (int i = 0; ok && i < warm; i++) ok = fw_run_forward(&r, ctx) == FW_OK;
        double best = INFINITY;
        for (int i = 0; ok && i < timed; i++) {
            const double t0 = fw_now_seconds();
            ok = fw_run_forward(&r, ctx) == FW_OK;
            best = fmin(best, fw_now_seconds() - t0);
        }
        if (ok && isfinite(best)) rate = fw_run_flops(&r) / fmax(best, 1e-7);
        fw_context_destroy(ctx);
    }
    fw_run_free(&r);
    return rate;
}

static calib *calib_find(const char *backend, fw_device dev, fw_dtype dtype, int64_t head_dim, int threads)
{
    const char *key = backend ? backend : "";
    for (int i = 0; i < ncalib; i++)
        if (!strcmp(calibs[i].backend, key) && calibs[i].device == dev.kind && calibs[i].dtype == dtype &&
            calibs[i].head_dim == head_dim && calibs[i].threads == threads)
            return &calibs[i];
    return NULL;
}

/* A measured rate on a real row replaces the calibration: the sweep's own last shape predicts its
 * next (bigger) one better than the small calibration problem does. */
void fw_calib_learn(const char *backend, fw_device dev, fw_dtype dtype, int64_t head_dim, int threads,
                        double flops_per_s)
{
    calib *k = calib_find(backend, dev, dtype, head_dim, threads);
    if (k && flops_per_s > 0 && isfinite(flops_per_s)) k->flops_per_s = flops_per_s;
}

/* FLOP/s of backend (or of the reference comparison when backend is NULL) on a small problem of
 * this dtype/head_dim, or as last measured; cached. */
double fw_calib_rate(const char *backend, fw_device dev, fw_dtype dtype, int64_t head_dim, int threads)
{
    const char *key = backend ? backend : "";
    const calib *found = calib_find(backend, dev, dtype, head_dim, threads);
    if (found) return found->flops_per_s;
    fw_shape s;
    memset(&s, 0, sizeof s);
    s.batch = 1;
    s.heads = dev.kind == FW_DEVICE_CUDA ? 16 : 4;
    s.kv_heads = s.heads;
    s.seqlen_q = s.seqlen_k = dev.kind == FW_DEVICE_CUDA ? 1024 : 256;
    s.head_dim = head_dim;
    s.dtype = dtype;
    s.window_left = s.window_right = FW_WINDOW_UNLIMITED;
    s.threads = threads;
    const double rate = fw_calib_measure(backend, &s, dev, 1, 2);
    if (ncalib < (int)(sizeof calibs / sizeof calibs[0])) {
        calib *k = &calibs[ncalib++];
        snprintf(k->backend, sizeof k->backend, "%s", key);
        k->device = dev.kind;
        k->dtype = dtype;
        k->head_dim = head_dim;
        k->threads = threads;
        k->flops_per_s = rate;
    }
    return rate;
}

