/* Copy bandwidth on the cpu (multi-threaded, STREAM-like) and on a GPU (device-to-device copy). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bandwidth.h"
#include "fw_harness.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define COPIES 9

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double cpu_copy(int threads, size_t bytes, char *why, size_t why_len)
{
    if (threads <= 0) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    char *a = (char *)aligned_alloc(4096, bytes), *b = (char *)aligned_alloc(4096, bytes);
    if (!a || !b) {
        free(a); free(b);
        snprintf(why, why_len, "no memory for two %zu-byte buffers", bytes);
        return NAN;
    }
    double t[COPIES + 1];
    for (int rep = 0; rep <= COPIES; rep++) {
        const double t0 = fw_now_seconds();
#pragma omp parallel num_threads(threads)
        {
            /* the same static split every time: each thread copies the pages it first touched */
            const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
            const size_t lo = bytes / nt * id / 64 * 64, hi = id + 1 == nt ? bytes : bytes / nt * (id + 1) / 64 * 64;
            if (rep == 0) {
                memset(a + lo, 1, hi - lo);
                memset(b + lo, 0, hi - lo);
            } else {
                memcpy(b + lo, a + lo, hi - lo);
            }
        }
        t[rep] = fw_now_seconds() - t0;
    }
    free(a);
    free(b);
    return 2.0 * (double)bytes / median(t + 1, COPIES) / 1e9;
}

double fw_copy_bandwidth(fw_device dev, int threads, size_t bytes, char *why, size_t why_len)
{
    if (dev.kind == FW_DEVICE_CPU) return cpu_copy(threads, bytes, why, why_len);
#ifdef FW_HAVE_CUDA
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double t[COPIES], gbps = NAN;
    cudaError_t e = cudaSetDevice(dev.index);
    if (e == cudaSuccess) e = cudaMalloc(&a, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&b, bytes);
    if (e == cudaSuccess) e = cudaMemset(a, 1, bytes);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e == cudaSuccess) e = cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); /* warm-up */
    for (int rep = 0; rep < COPIES && e == cudaSuccess; rep++) {
        float ms = 0;
        e = cudaEventRecord(e0, 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
        if (e == cudaSuccess) e = cudaEventRecord(e1, 0);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
        t[rep] = ms * 1e-3;
    }
    if (e == cudaSuccess) gbps = 2.0 * (double)bytes / median(t, COPIES) / 1e9;
    else snprintf(why, why_len, "CUDA: %s", cudaGetErrorString(e));
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    (void)threads;
    return gbps;
#else
    (void)threads; (void)bytes;
    snprintf(why, why_len, "no CUDA in this build");
    return NAN;
#endif
}
