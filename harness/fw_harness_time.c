/* The harness's timing: median milliseconds of forward, and forward + backward, calls. */
#include "fw_harness.h"

#include <stdlib.h>
#include <time.h>
#include "fw_harness_impl.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

double fw_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

fw_status fw_time_calls(fw_run *r, fw_timed_call call, void *arg, int warmup, int reps, double *median_ms)
{
    if (reps < 1) reps = 1;
    double *t = (double *)malloc((size_t)reps * sizeof(double));
    if (!t) return FW_ERR_OUT_OF_MEMORY;
    fw_status st = FW_OK;
    for (int i = 0; i < warmup && st == FW_OK; i++) st = call(r, arg);
    if (st == FW_OK) st = fwh_sync(r);
    if (!fwh_on_gpu(r)) {
        for (int i = 0; i < reps && st == FW_OK; i++) {
            const double t0 = fw_now_seconds();
            st = call(r, arg);
            t[i] = (fw_now_seconds() - t0) * 1e3;
        }
    }
#ifdef FW_HAVE_CUDA
    else if (st == FW_OK) {
        cudaEvent_t ea, eb;
        if (cudaEventCreate(&ea) != cudaSuccess) { free(t); return FW_ERR_DEVICE; }
        if (cudaEventCreate(&eb) != cudaSuccess) { cudaEventDestroy(ea); free(t); return FW_ERR_DEVICE; }
        for (int i = 0; i < reps && st == FW_OK; i++) {
            cudaEventRecord(ea, 0);
            st = call(r, arg);
            cudaEventRecord(eb, 0);
            if (cudaEventSynchronize(eb) != cudaSuccess) st = FW_ERR_DEVICE;
            float ms = 0;
            cudaEventElapsedTime(&ms, ea, eb);
            t[i] = ms;
        }
        cudaEventDestroy(ea);
        cudaEventDestroy(eb);
        if (st == FW_OK) st = fwh_sync(r);
    }
#endif
    if (st == FW_OK) {
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
    free(t);
    return st;
}

static fw_status forward_call(fw_run *r, void *arg)
{
    return fw_run_call(r, (fw_context *)arg);
}

fw_status fw_run_time(fw_run *r, fw_context *ctx, int warmup, int reps, double *median_ms)
{
    return fw_time_calls(r, forward_call, ctx, warmup, reps, median_ms);
}

fw_status fw_run_time_window(fw_run *r, fw_context *ctx, int calls, double *ms_per_call)
{
    if (calls < 1) calls = 1;
    fw_status st = FW_OK;
    if (!fwh_on_gpu(r)) {
        const double t0 = fw_now_seconds();
        for (int i = 0; i < calls && st == FW_OK; i++) st = fw_run_call(r, ctx);
        *ms_per_call = (fw_now_seconds() - t0) * 1e3 / calls;
        return st;
    }
#ifdef FW_HAVE_CUDA
    cudaEvent_t ea, eb;
    if (cudaEventCreate(&ea) != cudaSuccess) return FW_ERR_DEVICE;
    if (cudaEventCreate(&eb) != cudaSuccess) {
        cudaEventDestroy(ea);
        return FW_ERR_DEVICE;
    }
    cudaEventRecord(ea, 0);
    for (int i = 0; i < calls && st == FW_OK; i++) st = fw_run_call(r, ctx);
    cudaEventRecord(eb, 0);
    if (cudaEventSynchronize(eb) != cudaSuccess && st == FW_OK) st = FW_ERR_DEVICE;
    float ms = 0;
    if (st == FW_OK && cudaEventElapsedTime(&ms, ea, eb) != cudaSuccess) st = FW_ERR_DEVICE;
    *ms_per_call = (double)ms / calls;
    cudaEventDestroy(ea);
    cudaEventDestroy(eb);
#endif
    return st;
}

typedef struct fwd_bwd_arg {
    fw_bwd *b;
    fw_context *ctx;
} fwd_bwd_arg;

static fw_status fwd_bwd_call(fw_run *r, void *arg)
{
    fw_bwd *b = ((fwd_bwd_arg *)arg)->b;
    fw_context *ctx = ((fwd_bwd_arg *)arg)->ctx;
    fw_status st = fw_run_call(r, ctx);
    if (st == FW_OK) st = fwh_bwd_call(r, b, ctx);
    return st;
}

fw_status fw_bwd_time(fw_run *r, fw_bwd *b, fw_context *ctx, int warmup, int reps, double *median_ms)
{
    fwd_bwd_arg a = {b, ctx};
    return fw_time_calls(r, fwd_bwd_call, &a, warmup, reps, median_ms);
}
