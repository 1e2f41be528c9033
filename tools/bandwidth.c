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

struct fw_copier {
    fw_device dev;
    int threads;
    size_t bytes;
    char *a, *b;
#ifdef FW_HAVE_CUDA
    cudaEvent_t e0, e1;
#endif
};

/* The cpu copy: the same static split every time, so each thread copies the pages it first touched. */
static void cpu_copy(fw_copier *c, int first)
{
#pragma omp parallel num_threads(c->threads)
    {
        const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        const size_t lo = c->bytes / nt * id / 64 * 64, hi = id + 1 == nt ? c->bytes : c->bytes / nt * (id + 1) / 64 * 64;
        if (first) {
            memset(c->a + lo, 1, hi - lo);
            memset(c->b + lo, 0, hi - lo);
        } else {
            memcpy(c->b + lo, c->a + lo, hi - lo);
        }
    }
}

fw_copier *fw_copier_open(fw_device dev, int threads, size_t bytes, char *why, size_t why_len)
{
    fw_copier *c = (fw_copier *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, why_len, "out of host memory");
        return NULL;
    }
    c->dev = dev;
    c->bytes = bytes;
    if (dev.kind == FW_DEVICE_CPU) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->threads = threads > 0 ? threads : n > 0 ? (int)n : 1;
        c->a = (char *)aligned_alloc(4096, bytes);
        c->b = (char *)aligned_alloc(4096, bytes);
        if (!c->a || !c->b) {
            snprintf(why, why_len, "no memory for two %zu-byte buffers", bytes);
            fw_copier_close(c);
            return NULL;
        }
        cpu_copy(c, 1);
        cpu_copy(c, 0); /* warm-up */
        return c;
    }
#ifdef FW_HAVE_CUDA
    cudaError_t e = cudaSetDevice(dev.index);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->a, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->b, bytes);
    if (e == cudaSuccess) e = cudaMemset(c->a, 1, bytes);
    if (e == cudaSuccess) e = cudaEventCreate(&c->e0);
    if (e == cudaSuccess) e = cudaEventCreate(&c->e1);
    if (e == cudaSuccess) e = cudaMemcpy(c->b, c->a, bytes, cudaMemcpyDeviceToDevice); /* warm-up */
    if (e != cudaSuccess) {
        snprintf(why, why_len, "CUDA: %s", cudaGetErrorString(e));
        fw_copier_close(c);
        return NULL;
    }
    return c;
#else
    snprintf(why, why_len, "no CUDA in this build");
    free(c);
    return NULL;
#endif
}

double fw_copier_run(fw_copier *c)
{
    if (c->dev.kind == FW_DEVICE_CPU) {
        const double t0 = fw_now_seconds();
        cpu_copy(c, 0);
        return fw_now_seconds() - t0;
    }
#ifdef FW_HAVE_CUDA
    float ms = 0;
    cudaError_t e = cudaSetDevice(c->dev.index);
    if (e == cudaSuccess) e = cudaEventRecord(c->e0, 0);
    if (e == cudaSuccess) e = cudaMemcpyAsync(c->b, c->a, c->bytes, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess) e = cudaEventRecord(c->e1, 0);
    if (e == cudaSuccess) e = cudaEventSynchronize(c->e1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, c->e0, c->e1);
    return e == cudaSuccess ? ms * 1e-3 : NAN;
#else
    return NAN;
#endif
}

size_t fw_copier_bytes(const fw_copier *c) { return c->bytes; }

void fw_copier_close(fw_copier *c)
{
    if (!c) return;
    if (c->dev.kind == FW_DEVICE_CPU) {
        free(c->a);
        free(c->b);
    }
#ifdef FW_HAVE_CUDA
    else {
        if (c->e0) cudaEventDestroy(c->e0);
        if (c->e1) cudaEventDestroy(c->e1);
        cudaFree(c->a);
        cudaFree(c->b);
    }
#endif
    free(c);
}
